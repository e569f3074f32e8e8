"""The steps the CLI strings together, over one fleet (no printing here).

Every command that takes a spec computes its fleet once (`gpuvalues.fleet.build_fleet`,
checked by `gpuvalues.checks.fleet`) and shows a part of it: `plan` the layout and the
node side, `values` the releases' values files and the node side, `validate` the
findings, `render` every release through helm. Each function takes file paths (`-` is
stdin), returns data or raises a `GpuValuesError`; the CLI only parses arguments and prints.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from gpuvalues.yamlio.inputs import read_text
from gpuvalues.yamlio.loader import expect_mapping, format_path, load_mapping, load_yaml
from gpuvalues.yamlio.writer import dump
from gpuvalues.bundle import EXAMPLE_SPEC
from gpuvalues.checks.fleet import build_checked, check_fleet
from gpuvalues.checks.rules import Context, values_findings, warnings_or_raise
from gpuvalues.checks.spec import check_spec, load_spec, parse_spec
from gpuvalues.errors import Finding, GpuValuesError, PlanError, ValidationFailed, errors_only
from gpuvalues.fleet import Fleet, Release, build_fleet, routing
from gpuvalues.fleet.spec import Spec
from gpuvalues.io.files import write_all
from gpuvalues.kube import supported_kube_minor

if TYPE_CHECKING:
    from gpuvalues.operations.doctor import Report
    from gpuvalues.planners.mig.milp.model import PlanPool
    from gpuvalues.planners.mig.replan import CurrentLayout, Replan

__all__ = ["fleet_of", "plan_data", "rendered", "release_values_text", "combined_values",
           "write_values", "write_node_side", "install_commands", "values_targets", "rendered_data", "check", "fit_report",
           "fit_values", "checked_values_file", "doctor"]

Progress = Callable[[str], None]


def fleet_of(spec_path: str | Path | None, **kw: Any) -> Fleet:
    """Load a spec (the built-in example when None) and build its checked fleet
    (`ValidationFailed` with every error)."""
    return build_checked(load_spec(spec_path or EXAMPLE_SPEC), **kw)


def plan_data(fleet: Fleet) -> dict:
    """`gpuvalues plan`: the fleet's layout as plain data -- workloads (pool, resource,
    peak replicas, what the layout gives), node groups, the MIG solve (LP bound, gap,
    baselines) and the node side exactly as `values --artifacts` writes it."""
    layout = fleet.layout
    # GPUs the layout uses: whole GPUs of whole/tensor-parallel replicas, every GPU of a
    # sharing node group, the GPUs the MIG solve lays out
    gpus = sum(layout.units.get(p.workload, 0) for p in fleet.placements if p.whole_gpus)
    gpus += sum(g.nodes * fleet.spec.pool(g.pool).gpus_per_node for g in layout.node_groups
                if any(p.mode == "shared" for p in fleet.placements if p.workload in g.workloads))
    gpus += layout.plan.gpus_used if layout.plan is not None else 0
    mig = None
    if layout.plan is not None:
        mig = layout.plan.to_dict()
        for key in ("mig_parted_config", "node_labels", "device_plugin_configs"):
            mig.pop(key)                      # the fleet's own node side below is the one
    return {
        "gpus_in_use": gpus,
        "gpus_total": sum(p.gpus for p in fleet.spec.node_pools),
        "workloads": [{"name": p.workload, "pool": p.pool.name, "mode": p.mode,
                       "resource": p.resource, "per_pod": p.count,
                       "nodes_per_replica": p.nodes,
                       "peak_replicas": fleet.peaks[p.workload],
                       "units": layout.units.get(p.workload, 0), "why": p.why}
                      for p in fleet.placements],
        "node_groups": [{"name": g.name, "pool": g.pool, "nodes": g.nodes,
                         "workloads": list(g.workloads), "labels": dict(g.labels)}
                        for g in layout.node_groups],
        "mig": mig,
        "routes": routes_data(fleet.spec),
        "notes": list(fleet.decisions),
        "node_side": fleet.node_side(),
    }


def routes_data(spec: Spec) -> list[dict[str, Any]]:
    """With a `gateway`: for each vLLM workload, the Gateway its HTTPRoute attaches to, the
    header it matches and the OpenAI `model` names it sends to the workload's InferencePool."""
    g = spec.gateway
    if g is None:
        return []
    return [{"workload": w.name, "gateway": f"{g.namespace or w.namespace}/{g.name}",
             "header": routing.MODEL_HEADER,
             "models": list(routing.model_names(w.model, (n for n, _ in w.lora)))}
            for w in spec.workloads if w.server == "vllm"]


def release_values_text(release: Release) -> str:
    """One release's values file: why each choice was made, as comments, then the YAML."""
    what = "the GPU platform" if release.is_platform else f"workload {release.workload}"
    if release.facts.get("chart"):
        what = f"the {release.facts['chart']} chart {release.facts['version']}"
    lines = [f"# Generated by gpuvalues: release {release.name} ({what}) in namespace "
             f"{release.namespace}. Why:"]
    lines += [f"#   {d}" for d in release.decisions]
    # the gpu-operator chart takes its ConfigMaps' files as strings: written as blocks
    dumper = _block_strings_dumper() if release.facts.get("chart") else None
    return "\n".join(lines) + "\n" + dump(dict(release.values), dumper=dumper)


def _block_strings_dumper() -> type:
    """A safe dumper that writes multi-line strings as literal blocks (`|`)."""
    import yaml

    class BlockStrings(yaml.SafeDumper):
        pass

    def string(dumper, value):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)
    BlockStrings.add_representer(str, string)
    return BlockStrings


def combined_values(fleet: Fleet) -> Release:
    """A one-workload fleet as one release (workload and platform together): what
    `values SPEC -o FILE` writes for `helm install NAME charts/gpu-inference -f FILE`."""
    if len(fleet.workloads) != 1:
        raise GpuValuesError(f"the spec has {len(fleet.workloads)} workloads: give -o a "
                             "directory (one values file per release), or pick one with --workload")
    w = fleet.workloads[0]
    platform = dict(fleet.platform.values["platform"])
    platform["alerts"] = dict(platform["alerts"], gpuRules=True)
    values = {**w.values, "platform": platform}
    return replace(w, values=values, decisions=w.decisions + fleet.platform.decisions)


def _operator(fleet: Fleet) -> tuple[Release, ...]:
    """The gpu-operator chart's release, when the spec runs the GPU Operator."""
    return (fleet.gpu_operator,) if fleet.gpu_operator is not None else ()


def _node_side_files(fleet: Fleet, directory: str | Path) -> list[tuple[Path, str]]:
    return [(Path(directory) / name, dump(data)) for name, data in fleet.node_side().items()]


def _write_outputs(outputs: list[tuple[Path, str]], folders: list[Path]) -> list[Path]:
    """Write `outputs` as one (`write_all`: all or none) into `folders`, made when
    missing and removed again (with every parent this call made), if the write fails."""
    made: list[Path] = []
    for f in dict.fromkeys(folders):
        missing = [p for p in (f, *f.parents) if not p.exists()]
        made += [p for p in reversed(missing) if p not in made]
    try:
        for f in made:
            f.mkdir()
        write_all(outputs)
    except BaseException:
        for f in reversed(made):
            with contextlib.suppress(OSError):
                f.rmdir()
        raise
    return [path for path, _ in outputs]


def write_node_side(fleet: Fleet, directory: str | Path) -> list[Path]:
    """The node side (mig-parted config, device-plugin configs, node labels and groups)
    as files in `directory`, written as one."""
    return _write_outputs(_node_side_files(fleet, directory), [Path(directory)])


def values_targets(fleet: Fleet, out: str, workload: str | None = None) -> tuple[list[tuple[Release, Path]], bool]:
    """Which release goes to which file for `values -o OUT`, and whether OUT is a folder.
    One rule: OUT is a folder when it ends in `/`, is a folder already, or the spec has
    several workloads and no --workload picks one (then `<release>.values.yaml` per
    release, platform first); else OUT is the one file (the --workload release, or a
    one-workload spec's combined release). A file where a folder is needed is GV040."""
    target = Path(out)
    folder = out.endswith(("/", os.sep)) or target.is_dir() or (not workload and len(fleet.workloads) != 1)
    if folder:
        if target.exists() and not target.is_dir():
            raise GpuValuesError(f"is a file, but {len(fleet.releases)} releases need a folder: give a folder "
                                 "(or --workload NAME for one file)", source=out, field="-o", code="GV040")
        releases = [fleet.release(workload)] if workload else [*fleet.releases, *_operator(fleet)]
        return [(r, target / f"{r.name}.values.yaml") for r in releases], True
    one = fleet.release(workload) if workload else combined_values(fleet)
    return [(one, target)], False


def write_values(fleet: Fleet, out: str | None, artifacts: str | None,
                 workload: str | None = None) -> list[Path]:
    """Write the values (`values_targets` says where) and, with `artifacts`, the node side.
    All files are written as one: a failure leaves every target as it was, and folders this
    made are removed (gpuvalues.io.files.write_all; a kill -9 is completed by the next run)."""
    outputs: list[tuple[Path, str]] = []
    folders: list[Path] = []
    if out:
        targets, is_folder = values_targets(fleet, out, workload)
        if is_folder:
            folders.append(Path(out))
        outputs += [(path, release_values_text(r)) for r, path in targets]
    if artifacts:
        folders.append(Path(artifacts))
        outputs += _node_side_files(fleet, artifacts)
        if not any(p.name == "gpu-operator.values.yaml" for p, _ in outputs):
            # one-release file mode: the gpu-operator chart's values go with the node side
            outputs += [(Path(artifacts) / f"{r.name}.values.yaml", release_values_text(r))
                        for r in _operator(fleet)]
    files_ = {os.path.abspath(p) for p, _ in outputs}
    for f in folders:          # `-o two --artifacts two/nodes` with `two` the one values file
        clash = next((p for p in (Path(f), *Path(f).parents) if os.path.abspath(p) in files_), None)
        if clash is not None:
            raise GpuValuesError(f"is both a values file and a folder of {f}: give --artifacts a folder "
                                 "outside it, or -o a folder", source=str(clash), field="--artifacts",
                                 code="GV040")
    return _write_outputs(outputs, folders)


# NFD's NodeFeature CRDs, as node-feature-discovery's docs install them, at the chart's NFD tag
NFD_CRDS = ("https://github.com/kubernetes-sigs/node-feature-discovery/deployment/base/nfd-crds"
            "?ref=v0.18.3")


def label_commands(fleet: Fleet) -> list[str]:
    """One bash line per node group: take as many of its pool's nodes (the pool's
    nodeSelector) that no group claimed yet, in name order, as the group still lacks, and
    put the group's labels on them with GROUP_LABEL=<group>; a rerun labels nothing
    (docs/day1-contract.md). `sed -n 1,Np`, not `head`: it reads all its input, so no
    SIGPIPE fails the pipeline under pipefail."""
    import shlex

    from gpuvalues.fleet.spec import GROUP_LABEL

    out = []
    for g in (fleet.layout.node_groups if fleet.layout else ()):
        pool = fleet.spec.pool(g.pool)
        selector = ",".join([f"{k}={v}" for k, v in sorted(pool.selector.items())] + [f"!{GROUP_LABEL}"])
        labels = " ".join(shlex.quote(f"{k}={v}") for k, v in {**g.labels, GROUP_LABEL: g.name}.items())
        mine = shlex.quote(f"{GROUP_LABEL}={g.name}")
        out.append(f"n=$(({g.nodes} - $(kubectl get nodes -l {mine} -o name | wc -l))); "
                   f"if [ \"$n\" -gt 0 ]; then kubectl get nodes -l {shlex.quote(selector)} -o name "
                   f"| sort | sed -n \"1,${{n}}p\" | xargs -r -I{{}} kubectl label --overwrite {{}} {labels}; fi")
    return out


def install_commands(fleet: Fleet, out: str, artifacts: str | Path | None = None,
                     workload: str | None = None, chart: str | os.PathLike | None = None) -> list[str]:
    """The commands (bash lines) that install what `values -o OUT` wrote from bare nodes,
    in order: NFD's CRDs when the platform deploys NFD, the node groups' labels
    (`label_commands`), the GPU Operator's chart with its values (gpuOperator: true), the
    platform release, then each workload's release; for one file, its one release. Paths
    are absolute and quoted for the shell, so the commands work from any folder; the chart
    is `chart`, else the one gpuvalues renders (bundle.chart_dir)."""
    import shlex

    from gpuvalues.bundle import chart_dir

    chart_path = shlex.quote(os.path.realpath(chart_dir(chart)))
    out_ = []
    if fleet.platform.values.get("platform", {}).get("nfd", {}).get("enabled"):
        out_.append(f'kubectl apply --server-side -k "{NFD_CRDS}"')
    out_ += label_commands(fleet)
    targets, is_folder = values_targets(fleet, out, workload)
    for op in _operator(fleet):
        where = Path(out) if is_folder else Path(artifacts) if artifacts else None
        if where is None:
            out_.append("# the gpu-operator chart's values: give -o a folder or --artifacts DIR")
            continue
        out_.append(f"helm repo add nvidia {op.facts['repo']} --force-update")
        out_.append(f"helm upgrade --install {op.name} {op.facts['chart']} --version {op.facts['version']} "
                    f"--namespace {op.namespace} --create-namespace -f "
                    f"{shlex.quote(os.path.abspath(where / (op.name + '.values.yaml')))}")
    for r, path in targets:
        if r is fleet.gpu_operator:
            continue                     # installed above, from NVIDIA's chart
        out_.append(f"helm upgrade --install {shlex.quote(r.name)} {chart_path} --namespace "
                    f"{shlex.quote(r.namespace)} --create-namespace -f {shlex.quote(os.path.abspath(path))}")
    return out_


def rendered_data(streams: list[tuple[Release | None, str]], warnings: list[Finding]) -> dict:
    """`render --output json|yaml`: every release's objects as data, and the warnings."""
    from gpuvalues.render.helm import parse_manifests

    return {"releases": [{"release": r.name if r else None, "namespace": r.namespace if r else None,
                          "objects": parse_manifests(text)} for r, text in streams],
            "warnings": [f.as_dict() for f in warnings]}


def rendered(spec_path: str | Path | None = None, *, values_path: str | Path | None = None,
             workload: str | None = None, helm: str | None = None, kube_version: str | None = None,
             chart: str | None = None, progress: Progress = lambda _: None
             ) -> tuple[list[tuple[Release | None, str]], list[Finding]]:
    """`gpuvalues render`: a spec's whole fleet (every release, or one with `workload`),
    rendered with helm, every object validated, and the scheduler's filters replayed on
    the fleet's nodes (`fit` on the union of all releases); or one values file. Returns
    ([(release, manifest stream)], warnings). Objects are validated for `kube_version`,
    else the spec's, else the default."""
    from gpuvalues.render import helm as rendering

    if kube_version:
        supported_kube_minor(kube_version)    # a mistyped or unsupported version is bad input
    if values_path:
        if spec_path:
            raise GpuValuesError("give a SPEC or --values FILE, not both")
        kube = kube_version or rendering.DEFAULT_KUBE_VERSION
        progress(f"checking {values_path}")
        values, warnings = checked_values_file(values_path, kube)
        progress(f"helm template + kubernetes-validate {kube}")
        text, _ = rendering.render_values(values, helm=helm, kube_version=kube, chart=chart)
        return [(None, text)], warnings
    progress("building the fleet from the spec")
    fleet = fleet_of(spec_path)
    kube = kube_version or fleet.spec.kubernetes_version
    releases = [fleet.release(workload)] if workload else list(fleet.releases)
    progress(f"helm template {len(releases)} release(s) + kubernetes-validate {kube}")

    def one(r: Release):
        return (r, *rendering.render_values(dict(r.values), helm=helm, kube_version=kube,
                                            release=r.name, namespace=r.namespace, chart=chart))
    from concurrent.futures import ThreadPoolExecutor

    # one helm process per release, side by side (helm is the slow part)
    with ThreadPoolExecutor(max_workers=min(4, len(releases))) as pool:
        out = list(pool.map(one, releases))
    warnings = [f for f in fleet.findings if f.severity == "warning"]
    progress("fit check of every release on the fleet's nodes")
    warnings += fit_findings(fleet, [(r, objs) for r, _, objs in out])
    warnings += drain_findings(fleet, [(r, objs) for r, _, objs in out])
    return [(r, text) for r, text, _ in out], warnings


def drain_findings(fleet: Fleet, rendered_releases: list[tuple[Release, list[dict]]]) -> list[Finding]:
    """A warning for each workload whose rendered objects would block or hurt a node drain
    (the remediation controller's and rollout's; gpuvalues.operations.drain.drain_blockers)."""
    from gpuvalues.operations.drain import drain_blockers
    from gpuvalues.operations.remediation import TAINT_KEY

    spec = fleet.spec
    out = []
    for r, objs in rendered_releases:
        if r.is_platform:
            continue
        wi = [w.name for w in spec.workloads].index(r.workload)
        source, line, col = spec.position("workloads", wi)
        for problem in drain_blockers(objs, TAINT_KEY):
            out.append(Finding("GV020", f"{r.workload}: {problem}", f"workloads[{wi}]", source, line,
                               col, "warning"))
    return out


def fit_findings(fleet: Fleet, rendered_releases: list[tuple[Release, list[dict]]]
                 ) -> list[Finding]:
    """Replay the scheduler's filters (gpuvalues.planners.scheduling.fit) for the rendered releases
    together on the fleet's nodes as the install makes them from bare nodes
    (`gpuvalues.fleet.producers.produced_nodes`: only the labels and resources some part of
    the install produces); a warning for each workload and scenario (minReplicas,
    maxReplicas) in which pods would stay Pending."""
    from gpuvalues.fleet.producers import produced_nodes
    from gpuvalues.planners.scheduling import fit

    objects = [o for _, objs in rendered_releases for o in objs]
    report = fit.fit(objects, produced_nodes(fleet))
    owner = {}
    for r, objs in rendered_releases:
        for w in fit.workloads_from_manifests(objs)[0]:
            owner[w.ref] = r
    spec = fleet.spec
    out = []
    for scenario in (report.min, report.max):
        for w in scenario.workloads:
            if not w.pending:
                continue
            release = owner.get(w.workload)
            at = ("workloads", [x.name for x in spec.workloads].index(release.workload)) \
                if release is not None and release.workload else ()
            source, line, col = spec.position(*at)
            out.append(Finding("GV005", f"fit ({scenario.name} replicas): {w.pending} of "
                               f"{w.replicas} pods of {w.workload} would stay Pending: "
                               f"{w.reason}", format_path(at), source, line, col,
                               "warning", "add nodes or lower maxReplicas"))
    return out


def fit_report(inventory, *, manifests: str | None = None, values: str | None = None,
               helm: str | None = None, kube_version: str | None = None,
               progress: Progress = lambda _: None):
    """`gpuvalues fit`: a `fit.FitReport` for rendered manifests (a file, `-` for stdin) or
    a values file (rendered with helm first) on `inventory`."""
    from gpuvalues.planners.scheduling import fit
    from gpuvalues.render import helm as rendering

    if bool(manifests) == bool(values):
        raise GpuValuesError("give rendered manifests (--manifests FILE) or a values file (--values FILE)")
    if manifests:
        objects = fit.load_manifests(read_text(manifests), manifests)
        source = "<stdin>" if manifests == "-" else manifests
    else:
        progress(f"rendering {values} with helm")
        data = load_mapping(values, allow_empty=True, what="values file").data
        objects = helm_manifests(data, helm=helm, kube_version=kube_version or rendering.DEFAULT_KUBE_VERSION)
        source = values
    try:
        if not fit.workloads_from_manifests(objects)[0]:    # "fits: yes" of nothing is no answer
            what = "no Kubernetes objects" if not objects else "no workload (Deployment, StatefulSet, ...)"
            raise GpuValuesError(f"{what} in the manifests: nothing to fit; give the rendered manifests of a "
                                 "workload release (gpuvalues render, helm template)", source=source, line=1,
                                 column=1, field="--manifests" if manifests else "--values")
        return fit.fit(objects, inventory)
    except GpuValuesError as exc:      # an object's problem: name the file, the object as the field
        if exc.source == source or exc.line is not None:
            raise
        raise type(exc)(exc.message, source=source, field=exc.source or exc.field, code=exc.code) from None


def helm_manifests(values: Mapping, **helm_kwargs: Any) -> list[dict]:
    """The objects the chart renders for `values` (gpuvalues.render.helm.helm_template)."""
    from gpuvalues.render import helm

    return helm.parse_manifests(helm.helm_template(dict(values), **helm_kwargs))


def fit_values(values: Mapping, inventory, **helm_kwargs: Any):
    """Render `values` with the chart through helm (`helm_manifests`), then `fit`."""
    from gpuvalues.planners.scheduling.fit import fit

    return fit(helm_manifests(values, **helm_kwargs), inventory)


def checked_values_file(path: str | Path, kube_version: str,
                        spec: str | Path | None = None) -> tuple[dict, list[Finding]]:
    """A values file that passes every check: (values, warnings), else ValidationFailed."""
    loaded = expect_mapping(load_yaml(path, allow_empty=True), "values file")
    return loaded.data, warnings_or_raise(values_findings(loaded, ctx=_context(spec, kube_version)))


def _context(spec_path: str | Path | None, kube_version: str | None) -> Context:
    if not spec_path:
        return Context(kube_version=kube_version)
    spec = load_spec(spec_path)
    return Context(kube_version=kube_version or spec.kubernetes_version,
                   gpu_models=tuple(sorted({p.gpu.name for p in spec.node_pools})),
                   inventory_gpus=sum(p.gpus for p in spec.node_pools),
                   gpus_per_node=min(p.gpus_per_node for p in spec.node_pools))


def check(*, spec: str | Path | None = None, values: str | Path | None = None,
          kube_version: str | None = None) -> list[Finding]:
    """Every finding for a spec (schema, cross-field, the fleet and its releases' values)
    or a values file (chart schema, semantic rules; with `spec` as context), all in one
    run. Unreadable or malformed YAML raises a SpecError (bad input) instead."""
    if kube_version:
        supported_kube_minor(kube_version)    # a mistyped or unsupported version is bad input
    if values:
        loaded = expect_mapping(load_yaml(values, allow_empty=True),
                                       "values file")
        return sorted(values_findings(loaded, ctx=_context(spec, kube_version)), key=Finding.sort_key)
    loaded = load_yaml(spec)
    found = check_spec(loaded)
    if errors_only(found):
        return found
    parsed = parse_spec(loaded, findings=found)
    if kube_version:
        parsed = replace(parsed, kubernetes_version=kube_version)
    return list(check_fleet(build_fleet(parsed)).findings)


__all__ += ["ValidationFailed"]     # raised by fleet_of, rendered and the writers


def replanned(spec_path: str | Path, current_path: str | Path, *, gpu_slack: int = 0,
              max_node_changes: int | None = None, max_unavailable_per_pool: int | None = None,
              time_limit: float = 30.0) -> tuple[Replan, list[str]]:
    """`gpuvalues replan`: the spec's MIG demand re-planned against the current layout in
    `current_path` (read by `gpuvalues.io.current.load_current`). Returns (`replan.Replan`, notes).

    The demand is the fleet's own MIG solve (`Fleet.layout.plan`, computed once by
    `gpuvalues.fleet`): each MIG workload pinned to its profile and pool, with the replicas
    that solve serves, on every MIG pool of the spec (one left with no MIG workload keeps its
    nodes as they are) with the nodes whole-GPU and tensor-parallel replicas leave; listed
    nodes of those replicas and of pools without MIG are left alone, said in the notes."""
    from gpuvalues.io.current import load_current   # HiGHS + numpy: only when re-planning
    from gpuvalues.planners.mig.replan import replan
    from gpuvalues.planners.mig.milp import model as milp

    fleet = fleet_of(spec_path)
    plan = fleet.layout.plan if fleet.layout is not None else None
    if plan is None:
        raise PlanError("the spec has no MIG workload on a MIG pool: nothing to re-plan", source=str(spec_path))
    pools, held = _mig_pools(fleet)
    demands = [milp.ModelDemand(p.workload, replicas=int(round(plan.served.get(p.workload, 0))),
                                allowed_profiles=(p.mig_profile,) if p.mig_profile else None,
                                pools=(p.pool.name,))
               for p in fleet.placements if p.mode == "mig" and p.workload in plan.served]
    spec_pools = {p.name: p for p in fleet.spec.node_pools}
    current = load_current(current_path, list(spec_pools.values()))
    current, notes, pools = _mig_part(current, pools, held, spec_pools)
    result = replan(demands, pools, current, gpu_slack=gpu_slack, max_node_changes=max_node_changes,
                         max_unavailable_per_pool=max_unavailable_per_pool, time_limit=time_limit)
    return result, list(fleet.decisions) + notes


def _mig_pools(fleet: Fleet) -> tuple[list[PlanPool], dict[str, int]]:
    """The spec's MIG pools as the re-plan sees them: every MIG-managed pool with all its
    nodes, also one whose MIG workloads were all removed (its nodes may keep their layout);
    and per pool the GPUs whole-GPU and tensor-parallel replicas hold (those the fleet's MIG
    solve did not get)."""
    from gpuvalues.planners.mig.milp import model as milp

    # the MIG solve's pools of one spec pool: the pool itself, or parts of it named "<pool>.<part>"
    planned: dict[str, int] = {}
    layout = fleet.layout
    if layout is None or layout.plan is None:   # replanned() checked: the fleet has a MIG solve
        return [], {}
    for pp in layout.plan.pools:
        owner = next((p.name for p in fleet.spec.node_pools
                      if pp.pool.name == p.name or pp.pool.name.startswith(p.name + ".")), pp.pool.name)
        planned[owner] = planned.get(owner, 0) + pp.pool.capacity
    pools, held = [], {}
    for p in fleet.spec.node_pools:
        if p.name in planned:
            held[p.name] = max(0, p.gpus - planned[p.name])
        elif p.mig and p.gpu.mig is not None and not any(
                pl.mode == "dra" for pl in fleet.placements if pl.pool.name == p.name):
            held[p.name] = sum(g.nodes for g in layout.groups_of(p.name) if g.workloads) * p.gpus_per_node
        else:
            continue
        pools.append(milp.PlanPool(p.name, p.gpu.name, p.gpus_per_node, p.nodes, mig_enabled=True,
                                   price_per_gpu=p.price_per_gpu_hour))
    return pools, held


def _mig_part(current: CurrentLayout, pools: list[PlanPool], held: Mapping[str, int],
              spec_pools: Mapping[str, Any]) -> tuple[CurrentLayout, list[str], list[PlanPool]]:
    """The part of the current layout the MIG re-plan may change, and the pools it plans.

    Nodes of pools that run no MIG are left alone. In a pool whose whole-GPU / tensor-parallel
    replicas hold GPUs, the listed nodes with the most MIG-off GPUs are theirs until those GPUs
    are accounted for: they are pinned (kept as they are, their MIG GPUs still usable); GPUs
    left over are on unlisted nodes, which the re-plan then leaves out. Said in notes."""
    from gpuvalues.planners.mig.replan import CurrentLayout, CurrentNode

    mig = {p.name: p for p in pools}
    notes: list[str] = []
    out: list[CurrentNode] = []
    plan_pools: list[PlanPool] = []
    aside: dict[str, list[str]] = {}
    for node in current.nodes:
        if node.pool not in mig:
            aside.setdefault(node.pool, []).append(node.name)
    for other, names in sorted(aside.items()):
        notes.append(f"pool {other} runs no MIG: its listed nodes ({', '.join(names)}) are left alone")
    index = {name: i for i, name in enumerate(spec_pools)}
    for name, pool in mig.items():
        mine = [n for n in current.nodes if n.pool == name]
        if len(mine) > pool.nodes:
            raise PlanError(f"the current layout lists {len(mine)} nodes of pool {name!r}, but the spec gives it "
                            f"{pool.nodes} (cluster.nodePools[{index[name]}].nodes); fix the spec's node count or "
                            "the current layout", source=current.source, field="nodes")
        left = held.get(name, 0)
        pinned = set()
        for n in sorted(mine, key=lambda n: (-sum(g is None for g in n.gpus), n.name)):
            off = sum(g is None for g in n.gpus)
            if left <= 0 or not off:
                break
            pinned.add(n.name)
            left -= off
        if pinned:
            notes.append(f"pool {name}: node(s) {', '.join(sorted(pinned))} carry whole-GPU/tensor-parallel "
                         "replicas (their MIG-off GPUs): the re-plan keeps them as they are")
        out += [CurrentNode(n.name, n.pool, n.config, n.gpus, n.pods, pinned=n.name in pinned) for n in mine]
        gone = -(-max(left, 0) // pool.gpus_per_node)   # unlisted nodes those replicas hold
        gone = min(gone, pool.nodes - len(mine))
        if gone:
            notes.append(f"pool {name}: {gone} unlisted node(s) carry whole-GPU/tensor-parallel replicas and are "
                         "left out of the re-plan")
        plan_pools.append(replace(pool, nodes=pool.nodes - gone))
    return CurrentLayout(tuple(out), source=current.source), notes, plan_pools


def doctor(spec_path: str | Path, *, dump: str | Path | None = None, kubeconfig: str | None = None,
           context: str | None = None, prometheus: str | None = None,
           dump_to: str | Path | None = None) -> "Report":
    """`gpuvalues doctor`: the fleet of `spec_path` against a cluster snapshot, read from a
    dump folder (`dump`) or a live cluster (list only; `prometheus` for series), the live
    read written as a dump to `dump_to`. Returns the `Report`; a spec whose fleet has errors
    is `ValidationFailed` (doctor cannot say what the cluster should be)."""
    from gpuvalues.errors import SpecError
    from gpuvalues.io import files, snapshot
    from gpuvalues.operations.doctor import diagnose

    live = bool(kubeconfig or context)
    if (dump is None) == (not live) or (dump is not None and (prometheus or dump_to)):
        raise SpecError("give exactly one of --dump DIR or a live cluster (--kubeconfig/--context); "
                        "--prometheus and --dump-to go with a live cluster", field="--dump", code="GV066")
    fleet = fleet_of(spec_path)
    if dump is not None:
        snap = snapshot.load_dump(dump)
    else:
        snap, dumped = snapshot.live_snapshot(kubeconfig, context, prometheus)
        if dump_to is not None:
            out = Path(dump_to)
            out.mkdir(parents=True, exist_ok=True)
            files.write_all([(out / name, text) for name, text in sorted(dumped.items())])
    return diagnose(fleet, snap)
