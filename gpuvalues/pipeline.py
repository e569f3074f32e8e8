"""The spec -> values -> checks steps the CLI strings together (no printing here).

Each function takes file paths (`-` is stdin), runs the library, and returns data or
raises a `GpuValuesError`; the CLI only parses arguments and prints.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gpuvalues import yamlio

# The built-in example `gpuvalues render` renders when given nothing: a small cluster of
# A100 80GB nodes serving one model, through the full spec -> values -> checks -> render path.
from gpuvalues.bundle import EXAMPLE_SPEC
from gpuvalues.checks.built import build_all, build_values
from gpuvalues.checks.rules import (
    Context,
    Finding,
    ValidationFailed,
    errors_only,
    values_findings,
    warnings_or_raise,
)
from gpuvalues.checks.spec import check_spec, load_spec, parse_spec
from gpuvalues.errors import GpuValuesError
from gpuvalues.fleet.builder import Values
from gpuvalues.fleet.spec import Spec
from gpuvalues.io import present
from gpuvalues.io.files import write_atomic
from gpuvalues.kube import kube_minor


def built_values(spec_path: str | Path, workload: str | None = None) -> tuple[Spec, Values]:
    """Load, validate and build one workload's values."""
    spec = load_spec(spec_path)
    return spec, build_values(spec, workload)


def built_all(spec_path: str | Path, workload: str | None = None
              ) -> tuple[Spec, tuple[Values, ...]]:
    """Load, validate and build every workload (or just `workload`)."""
    spec = load_spec(spec_path)
    if workload:
        return spec, (build_values(spec, workload),)
    return spec, build_all(spec)


def planned(spec_path: str | Path, *, objective: str = "gpus", baselines: bool = True,
            time_limit: float = 30.0, progress: Callable[[str], None] = lambda _: None):
    """`gpuvalues plan`: the optimal MIG/sharing plan for a spec's node pools.

    Returns (plan, pictures, notes): `milp.Plan`, (title, ASCII picture, layout) per
    distinct MIG layout, and notes about workloads left out of the plan.
    """
    from gpuvalues.fleet.builder import inputs_from_spec
    from gpuvalues.planners import milp

    demands, pools, notes = inputs_from_spec(load_spec(spec_path))
    if objective == "cost" and any(p.price_per_gpu is None for p in pools):
        raise GpuValuesError("--objective cost needs pricePerGpuHour on every node pool")
    progress(f"planning {len(demands)} models on {sum(p.capacity for p in pools)} GPUs")
    result = milp.plan(demands, pools, objective=objective, baselines=baselines,
                          time_limit=time_limit)
    return result, present.layout_pictures(result), notes


def rendered(spec_path: str | Path | None = None, *, values_path: str | Path | None = None,
             workload: str | None = None, helm: str | None = None, kube_version: str | None = None,
             progress: Callable[[str], None] = lambda _: None) -> tuple[str, list[Finding]]:
    """`gpuvalues render`: a spec (built, rendered, fit-checked on its pools) or a values
    file (checked, rendered) -> (manifest stream, warnings). Objects are validated for the
    Kubernetes version: `kube_version`, else the spec's, else render's default."""
    from gpuvalues.render import helm as rendering

    if kube_version:
        kube_minor(kube_version)              # a mistyped version is bad input, not a helm error
    if values_path:
        if spec_path:
            raise GpuValuesError("give a SPEC or --values FILE, not both")
        kube = kube_version or rendering.DEFAULT_KUBE_VERSION
        progress(f"checking {values_path}")
        values, warnings = checked_values_file(values_path, kube)
    else:
        progress("building values from the spec")
        spec, built = built_values(spec_path or EXAMPLE_SPEC, workload)
        values, warnings = built.values, list(built.warnings)
        kube = kube_version or spec.kubernetes_version
    progress(f"helm template + kubernetes-validate {kube}")
    text, objects = rendering.render_values(values, helm=helm, kube_version=kube)
    if not values_path:
        progress("fit check on the spec's node pools")
        warnings += fit_findings(spec, built, objects)
    return text, warnings


def fit_report(inventory, *, manifests: str | None = None, values: str | None = None,
               helm: str | None = None, kube_version: str | None = None,
               progress: Callable[[str], None] = lambda _: None):
    """`gpuvalues fit`: a `fit.FitReport` for rendered manifests (a file, `-` for stdin) or
    a values file (rendered with helm first) on `inventory`."""
    from gpuvalues.planners import fit
    from gpuvalues.render import helm as rendering

    if bool(manifests) == bool(values):
        raise GpuValuesError("give rendered manifests (--manifests FILE) or a values file (--values FILE)")
    if manifests:
        return fit.fit(fit.load_manifests(yamlio.read_text(manifests), manifests), inventory)
    progress(f"rendering {values} with helm")
    data = yamlio.load_mapping(values, allow_empty=True, what="values file").data
    return fit_values(data, inventory, helm=helm,
                          kube_version=kube_version or rendering.DEFAULT_KUBE_VERSION)


def fit_findings(spec: Spec, built: Values, objects: list[dict]) -> list[Finding]:
    """Replay the scheduler's filters (gpuvalues.planners.fit) for the rendered release on the
    spec's node pools, empty and labelled as `built` says; a warning for each scenario
    (minReplicas, maxReplicas) in which pods would stay Pending. The release is checked
    alone: other workloads of the spec are not on the nodes."""
    from gpuvalues.fleet.builder import spec_inventory
    from gpuvalues.planners import fit

    report = fit.fit(objects, spec_inventory(spec, built))
    out = []
    source, line, col = spec.position("workloads", spec.workloads.index(
        spec.workload(built.workload)))
    for scenario in (report.min, report.max):
        for w in scenario.workloads:
            if w.pending:
                out.append(Finding("GV005", f"fit ({scenario.name} replicas): {w.pending} of "
                                   f"{w.replicas} pods of {w.workload} would stay Pending: "
                                   f"{w.reason}", f"workloads[{built.workload}]", source, line,
                                   col, "warning", "add nodes or lower maxReplicas"))
    return out


def write_values(built: Sequence[Values], out: str | None, artifacts: str | None) -> list[Path]:
    """Write values (a file, or a directory of `<workload>.values.yaml` when there are
    several) and, with `artifacts`, the node-side configs; every file atomically."""
    paths: list[Path] = []
    if out:
        target = Path(out)
        if len(built) == 1 and not target.is_dir():
            paths.append(_write(target, values_text(built[0])))
        else:
            target.mkdir(parents=True, exist_ok=True)
            for b in built:
                paths.append(_write(target / f"{b.workload}.values.yaml", values_text(b)))
    if artifacts:
        adir = Path(artifacts)
        adir.mkdir(parents=True, exist_ok=True)
        mig: dict = {}
        labels: dict = {}
        configs: dict = {}
        for b in built:
            if b.mig_parted:
                mig.setdefault("version", "v1")
                mig.setdefault("mig-configs", {}).update(b.mig_parted["mig-configs"])
            for pool, pl in b.node_labels.items():
                labels.setdefault(pool, {}).update(pl)
            configs.update(b.device_plugin_configs)
        if mig:
            paths.append(_write(adir / "mig-parted-config.yaml", yamlio.dump(mig)))
        if labels:
            paths.append(_write(adir / "node-labels.yaml", yamlio.dump(labels)))
        if configs:
            paths.append(_write(adir / "device-plugin-configs.yaml", yamlio.dump(configs)))
    return paths


def _write(path: Path, text: str) -> Path:
    write_atomic(path, text)
    return path


def values_text(b: Values) -> str:
    """The values file of one workload: why each choice was made, as comments, then the YAML."""
    return _header(b) + yamlio.dump(b.values)


def _header(b: Values) -> str:
    lines = [f"# Generated by gpuvalues for workload {b.workload}. Why:"]
    lines += [f"#   {d}" for d in b.decisions]
    return "\n".join(lines) + "\n"


def checked_values_file(path: str | Path, kube_version: str,
                        spec: str | Path | None = None) -> tuple[dict, list[Finding]]:
    """A values file that passes every check: (values, warnings), else ValidationFailed."""
    loaded = yamlio.expect_mapping(yamlio.load_yaml(path, allow_empty=True), "values file")
    return loaded.data, warnings_or_raise(values_findings(loaded, ctx=_context(spec, kube_version)))


def _context(spec_path: str | Path | None, kube_version: str | None) -> Context:
    if not spec_path:
        return Context(kube_version=kube_version)
    spec = load_spec(spec_path)
    return Context(kube_version=kube_version or spec.kubernetes_version,
                   gpu_models=tuple(sorted({p.gpu for p in spec.node_pools})),
                   inventory_gpus=sum(p.gpus for p in spec.node_pools),
                   gpus_per_node=min(p.gpus_per_node for p in spec.node_pools))


_CODE = re.compile(r"\s*\[(GV\d{3})\]")


def _as_finding(exc: GpuValuesError) -> Finding:
    code = _CODE.search(exc.message)
    message = _CODE.sub("", exc.message)
    return Finding(code.group(1) if code else "GV100", message, exc.field or "(root)",
                   exc.source or "", exc.line, exc.column)


def check(*, spec: str | Path | None = None, values: str | Path | None = None,
          kube_version: str | None = None) -> list[Finding]:
    """Every finding for a spec (schema, cross-field, build, generated values) or a
    values file (chart schema, semantic rules; with `spec` as context). Unreadable or
    malformed YAML raises a SpecError (bad input) instead."""
    if kube_version:
        kube_minor(kube_version)              # a mistyped version is bad input, not ignored
    if values:
        loaded = yamlio.expect_mapping(yamlio.load_yaml(values, allow_empty=True),
                                       "values file")
        return sorted(values_findings(loaded, ctx=_context(spec, kube_version)), key=Finding.sort_key)
    loaded = yamlio.load_yaml(spec)
    found = check_spec(loaded)
    if errors_only(found):
        return found
    parsed = parse_spec(loaded, findings=found)
    if kube_version:
        parsed = replace(parsed, kubernetes_version=kube_version)
    warnings = [f for f in found]
    failures: list[GpuValuesError] = []
    try:
        for built in build_all(parsed, errors=failures):
            warnings += [f for f in built.warnings if f not in warnings]
    except GpuValuesError as exc:        # the fleet itself cannot be planned
        failures.append(exc)
    for exc in failures:
        if isinstance(exc, ValidationFailed):
            warnings += exc.findings
        else:
            warnings.append(_as_finding(exc))
    return sorted(warnings, key=Finding.sort_key)


def fit_values(values: Mapping, inventory, **helm_kwargs: Any):
    """Render `values` with the chart through helm (gpuvalues.render.helm.helm_template), then `fit`."""
    from gpuvalues.planners.fit import fit
    from gpuvalues.render import helm

    return fit(helm.parse_manifests(helm.helm_template(dict(values), **helm_kwargs)), inventory)
