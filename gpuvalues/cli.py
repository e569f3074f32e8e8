"""The `gpuvalues` command: a thin shell over the library; no logic lives here.

Exit codes: 0 clean, 1 findings, 2 bad input or usage, 3 a transient failure (a server
down or slow: retry). A GpuValuesError is printed as one line ending in its [GVxxx] code
(`--debug` shows the traceback); anything else is a bug.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from gpuvalues import __version__
from gpuvalues.errors import Finding, GpuValuesError
from gpuvalues.io import output
from gpuvalues.kube import DEFAULT_KUBE_VERSION

if TYPE_CHECKING:                      # the CLI imports the library lazily: startup stays fast
    from gpuvalues.planners.scheduling.inventory import Inventory


# Shared options and conventions, used by every subcommand.
def add_common_options(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--output/--quiet/--debug/--progress, accepted before or after the subcommand."""
    d = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    p.add_argument("--output", choices=output.FORMATS, default=d("table"),
                   help="table for people (default), yaml or json for machines")
    p.add_argument("-q", "--quiet", action="store_true", default=d(False),
                   help="print only results and errors")
    p.add_argument("--debug", action="store_true", default=d(False),
                   help="show a traceback on errors")
    p.add_argument("--progress", action="store_true", default=d(False),
                   help="show progress on stderr even when it is not a terminal")


def progress(args: argparse.Namespace, message: str) -> None:
    """A progress line on stderr for long runs (terminal only, or --progress; never --quiet)."""
    if getattr(args, "quiet", False):
        return
    if getattr(args, "progress", False) or sys.stderr.isatty():
        elapsed = time.monotonic() - getattr(args, "_started", time.monotonic())
        print(f"gpuvalues: [{elapsed:5.1f}s] {message}", file=sys.stderr, flush=True)


def say(args: argparse.Namespace, message: str) -> None:
    """A status line on stderr unless --quiet (stdout stays machine-readable)."""
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr)


def emit(args: argparse.Namespace, data: Any, as_table: Callable[[Any], str]) -> None:
    """Print `data` in the chosen --output format."""
    sys.stdout.write(output.render(data, args.output, as_table))


def print_findings(args: argparse.Namespace, findings: Iterable[Finding]) -> None:
    """Findings as `file:line:col: path: message [code]` lines (table) or JSON/YAML."""
    emit(args, [f.as_dict() for f in findings],
         lambda _: "".join(f"{f}\n" for f in findings))


def cmd_render(args: argparse.Namespace) -> int:
    """`gpuvalues render`: a spec's whole fleet (or a values file) -> validated manifests
    (stdout, or one file per object in a folder per release)."""
    from gpuvalues import pipeline
    from gpuvalues.io import files

    streams, warnings = pipeline.rendered(args.spec, values_path=args.values,
                                          workload=args.workload, helm=args.helm,
                                          kube_version=args.kube_version, chart=args.chart,
                                          progress=lambda m: progress(args, m))
    for w in warnings:
        say(args, str(w))
    if args.out_dir:
        paths = files.write_manifests({r.name if r else "": text for r, text in streams},
                                      args.out_dir)
        say(args, f"wrote {len(paths)} objects of {len(streams)} release(s) to {args.out_dir}")
        machine(args, {"wrote": [str(p) for p in paths], "releases": len(streams)})
    elif args.output == "table":
        sys.stdout.write("".join(text for _, text in streams))
    else:                              # the objects themselves, as one JSON/YAML document
        emit(args, pipeline.rendered_data(streams, warnings), lambda d: "")
    return 0


def machine(args: argparse.Namespace, data: Any) -> None:
    """With --output json|yaml, what a command did as one document on stdout (a command
    that writes files prints nothing on stdout for people)."""
    if args.output != "table":
        emit(args, data, lambda d: "")


# values, validate, update
def cmd_values(args: argparse.Namespace) -> int:
    """`gpuvalues values`: spec -> every release's values (and the node side with --artifacts)."""
    from gpuvalues import pipeline
    from gpuvalues.io import present

    progress(args, f"planning the fleet of {args.spec}")
    fleet = pipeline.fleet_of(args.spec)
    one = fleet.release(args.workload) if args.workload else None   # an unknown name is bad input
    if args.out == "-":                # `-o -`: the one values file itself on stdout
        one = one or pipeline.combined_values(fleet)    # one file: one-workload specs only
        pipeline.write_values(fleet, None, args.artifacts)
        sys.stdout.write(pipeline.release_values_text(one))
    else:
        written = pipeline.write_values(fleet, args.out, args.artifacts, args.workload)
    for w in fleet.findings:           # after the writes: a failed write is the one line
        say(args, str(w))
    if args.out == "-":
        return 0
    for path in written:
        say(args, f"wrote {path}")
    install = pipeline.install_commands(fleet, args.out, args.artifacts, args.workload) if args.out else []
    if install:
        say(args, "install in this order:")
        for line in install:
            say(args, f"  {line}")
    if args.out:
        machine(args, {"wrote": [str(p) for p in written], "install": install})
    else:
        data = {r.name: dict(r.values) for r in fleet.releases}
        if args.output == "table":
            sys.stdout.write(present.values_table(fleet))
        else:
            emit(args, data, lambda d: "")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """`gpuvalues validate`: every finding for a spec or values file; exit 1 when errors remain."""
    from gpuvalues import pipeline
    from gpuvalues.errors import errors_only

    if not args.spec and not args.values:
        raise GpuValuesError("give a SPEC or --values FILE to validate")
    findings = pipeline.check(spec=args.spec, values=args.values, kube_version=args.kube_version)
    print_findings(args, findings)
    errors = errors_only(findings)
    failing = findings if args.strict else errors
    if not args.quiet and args.output == "table":
        print(f"{len(errors)} errors, {len(findings) - len(errors)} warnings", file=sys.stderr)
    return 1 if failing else 0


def cmd_update(args: argparse.Namespace) -> int:
    """`gpuvalues update`: change a values file in place, validated, atomically."""
    from gpuvalues.io import update

    changes = update.parse_sets(args.set or [], as_string=args.string)
    warnings = update.update_values(args.file, changes, validate=not args.no_validate,
                                    typed=not args.string)
    for w in warnings:
        say(args, str(w))
    say(args, f"updated {args.file}: {', '.join(changes)}")
    machine(args, {"updated": args.file, "set": list(changes), "warnings": [str(w) for w in warnings]})
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """`gpuvalues plan`: the fleet's layout -- workloads on pools, node groups, the optimal
    MIG layout with its LP bound and baselines, and the node side `values` deploys."""
    from gpuvalues import pipeline
    from gpuvalues.io import files, present

    if args.current:                   # re-plan against the running fleet: fewest changes
        return cmd_replan(args)
    progress(args, f"planning {args.spec}")
    fleet = pipeline.fleet_of(args.spec, objective=args.objective or "gpus",
                              baselines=not args.no_baselines, time_limit=args.time_limit)
    for w in fleet.findings:
        say(args, str(w))
    pictures = present.layout_pictures(fleet.layout.plan) if fleet.layout and fleet.layout.plan else []
    if args.svg:
        files.write_atomic(args.svg, present.layouts_svg([(t, L) for t, _, L in pictures]))
    if args.artifacts:
        for path in pipeline.write_node_side(fleet, args.artifacts):
            say(args, f"wrote {path}")
    emit(args, pipeline.plan_data(fleet),
         lambda d: present.plan_table(d, [(t, pic) for t, pic, _ in pictures]))
    return 0


def cmd_replan(args: argparse.Namespace) -> int:
    """`gpuvalues replan SPEC --current FILE`: re-plan with the fewest GPUs, then the fewest node
    reconfigurations, under a drain budget (to fold into `plan --current`)."""
    from gpuvalues.yamlio.writer import dump
    from gpuvalues import pipeline
    from gpuvalues.io import current, files

    result, notes = pipeline.replanned(args.spec, args.current, gpu_slack=args.gpu_slack,
                                       max_node_changes=args.max_node_changes,
                                       max_unavailable_per_pool=args.max_unavailable_per_pool,
                                       time_limit=args.time_limit)
    for n in notes:
        say(args, f"gpuvalues: note: {n}")
    if args.mig_parted_out and result.plan.mig_parted_config:
        files.write_atomic(args.mig_parted_out, dump(result.plan.mig_parted_config))
    emit(args, result.to_dict(), current.replan_table)
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    """`gpuvalues rollout REPLAN`: apply a re-plan's MIG changes in waves (cordon, evict GPU pods
    honouring PDBs, relabel, wait for mig-manager, check resources, uncordon); resumable.
    Everything offline is checked before the cluster is contacted; --dry-run never contacts it."""
    from gpuvalues.operations import rollout

    rollout.check_option("--timeout", args.timeout, 0.1, rollout.MAX_TIMEOUT_S)
    rollout.check_option("--poll", args.poll, 0.01, rollout.MAX_POLL_S)
    rollout.check_option("--max-unavailable-per-pool", args.max_unavailable_per_pool, 1, rollout.MAX_CHANGES,
                         whole=True)
    rollout.check_option("--max-nodes-per-wave", args.max_nodes_per_wave, 1, rollout.MAX_CHANGES, whole=True,
                         optional=True)
    configmap = rollout.check_configmap(args.configmap) if args.configmap else None
    replan = rollout.load_replan(args.replan, need_configs=bool(configmap))
    changes = list(replan.changes)
    if not changes:
        say(args, f"gpuvalues: rollout: {args.replan} changes no node: nothing to roll out")
        emit(args, {"waves": []} if args.dry_run else {"nodes": {}},
             lambda _: "no node changes: nothing to roll out\n")
        return 0
    limits = dict(max_unavailable_per_pool=args.max_unavailable_per_pool, max_nodes_per_wave=args.max_nodes_per_wave)
    if args.dry_run:                   # never a kubeconfig read or an API call
        waves = rollout.plan_waves(changes, {}, {}, **limits)
        say(args, "gpuvalues: rollout: dry run: the cluster is not contacted, so these waves use the pool "
                  "limits only (the rollout also reads PodDisruptionBudgets, which may split them further, "
                  "and LeaderWorkerSet groups, whose nodes move together in one wave)")
        emit(args, {"waves": [{"index": w.index, "pods": w.pods, "notes": list(w.notes), "nodes": [
            {"node": c.node, "pool": c.pool, "from": c.from_config, "to": c.to, "resources": dict(c.resources)}
            for c in w.changes]} for w in waves]}, lambda _: rollout.describe(waves))
        return 0
    from kubernetes import client

    from gpuvalues.operations.kubeapi import api_client_for

    try:
        api = api_client_for(args.kubeconfig, args.context, error=rollout.RolloutInputError)
    except GpuValuesError as exc:
        raise rollout.RolloutInputError(exc.message, field="--kubeconfig", code="GV046") from None
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    with rollout.api_errors():
        rollout.check_cluster(rollout.list_nodes(core), replan)
        pods, allowance, groups = rollout.pods_and_budgets(core, policy, [c.node for c in changes])
        waves = rollout.plan_waves(changes, pods, allowance, groups=groups, **limits)
        for w in waves:
            for note in w.notes:
                say(args, f"gpuvalues: rollout: wave {w.index}: {note}")
        if configmap:
            written = rollout.apply_mig_parted_config(core, *configmap, replan.mig_parted_config or {})
            say(args, f"gpuvalues: configmap {args.configmap}: wrote {len(written)} mig-parted configs")
        results = rollout.Rollout(core, waves, poll=args.poll, timeout=args.timeout,
                                  log=lambda m: say(args, f"gpuvalues: rollout: {m}")).run()
    emit(args, {"nodes": {n: {"to": r.to, "steps": r.steps, "evicted": len(r.evicted), "done": r.done}
                          for n, r in sorted(results.items())}},
         lambda d: "".join(f"{n}: {v['to']} done\n" for n, v in d["nodes"].items()))
    return 0


def cmd_topo(args: argparse.Namespace) -> int:
    """`gpuvalues topo`: NVLink cliques, labels and the best GPU set from `nvidia-smi topo -m`."""
    from gpuvalues.yamlio.inputs import read_text
    from gpuvalues.io import present
    from gpuvalues.planners.scheduling import topology

    topo = topology.parse_topo_matrix(read_text(args.file), source=args.file)
    try:
        report = present.topology_report(topo, best=args.best, available=args.available, prefix=args.prefix,
                                         key=args.key, count_nvswitch_links=args.count_nvswitch_links)
    except GpuValuesError as exc:     # about the whole matrix (its cliques, the GPUs asked for): name the file
        if exc.source is None and exc.field != "best":
            exc.source = args.file
        raise
    emit(args, report, present.topology_table)
    return 0


def _inventory(args: argparse.Namespace) -> Inventory:
    """The Inventory the --inventory/--kubeconfig/--nvidia-smi options describe."""
    from gpuvalues.io import cluster

    return cluster.inventory_from_sources(inventory=args.inventory, kubeconfig=args.kubeconfig,
                                            context=args.context, nvidia_smi=args.nvidia_smi or (),
                                            label_selector=args.selector)


def cmd_inventory(args: argparse.Namespace) -> int:
    """`gpuvalues inventory`: a cluster inventory from kubectl JSON, a live cluster or nvidia-smi."""
    from gpuvalues.io import cluster, files, present

    inv = _inventory(args)
    if args.out == "-":                # `-o -`: the inventory file itself on stdout
        sys.stdout.write(cluster.inventory_text(inv, "-"))
    elif args.out:
        files.write_atomic(args.out, cluster.inventory_text(inv, args.out))
        say(args, f"wrote {args.out} ({len(inv.nodes)} nodes)")
        machine(args, {"wrote": args.out, "nodes": len(inv.nodes)})
    else:
        emit(args, inv.to_dict(), present.inventory_table)
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    """`gpuvalues fit`: do min and max replicas schedule? Exit 1 when not."""
    from gpuvalues import pipeline
    from gpuvalues.io import present

    report = pipeline.fit_report(_inventory(args), manifests=args.manifests, values=args.values,
                                 helm=args.helm, kube_version=args.kube_version,
                                 progress=lambda m: progress(args, m))
    emit(args, report.to_dict(), present.fit_table)
    return 0 if report.fits else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    """`gpuvalues doctor`: the live cluster (or a dump) against the fleet; exit 1 on findings."""
    from gpuvalues import pipeline
    from gpuvalues.io import present
    from gpuvalues.operations.doctor import paused_gc

    # the collector paused for the whole command, not only the reading and the checks:
    # re-enabled in between, its first full pass would walk the whole snapshot (0.8 s at
    # 5,000 nodes) for no cycle (paused_gc)
    with paused_gc():
        report = pipeline.doctor(args.spec, dump=args.dump, kubeconfig=args.kubeconfig, context=args.context,
                                 prometheus=args.prometheus, dump_to=args.dump_to)
        emit(args, report.to_dict(), present.doctor_table)
    return 0 if report.healthy else 1


def _inventory_options(p: argparse.ArgumentParser) -> None:
    """The options that say where the inventory comes from (inventory, fit)."""
    p.add_argument("--inventory", metavar="FILE",
                   help="inventory file (schemas/inventory.schema.json) or `kubectl get nodes -o json` output")
    p.add_argument("--kubeconfig", metavar="PATH", help="read the nodes of a live cluster")
    p.add_argument("--context", help="kubeconfig context (live cluster)")
    p.add_argument("--selector", metavar="LABELS", help="label selector for live nodes, e.g. nvidia.com/gpu.present=true")
    p.add_argument("--nvidia-smi", action="append", metavar="NODE=QUERY.csv[:TOPO.txt]",
                   help="per node: `nvidia-smi --query-gpu=index,name,memory.total,mig.mode.current "
                        "--format=csv` output, optionally `nvidia-smi topo -m` output; repeatable")


def cmd_simulate(args: argparse.Namespace) -> int:
    """`gpuvalues simulate`: replay a load trace through the capacity model and the HPA."""
    from gpuvalues.io import present, traces
    from gpuvalues.planners.autoscaling import simulate

    trace = traces.load_trace(args.trace)
    if args.scale_to_zero:
        rows = simulate.scale_to_zero_sweep(trace, args.scale_to_zero, replica_rps=args.replica_rps,
                                            cold_start_s=args.startup_s,
                                            gpus_per_replica=args.gpus_per_replica)
        data = [r.as_dict() for r in rows]
        emit(args, data, present.scale_to_zero_table)
        return 0
    behaviors = traces.load_behaviors(args.behavior, args.startup_s) if args.behavior else None
    progress(args, f"replaying {args.trace} ({len(trace.times_s)} points)")
    report = simulate.plan_and_simulate(
        trace, replica_rps=args.replica_rps, gpus_per_replica=args.gpus_per_replica,
        gpu_mode=args.gpu_mode, server_type=args.server, min_replicas=args.min_replicas,
        max_replicas=args.max_replicas, metrics=args.metrics, behaviors=behaviors,
        startup_s=args.startup_s, metric_lag_s=args.metric_lag_s, sync_s=args.sync_s,
        queue_wait_slo_s=args.queue_wait_slo_s, request_latency_s=args.request_latency_s,
        inventory_gpus=args.inventory_gpus)
    if args.plot:
        traces.plot(report.results, args.plot, metric_label=report.config.metrics[0].kind)
        say(args, f"wrote {args.plot}")
    emit(args, report.as_dict(series=args.series), present.simulate_table)
    return 0


def cmd_remediate(args: argparse.Namespace) -> int:
    """`gpuvalues remediate`: the GPU health remediation controller (docs/self-healing.md)."""
    from gpuvalues.operations import config, controller

    return controller.main(config.options_from_args(args))


def _replan_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    """The re-plan options (`plan --current`, and `replan`, the same command)."""
    p.add_argument("--current", required=required, metavar="FILE",
                   help="re-plan against the current layout: a mig-parted config with `nodes` "
                        "(node -> labels), or an inventory; fewest GPUs, then fewest node changes")
    p.add_argument("--gpu-slack", type=int, default=0, metavar="N",
                   help="with --current: accept up to N GPUs above the fewest if that saves node changes")
    p.add_argument("--max-node-changes", type=int, default=None, metavar="N",
                   help="with --current: change at most N nodes")
    p.add_argument("--max-unavailable-per-pool", type=int, default=None, metavar="N",
                   help="with --current: change at most N nodes of any one pool (rollout drains N at a time)")
    p.add_argument("--mig-parted-out", metavar="FILE",
                   help="with --current: write the new mig-parted config here (atomically)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="gpuvalues", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpuvalues {__version__}")
    add_common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("render", help="render the chart with helm and validate the manifests")
    p.add_argument("spec", nargs="?", metavar="SPEC",
                   help="spec file ('-' for stdin; default: the built-in A100 example)")
    p.add_argument("--values", help="render this values file instead of a spec")
    p.add_argument("--workload", help="which workload of the spec (default: the only one)")
    p.add_argument("--helm", help="helm binary (default: $GPUVALUES_HELM, .tools/bin, PATH)")
    p.add_argument("--kube-version", help="target Kubernetes version "
                   f"(default: the spec's, else {DEFAULT_KUBE_VERSION})")
    p.add_argument("--chart", metavar="DIR", help="chart to render (default: $GPUVALUES_CHART, "
                   "else the chart bundled with gpuvalues)")
    p.add_argument("-o", "--out-dir", metavar="DIR",
                   help="write one file per object into DIR (atomically) instead of stdout")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("plan", help="optimal MIG / sharing plan: fewest GPUs, layouts, mig-parted and "
                                    "device-plugin configs, LP bound and baselines")
    p.add_argument("spec", help="spec file (`-` for stdin)")
    p.add_argument("--objective", choices=("gpus", "cost"), default=None,
                   help="fewest GPUs (default) or lowest cost (needs pricePerGpuHour on every pool)")
    p.add_argument("--svg", metavar="FILE", help="also write an SVG picture of each distinct GPU layout")
    p.add_argument("--no-baselines", action="store_true", help="skip the whole-GPU/all-balanced/all-1g baselines")
    p.add_argument("--time-limit", type=float, default=30.0, help="solver time limit in seconds (default 30)")
    p.add_argument("--artifacts", metavar="DIR", help="write the node side (mig-parted config, device-plugin "
                   "configs, node labels) here: the same files as `values --artifacts`")
    _replan_options(p, required=False)
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("replan", help="the same as `plan --current`: re-plan a running fleet with the fewest node changes",
                       description="Re-plan the spec's demand against the fleet's current MIG layout: the fewest "
                                   "GPUs (within --gpu-slack), then the fewest nodes whose mig.config changes, "
                                   "under the drain budget. Reports GPUs used, nodes changed, pods displaced and "
                                   "the LP bound on both.")
    p.add_argument("spec", help="spec file (`-` for stdin)")
    _replan_options(p, required=True)
    p.add_argument("--time-limit", type=float, default=30.0, help="solver time limit in seconds (default 30)")
    p.set_defaults(func=cmd_replan)
    p = sub.add_parser("rollout", help="apply a re-plan's MIG changes in waves: cordon, drain (PDBs), relabel, "
                                       "wait for mig-manager, check resources, uncordon",
                       description="Reconfigure only the nodes a re-plan changes, in waves that keep every "
                                   "PodDisruptionBudget; progress is recorded on each node, so a rerun resumes. "
                                   "The file, the options and then the cluster are checked before the first "
                                   "action; only a mig.config.state mig-manager writes after the relabel counts; "
                                   "each step is an Event on the Node.")
    p.add_argument("replan", metavar="REPLAN", help="`gpuvalues --output json replan ...` output")
    p.add_argument("--dry-run", action="store_true",
                   help="print the waves and steps; read no kubeconfig, call no API, change nothing")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--max-unavailable-per-pool", type=int, default=1, metavar="N",
                   help="nodes of one pool reconfigured at once (default 1)")
    p.add_argument("--max-nodes-per-wave", type=int, default=None, metavar="N", help="nodes per wave in all")
    p.add_argument("--configmap", metavar="NAMESPACE/NAME",
                   help="merge the new mig-parted configs into this ConfigMap (key config.yaml) first")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between steps (default 1)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per wave before giving up (default 900)")
    p.set_defaults(func=cmd_rollout)
    p = sub.add_parser("topo", help="parse `nvidia-smi topo -m`: NVLink cliques, node labels, best GPU set")
    p.add_argument("file", metavar="TOPO", help="saved `nvidia-smi topo -m` output ('-' for stdin)")
    p.add_argument("--best", type=int, metavar="N", help="GPUs the device plugin would give a pod asking for N")
    p.add_argument("--available", type=lambda s: [int(x) for x in s.split(",") if x], metavar="0,1,...",
                   help="GPU indices still free (default: all)")
    p.add_argument("--count-nvswitch-links", action="store_true",
                   help="score NVSwitch-attached NVLinks as direct links (the device plugin scores them 0)")
    p.add_argument("--prefix", default="topology.gpu-inference.io/", help="prefix of the fact labels")
    p.add_argument("--key", default="nvidia.com/gpu.topology", help="key of the NV<k>/PCIe topology label")
    p.set_defaults(func=cmd_topo)

    p = sub.add_parser("inventory", help="build a cluster inventory (kubectl JSON, live cluster or nvidia-smi)")
    _inventory_options(p)
    p.add_argument("-o", "--out", metavar="FILE", help="write the inventory YAML here (JSON for a .json name; atomically; '-' for stdout)")
    p.set_defaults(func=cmd_inventory)

    p = sub.add_parser(
        "fit", help="check that min and max replicas fit the cluster (scheduler filters, no scoring)",
        description="Replay kube-scheduler's filters (unschedulable, taints, node affinity/selector, resources: "
                    "extended resources are integers never overcommitted, required pod anti-affinity) for every "
                    "GPU workload at its min and max replicas; first fit in node-name order. Not modelled: "
                    "scoring, preemption, DRA allocation, required pod affinity and topology spread, pods already "
                    "on the nodes. Exit 0 when both fit, 1 when not, 2 on bad input.")
    p.add_argument("--manifests", metavar="FILE", help="rendered manifests ('-' for stdin)")
    p.add_argument("--values", metavar="FILE", help="values file, rendered through helm first")
    p.add_argument("--helm", help="helm binary for --values (default: $GPUVALUES_HELM, .tools/bin, PATH)")
    p.add_argument("--kube-version", help=f"Kubernetes version for --values (default {DEFAULT_KUBE_VERSION})")
    _inventory_options(p)
    p.set_defaults(func=cmd_fit)
    p = sub.add_parser(
        "doctor", help="explain a live GPU cluster against its fleet, link by link (read-only)",
        description="Read the cluster (list/get only) or a dump folder and name every broken link between "
                    "the spec's fleet and what runs: node agents, config labels, advertised resources, "
                    "MIG state, adapter rules, APIService, series labels, DCGM fields, PDBs, quarantine, "
                    "image and values drift (docs/doctor.md). Exit 0 healthy, 1 findings, 2 could not "
                    "check, 3 a server down or slow.")
    p.add_argument("spec", metavar="SPEC", help="the fleet's spec file")
    p.add_argument("--dump", metavar="DIR", help="a folder of `kubectl get ... -o json` files (docs/doctor.md)")
    p.add_argument("--kubeconfig", metavar="PATH", help="read a live cluster (read-only)")
    p.add_argument("--context", help="kubeconfig context (live cluster)")
    p.add_argument("--prometheus", metavar="URL", help="live: Prometheus to read the autoscalers' series from")
    p.add_argument("--dump-to", metavar="DIR", help="live: also write what was read as a dump folder")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("simulate", help="replay a load trace through the capacity model and the HPA")
    p.add_argument("trace", metavar="TRACE", help="CSV time_s,requests_per_s, or a built-in: diurnal, spike")
    p.add_argument("--replica-rps", type=float, required=True,
                   help="requests/s one replica serves within the latency SLO (measured goodput)")
    p.add_argument("--gpus-per-replica", type=float, default=1)
    p.add_argument("--gpu-mode", default="whole", choices=("whole", "mig", "shared", "dra"))
    p.add_argument("--server", default="vllm", choices=("vllm", "triton", "custom"))
    p.add_argument("--min-replicas", type=int, help="default: from the capacity plan")
    p.add_argument("--max-replicas", type=int, help="default: from the capacity plan")
    p.add_argument("--metrics", metavar="KIND=TARGET,...",
                   help="e.g. queue=5,running=14 or gpu_util=70 (kinds: queue, queue_time, running, "
                        "gpu_util, gr_engine_active); default: the planned metric(s)")
    p.add_argument("--behavior", action="append", metavar="NAME[=FILE]",
                   help="built-in no-stabilization, legacy or recommended, or NAME=FILE with a "
                        "spec.behavior YAML; repeatable (default: the three built-ins)")
    p.add_argument("--startup-s", type=float, default=120.0, help="pod start-up = model load time (120)")
    p.add_argument("--metric-lag-s", type=float, default=30.0, help="metric pipeline delay (30)")
    p.add_argument("--sync-s", type=float, default=15.0, help="HPA sync period (15)")
    p.add_argument("--queue-wait-slo-s", type=float, default=1.0, help="queueing delay SLO (1.0)")
    p.add_argument("--request-latency-s", type=float, default=2.0, help="mean request latency at the SLO (2.0)")
    p.add_argument("--inventory-gpus", type=float, help="warn when maxReplicas x GPUs exceeds this")
    p.add_argument("--plot", metavar="FILE.png", help="draw load, replicas and metric (needs matplotlib)")
    p.add_argument("--series", action="store_true", help="include per-step series in yaml/json output")
    p.add_argument("--scale-to-zero", metavar="COOLDOWN_S,...", type=lambda s: [float(x) for x in s.split(",") if x],
                   help="instead: replay scale to zero (KEDA) with these cooldowns; GPU-hours saved vs "
                        "requests that waited for a cold start (--startup-s is the cold start)")
    p.set_defaults(func=cmd_simulate)
    p = sub.add_parser("values", help="build chart values (and MIG/device-plugin configs) from a spec")
    p.add_argument("spec", metavar="SPEC", help="spec file ('-' for stdin)")
    p.add_argument("-o", "--out", metavar="FILE",
                   help="write values here ('-' for stdout; a directory when the spec has several workloads)")
    p.add_argument("--workload", help="build only this workload")
    p.add_argument("--artifacts", metavar="DIR",
                   help="also write mig-parted config, node labels and device-plugin config")
    p.set_defaults(func=cmd_values)

    p = sub.add_parser("validate", help="run every check (schema, semantic) without rendering")
    p.add_argument("spec", nargs="?", metavar="SPEC", help="spec file ('-' for stdin)")
    p.add_argument("--values", metavar="FILE", help="check a values file (with SPEC: its context)")
    p.add_argument("--kube-version", help="target Kubernetes version (DRA needs 1.34+)")
    p.add_argument("--strict", action="store_true", help="warnings count as findings (exit 1)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("update", help="change a values.yaml in place, keeping comments and order")
    p.add_argument("file", metavar="VALUES", help="values file to edit in place")
    p.add_argument("--set", action="append", metavar="PATH=VALUE",
                   help="a.b[0].c=value (typed as helm --set types it; a number where the chart's schema takes one); repeatable")
    p.add_argument("--string", action="store_true", help="take every value as a string")
    p.add_argument("--no-validate", action="store_true",
                   help="skip schema and semantic checks (YAML typing is still checked)")
    p.set_defaults(func=cmd_update)

    p = sub.add_parser("remediate", help="run the GPU health remediation controller (quarantine, drain, recover)")
    p.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--config", metavar="FILE", help="YAML with any of the options below (flags win)")
    p.add_argument("--prometheus-url", help="Prometheus base URL for DCGM signals (none: node signals only)")
    p.add_argument("--sync-period", type=float, help="seconds between syncs (30)")
    p.add_argument("--dry-run", action="store_true", default=None, help="decide and log, change nothing")
    p.add_argument("--once", action="store_true", default=None, help="one sync, no leader election, then exit")
    p.add_argument("--metrics-address", help="host:port of /metrics and /healthz (0.0.0.0:8080; '' = off)")
    p.add_argument("--lease-namespace", help="namespace of the leader-election Lease (default)")
    p.add_argument("--lease-name", help="name of the Lease (gpu-inference-remediation)")
    p.add_argument("--identity", help="this replica's identity in the Lease (default: hostname-pid)")
    p.set_defaults(func=cmd_remediate)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 clean, 1 findings, 2 bad input or usage)."""
    # numpy (for the MIG planner's HiGHS model) does only small vector sums here, yet its
    # OpenBLAS starts a thread per core on import: about 50 ms of a MIG spec's `validate`.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = build_parser()
    for _name, subparser in _subparsers(parser).items():
        if "--output" not in subparser._option_string_actions:
            add_common_options(subparser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:          # argparse: usage errors exit 2, --help/--version 0
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    args._started = time.monotonic()
    try:
        status: int = args.func(args)
        return status
    except (Exception, KeyboardInterrupt) as exc:
        code = exit_status(args, exc)
        if code is None:
            raise                      # a bug: the traceback is the report
        return code


def exit_status(args: argparse.Namespace, exc: BaseException) -> int | None:
    """Print `exc` as the CLI's error lines and return its exit status, or None for a bug
    (re-raised with its traceback). The one place that maps exceptions to exit codes:
    a GpuValuesError exits with its class's `exit_code` (2 bad input, 3 `TransientError`),
    an OSError (unwritable output, full disk) and an input past a limit no check caught
    with 2, Ctrl-C with 130; every line ends in a registered `[GVxxx]` code."""
    from gpuvalues.errors import EXIT_BAD_INPUT, OutputError

    if isinstance(exc, KeyboardInterrupt):
        print("gpuvalues: interrupted", file=sys.stderr)
        return 130
    if isinstance(exc, OSError) and not isinstance(exc, GpuValuesError):
        where = f"{exc.filename}: " if exc.filename else ""
        exc = OutputError(f"{where}{exc.strerror or exc}")
    elif isinstance(exc, (MemoryError, RecursionError)):   # input past a limit no check caught
        what = "out of memory" if isinstance(exc, MemoryError) else "input nested too deeply"
        exc = GpuValuesError(f"{what} (the input is too large or too deep to process)",
                             code="GV019")
    elif not isinstance(exc, GpuValuesError):
        return None
    _debug_traceback(args)
    for line in exc.lines():
        print(f"gpuvalues: error: {line}", file=sys.stderr)
    return getattr(exc, "exit_code", EXIT_BAD_INPUT)


def _debug_traceback(args: argparse.Namespace) -> None:
    if args.debug:
        import traceback      # here, not at the top: only --debug errors need it
        traceback.print_exc()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


if __name__ == "__main__":
    sys.exit(main())
