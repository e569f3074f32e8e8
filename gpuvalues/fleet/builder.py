"""The values builder: one spec in, chart values (and the node-side configs) out.

`build_values(spec, workload=None)` decides, for one workload of the spec, how its
replicas get GPUs (whole, MIG profile, time-slicing/MPS replicas, DRA), how many replicas
it needs and what it scales on, where it may run (GPU products, NVLink topology), and
which GPU platform parts the release installs. Every decision comes from the planners
(catalog, mig, sharing, topology, autoscaling); this module only wires them together,
records why each choice was made (`Values.decisions`), and validates the result with the
chart's own schema and the semantic rules before returning it. Problems are
`GpuValuesError`s placed at the spec line that caused them.

`inputs_from_spec(spec)` reads a spec into the optimal planner's inputs for
`gpuvalues plan` (the planner itself knows nothing of specs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuvalues import catalog, yamlio
from gpuvalues.errors import CapacityError, CatalogError, Finding, GpuValuesError, PlanError, SpecError
from gpuvalues.fleet.spec import NodePool, Spec, Workload
from gpuvalues.planners.deviceplugin import CONFIG_LABEL as DP_CONFIG_LABEL

# Default replicas when the spec gives no load model (chart defaults: 2..10).
DEFAULT_MIN_REPLICAS = 2
DEFAULT_MAX_REPLICAS = 10
# Device-plugin config names the builder generates (a node selects one by label).


@dataclass(frozen=True)
class Values:
    """Everything one workload's release needs.

    `values` is the chart's values mapping (validated); `mig_parted` the mig-parted
    config for MIG pools (or None); `node_labels` node group (the pool's name, or the
    MIG plan's node-config name) -> labels to put on those nodes (device-plugin config,
    mig-parted config, topology); `device_plugin_configs`
    the named device-plugin configs (also inside `values`); `decisions` why each choice
    was made; `warnings` findings that do not stop the build.
    """

    workload: str
    values: dict
    mig_parted: dict | None = None
    node_labels: dict = field(default_factory=dict)
    device_plugin_configs: dict = field(default_factory=dict)
    decisions: tuple[str, ...] = ()
    warnings: tuple[Finding, ...] = ()
    node_groups: dict = field(default_factory=dict)   # node_labels key -> (pool, nodes)
    facts: dict = field(default_factory=dict)         # for the semantic checks


@dataclass(frozen=True)
class _Placement:
    """How one workload's replicas get GPUs on one pool (internal)."""

    pool: NodePool
    pool_index: int
    gpu: Any                          # catalog.GpuModel
    mode: str                         # chart gpu.mode: whole | mig | shared | dra
    count: int                        # gpu.count per pod
    sharing: str                      # spec sharing mode after `auto`
    mig_profile: str | None = None
    replicas_per_gpu: int | None = None
    units_per_gpu: float = 1.0        # pods one GPU holds (MIG instances, shared replicas)
    why: str = ""


def _err(exc_type, message: str, spec: Spec, *path: Any, field_: str | None = None):
    source, line, col = spec.position(*path)
    return exc_type(message, source=source, line=line, column=col,
                    field=field_ or yamlio.format_path(path))


def _pool_index(spec: Spec, pool: NodePool) -> int:
    return spec.node_pools.index(pool)


def _gpu(spec: Spec, pool: NodePool):
    try:
        return catalog.get_gpu(pool.gpu)
    except CatalogError as exc:
        raise _err(CatalogError, exc.message, spec, "cluster", "nodePools",
                   _pool_index(spec, pool), "gpu") from None


def _whole_gpus(w: Workload, gpu) -> int:
    need = w.gpus_per_replica
    if w.memory_gb:
        need = max(need, math.ceil(w.memory_gb / gpu.memory_gb))
    return need


def _smallest_profile(gpu, memory_gb: float) -> Any:
    """The smallest base MIG profile with at least `memory_gb` (None if none smaller
    than the whole GPU)."""
    fits = [p for p in gpu.profiles if p.is_base and p.memory_gb >= memory_gb
            and p.memory_slices < gpu.mig.memory_slices]
    return min(fits, key=lambda p: (p.memory_slices, p.compute_slices, p.memory_gb), default=None)


def _place(spec: Spec, wi: int, w: Workload) -> _Placement:
    """Pick the pool and GPU mode for workload `w` (the sharing decision)."""
    sharing = spec.sharing_for(w)
    at = ("workloads", wi)
    problems = []
    for pool in spec.pools_for(w):
        gpu = _gpu(spec, pool)
        pi = _pool_index(spec, pool)
        whole = _whole_gpus(w, gpu)
        mode = sharing.mode
        single = whole == 1 and w.tensor_parallel == 1 and (w.gpus or 1) == 1
        if mode == "auto":
            if not single:
                mode = "whole"
            elif pool.mig and gpu.mig_capable and w.memory_gb and \
                    _smallest_profile(gpu, w.memory_gb) is not None:
                mode = "mig"
            elif w.memory_gb and w.memory_gb * 2 <= gpu.memory_gb:
                mode = "time-slicing"
            else:
                mode = "whole"
        if whole > pool.gpus_per_node and mode in ("whole", "dra"):
            problems.append(f"{pool.name}: a replica needs {whole} GPUs, nodes have "
                            f"{pool.gpus_per_node} [GV012]")
            continue
        if mode in ("whole", "dra"):
            why = (f"{mode}: {whole} x {gpu.name} per replica"
                   + (f" (tensorParallel {w.tensor_parallel})" if w.tensor_parallel > 1 else "")
                   + (f" ({w.memory_gb:g} GB needed, {gpu.memory_gb:g} GB per GPU)"
                      if w.memory_gb else ""))
            return _Placement(pool, pi, gpu, mode, whole, mode, why=why)
        if not single:
            problems.append(f"{pool.name}: {mode} gives a replica part of one GPU, but it "
                            f"needs {whole} GPUs")
            continue
        if mode == "mig":
            if sharing.mig_strategy != "mixed":
                raise _err(SpecError, "migStrategy single is not planned by gpuvalues (it "
                           "needs one profile on every GPU of a node); use mixed, or write "
                           "the values by hand", spec, *(
                               ("workloads", wi, "sharing", "migStrategy") if w.sharing
                               else ("sharing", "migStrategy")))
            if not gpu.mig_capable:
                problems.append(f"{pool.name}: {gpu.name} has no MIG")
                continue
            if not pool.mig:
                problems.append(f"{pool.name}: MIG is off for this pool (set mig: true)")
                continue
            if sharing.mig_profile:
                try:
                    prof = gpu.profile(sharing.mig_profile)
                except CatalogError as exc:
                    raise _err(CatalogError, exc.message + " [GV001]", spec, *(
                        ("workloads", wi, "sharing", "migProfile") if w.sharing
                        else ("sharing", "migProfile"))) from None
                if w.memory_gb and prof.memory_gb < w.memory_gb:
                    problems.append(f"{pool.name}: {prof.name} has {prof.memory_gb:g} GB, "
                                    f"the model needs {w.memory_gb:g} GB [GV013]")
                    continue
            else:
                if not w.memory_gb:
                    raise _err(SpecError, "mig needs memoryGB (to pick the smallest profile "
                               "that holds the model) or sharing.migProfile", spec, *at)
                prof = _smallest_profile(gpu, w.memory_gb)
                if prof is None:
                    problems.append(f"{pool.name}: no MIG profile of {gpu.name} holds "
                                    f"{w.memory_gb:g} GB [GV013]")
                    continue
            from gpuvalues.planners import mig
            per = mig.max_instances(gpu, prof.name)
            why = (f"mig: {prof.name} ({prof.memory_gb:g} GB"
                   + (f" >= {w.memory_gb:g} GB needed" if w.memory_gb else "")
                   + f"), {per} per {gpu.name}")
            return _Placement(pool, pi, gpu, "mig", 1, "mig", mig_profile=prof.name,
                              units_per_gpu=per, why=why)
        # time-slicing / mps
        from gpuvalues.planners.deviceplugin import mps_max_clients
        limit = mps_max_clients(gpu) if mode == "mps" else 48
        if sharing.replicas_per_gpu:
            replicas = sharing.replicas_per_gpu
        elif w.memory_gb:
            replicas = min(limit, int(gpu.memory_gb // w.memory_gb))
        else:
            raise _err(SpecError, f"{mode} needs memoryGB (to size replicas per GPU) or "
                       "sharing.replicasPerGpu", spec, *at)
        if replicas < 2:
            problems.append(f"{pool.name}: {gpu.memory_gb:g} GB holds only {replicas} "
                            f"replica(s) of {w.memory_gb:g} GB; sharing needs >= 2")
            continue
        if mode == "mps" and replicas > limit:
            problems.append(f"{pool.name}: MPS allows at most {limit} clients per "
                            f"{gpu.name}, asked {replicas}")
            continue
        why = (f"{mode}: {replicas} replicas per {gpu.name}"
               + (f" ({gpu.memory_gb:g} GB / {w.memory_gb:g} GB)" if w.memory_gb else ""))
        return _Placement(pool, pi, gpu, "shared", 1, mode, replicas_per_gpu=replicas,
                          units_per_gpu=replicas, why=why)
    raise _err(PlanError, f"no node pool can host {w.name!r} with sharing "
               f"{sharing.mode!r}: " + "; ".join(problems), spec, *at)


def _gfd_products(gpu, placement: _Placement) -> list[str]:
    """GFD `nvidia.com/gpu.product` values for the pool's GPU, as the device plugin's
    GFD labels them under this sharing mode (-SHARED suffix when replicas are renamed;
    the mixed MIG strategy keeps the plain product name)."""
    names = sorted({catalog.gfd_product_label(a) for a in (*gpu.aliases, gpu.name)
                    if a.upper().startswith("NVIDIA")})
    if placement.mode == "shared":
        return [f"{n}-SHARED" for n in names]
    return names


def _device_plugin_config(placement: _Placement, mig_plan: "_MigPlan | None"
                          ) -> tuple[str, dict] | None:
    """Named device-plugin config for the pool (built and validated by gpuvalues.planners.deviceplugin,
    or by the MIG planner for MIG pools)."""
    from gpuvalues.planners import deviceplugin
    if placement.mode == "mig" and mig_plan is not None:
        name = placement.pool.name
        return name, mig_plan.dp_configs[name]
    if placement.mode == "shared":
        cfg = deviceplugin.build_device_plugin_config(
            sharing=placement.sharing, replicas=placement.replicas_per_gpu,
            rename_by_default=True, gpu=placement.gpu, mig_enabled=False)
        prefix = "mps" if placement.sharing == "mps" else "ts"
        return f"{prefix}-{placement.replicas_per_gpu}", cfg
    return None


@dataclass(frozen=True)
class _MigPlan:
    """The MIG layout of every MIG pool, shared by the workloads placed there (internal).

    `units`: workload -> MIG instances the layout gives it; `node_labels`: node-config
    name -> labels; `node_groups`: (pool, config name, nodes); `dp_configs`: pool name ->
    device-plugin config; `notes`: how the plan was made.
    """

    units: dict
    mig_parted: dict
    node_labels: dict
    node_groups: tuple
    dp_configs: dict
    notes: tuple


def _peak_replicas(spec: Spec, w: Workload, gpu_mode: str) -> int:
    """Replicas at peak: autoscaling.maxReplicas, else the capacity model's max replicas
    (M/M/c with headroom), else the default; `plan` and `values` both size with it."""
    from gpuvalues.planners import autoscaling
    a = spec.autoscaling
    if a.max_replicas is not None:
        return a.max_replicas
    if a.engine != "none" and w.load and w.throughput_per_replica:
        base = w.load.base if w.load.base is not None else w.load.peak / 4
        try:
            return autoscaling.plan_capacity(base, w.load.peak, w.throughput_per_replica,
                                             gpu_mode=gpu_mode, server_type=w.server,
                                             max_queue_wait_s=_queue_budget(w)).max_replicas
        except GpuValuesError:
            return DEFAULT_MAX_REPLICAS     # the per-workload build reports it, placed
    return DEFAULT_MAX_REPLICAS


def _queue_budget(w: Workload) -> float:
    """Mean queueing delay the replica count must keep: the latency SLO when the spec
    gives one (throughputPerReplica is already measured within it, so waiting in the
    queue must not by itself use up the SLO), else the capacity model's 1 s default."""
    return w.slo.latency_ms / 1000 if w.slo.latency_ms else 1.0


def _mig_plan(spec: Spec, placements: list[_Placement]) -> _MigPlan | None:
    """Lay out the MIG pools for their workloads' peak replicas with the optimal planner
    (gpuvalues.planners.milp, HiGHS); each workload keeps the profile its placement chose.
    When the peak does not fit, fall back to splitting each node's GPUs in proportion
    to demand (maxReplicas is then capped by what each workload got)."""
    members = [(w, pl) for w, pl in zip(spec.workloads, placements) if pl.mode == "mig"]
    if not members:
        return None
    from gpuvalues.planners import milp  # HiGHS + numpy: imported only when MIG is planned
    pools: dict[str, NodePool] = {pl.pool.name: pl.pool for _, pl in members}
    demands = []
    for w, pl in members:
        cap = int(pl.units_per_gpu) * pl.pool.gpus
        demands.append(milp.ModelDemand(
            w.name, replicas=min(_peak_replicas(spec, w, pl.mode), cap), memory_gb=w.memory_gb,
            allowed_profiles=(pl.mig_profile,), pools=(pl.pool.name,)))
    inputs = [milp.NodePool(p.name, p.gpu, p.gpus_per_node, p.nodes, mig_enabled=True,
                               price_per_gpu=p.price_per_gpu_hour) for p in pools.values()]
    try:
        result = milp.plan(demands, inputs, baselines=False)
    except PlanError as exc:
        return _split_plan(spec, members, pools, f"the optimal MIG planner could not fit the "
                           f"peak ({exc.message}); split each node's GPUs in proportion to "
                           "demand instead")
    units: dict = {}
    groups = []
    node_configs: dict = {}
    filters: dict = {}
    for pp in result.pools:
        for g in pp.gpu_groups:
            for inst in g.instances:
                if inst.model:
                    units[inst.model] = units.get(inst.model, 0) + g.count
        gpu = placements[[pl.pool.name for pl in placements].index(pp.pool.name)].gpu
        for ng in pp.node_groups:
            groups.append((pp.pool.name, ng.config_name, ng.count))
            node_configs[ng.config_name] = [dict(d) if d is not None else {}
                                            for d in ng.devices]
            if gpu.device_filter:
                filters[ng.config_name] = list(gpu.device_filter)
    from gpuvalues.planners import migparted
    cfg = migparted.build_mig_parted_config(node_configs, device_filters=filters or None)
    notes = (f"MIG plan by the optimal planner (HiGHS): {result.gpus_used} GPUs, gap "
             f"{result.gap:.0%}" + ("" if result.optimal else " (time limit: not proven)"),)
    return _MigPlan(units, cfg, {k: dict(v) for k, v in result.node_labels.items()},
                    tuple(groups), {k: dict(v) for k, v in result.device_plugin_configs.items()},
                    notes)


def _split_plan(spec: Spec, members: list, pools: dict, note: str) -> _MigPlan:
    """Fallback layout: each node's GPUs split among the pool's MIG workloads in
    proportion to their peak demand; a GPU holds one profile, as many as fit."""
    from gpuvalues.planners import deviceplugin, migparted

    units: dict = {}
    node_configs: dict = {}
    filters: dict = {}
    labels: dict = {}
    groups = []
    dp: dict = {}
    for pool_name, pool in pools.items():
        mine = [(w, pl) for w, pl in members if pl.pool.name == pool_name]
        n = pool.gpus_per_node
        if len(mine) > n:
            names = ", ".join(w.name for w, _ in mine)
            raise _err(PlanError, f"{len(mine)} MIG workloads ({names}) share pool "
                       f"{pool_name}, whose nodes have only {n} GPUs", spec, "cluster",
                       "nodePools", mine[0][1].pool_index)
        need = {w.name: max(1, math.ceil(_peak_replicas(spec, w, pl.mode) /
                                         (pl.units_per_gpu * pool.nodes))) for w, pl in mine}
        share = {name: 1 for name in need}
        for _ in range(n - len(share)):      # spare GPUs go to the neediest workload
            name = max(share, key=lambda k: (need[k] / share[k], -list(share).index(k)))
            share[name] += 1
        devices: list = []
        for w, pl in mine:
            devices += [{pl.mig_profile: int(pl.units_per_gpu)}] * share[w.name]
            units[w.name] = share[w.name] * pool.nodes * int(pl.units_per_gpu)
        node_configs[pool_name] = devices
        if mine[0][1].gpu.device_filter:
            filters[pool_name] = list(mine[0][1].gpu.device_filter)
        labels[pool_name] = {**migparted.node_labels(pool_name), DP_CONFIG_LABEL: pool_name}
        groups.append((pool_name, pool_name, pool.nodes))
        dp[pool_name] = deviceplugin.build_device_plugin_config(mig_strategy="mixed")
    cfg = migparted.build_mig_parted_config(node_configs, device_filters=filters or None)
    return _MigPlan(units, cfg, labels, tuple(groups), dp, (note,))


def _topology(spec: Spec, placement: _Placement) -> tuple[str | None, int | None, dict]:
    """(label value, NVLink group size, node labels) for the pool, from its topology
    file (`nvidia-smi topo -m`) or label; (None, None, {}) when the spec gives none."""
    topo = placement.pool.topology
    if topo is None:
        return None, None, {}
    from gpuvalues.planners import topology
    if topo.label:
        return topo.label, topology.nvlink_size(topo.label) or 1, {"nvidia.com/gpu.topology": topo.label}
    at = ("cluster", "nodePools", placement.pool_index, "topology", "file")
    try:
        text = topo.file.read_text()
    except OSError as exc:
        raise _err(SpecError, f"cannot read topology file {str(topo.file)!r}: "
                   f"{exc.strerror}", spec, *at) from None
    parsed = topology.parse_topo_matrix(text, source=str(topo.file))
    value = parsed.topology_value()
    return value, max(parsed.largest_nvlink_clique(), 1), parsed.labels()


def _autoscaling(spec: Spec, wi: int, w: Workload, placement: _Placement,
                 inventory_units: float) -> tuple[dict, list[str], list[str]]:
    """autoscaling values, decisions and warnings (capacity model + metric choice)."""
    from gpuvalues.planners import autoscaling

    a = spec.autoscaling
    out: dict = {"engine": a.engine}
    decisions: list[str] = []
    warnings: list[str] = []
    if a.engine == "none":
        return out, decisions, warnings
    server_metric = None if a.metric == "choose" or a.metric.startswith("DCGM_") else a.metric
    prefer = "auto"
    if a.metric != "choose":
        prefer = "gpu" if a.metric.startswith("DCGM_") else "server"
    units_per_replica = placement.count / placement.units_per_gpu
    try:
        if w.load and w.throughput_per_replica:
            plan = autoscaling.plan_capacity(
                w.load.base if w.load.base is not None else w.load.peak / 4, w.load.peak,
                w.throughput_per_replica, gpus_per_replica=units_per_replica,
                gpu_mode=placement.mode, server_type=w.server, prefer=prefer,
                server_metric=server_metric, max_queue_wait_s=_queue_budget(w),
                request_latency_s=w.slo.latency_ms / 1000 if w.slo.latency_ms else None)
            metric = plan.metric
            companion = plan.companion if a.metric == "choose" else None
            lo, hi = plan.min_replicas, plan.max_replicas
            if a.min_replicas is None or a.max_replicas is None:
                decisions.append(f"replicas {lo}..{hi} from the M/M/c model (peak "
                                 f"{w.load.peak:g} req/s, {w.throughput_per_replica:g} req/s "
                                 f"per replica, mean queue wait <= {_queue_budget(w):g} s)")
            warnings.extend(plan.warnings)
        else:
            metric = autoscaling.choose_metric(placement.mode, w.server, prefer=prefer,
                                               server_metric=server_metric)
            companion = None
            lo, hi = DEFAULT_MIN_REPLICAS, DEFAULT_MAX_REPLICAS
            if a.min_replicas is None or a.max_replicas is None:
                decisions.append(f"replicas {lo}..{hi}: defaults (give load and "
                                 "throughputPerReplica to size them)")
    except CapacityError as exc:
        at = ("autoscaling", "metric") if a.metric != "choose" else ("workloads", wi)
        raise _err(CapacityError, exc.message + (" [GV003]" if exc.field == "prefer" else ""),
                   spec, *at) from None
    if a.metric != "choose" and metric.name != a.metric:
        raise _err(CapacityError, f"{a.metric} cannot scale gpu.mode {placement.mode}: "
                   f"{metric.reason} [GV003]", spec, "autoscaling", "metric")
    # inventory_units and placement.count are both in pods' units (GPUs, MIG instances,
    # shared replicas)
    fit = math.floor(inventory_units / placement.count + 1e-9) if inventory_units else None
    if a.max_replicas is None and fit is not None and hi > fit:
        hi = max(fit, 1)
        decisions.append(f"maxReplicas capped at {hi}: what the {placement.pool.name} "
                         "inventory holds")
    if a.max_replicas is not None:
        hi = a.max_replicas
    lo = a.min_replicas if a.min_replicas is not None else min(lo, hi)
    if a.max_replicas is None:
        hi = max(hi, lo)
    if a.min_replicas is not None or a.max_replicas is not None:
        decisions.append(f"replicas {lo}..{hi}" + (" as the spec sets" if a.min_replicas
                         is not None and a.max_replicas is not None else " (spec and model)"))
    metrics = [{"name": metric.name, "target": a.target or metric.target}]
    decisions.append(f"scale on {metric.name} (target {a.target or metric.target}): "
                     f"{metric.reason}")
    if companion is not None:
        # The waiting queue is 0 while capacity suffices; without the running count the
        # HPA drifts to minReplicas under steady load and saws (see `gpuvalues simulate`).
        metrics.append({"name": companion.name, "target": companion.target})
        decisions.append(f"and on {companion.name} (target {companion.target}): {companion.reason}")
    out.update({"minReplicas": lo, "maxReplicas": hi, "metrics": metrics})
    if a.engine == "keda":
        # KEDA's fallback (replicas while Prometheus is unreachable) must lie within
        # min..max; the chart's default is 2.
        out["keda"] = {"fallback": {"replicas": min(hi, max(lo, 2))}}
        if a.prometheus_address:
            out["keda"]["serverAddress"] = a.prometheus_address
    return out, decisions, warnings


def _platform(spec: Spec, first: bool, engine: str, configs: dict) -> dict:
    p = spec.platform
    own = first and not p.gpu_operator
    out: dict = {
        "gpuOperator": p.gpu_operator,
        "devicePlugin": {"enabled": own and p.device_plugin},
        "gfd": {"enabled": own and p.gpu_feature_discovery},
        "dcgmExporter": {"enabled": own and p.dcgm_exporter},
        "prometheusAdapter": {"enabled": first and p.prometheus_adapter and engine == "hpa"},
        "alerts": {"enabled": first and p.alerts},
    }
    if configs:
        out["devicePlugin"]["config"] = {"map": {
            "default": {"version": "v1", "flags": {"migStrategy": "none"}}, **configs}}
    return out


def plan_values(spec: Spec, workload: str | None = None, *, first: bool | None = None
                ) -> Values:
    """Chart values for one workload of `spec` (the only one when `workload` is None).

    The whole spec is planned (MIG pools are shared by their workloads); the values of
    the named workload are returned. Raises a `GpuValuesError` placed at the spec line
    that makes the workload impossible, or `ValidationFailed` when the generated values
    break the chart's schema or a semantic rule.
    """
    if workload is None:
        if len(spec.workloads) != 1:
            names = ", ".join(w.name for w in spec.workloads)
            raise SpecError(f"the spec has {len(spec.workloads)} workloads ({names}); name "
                            "one (--workload NAME) or use build_all")
        w = spec.workloads[0]
    else:
        w = spec.workload(workload)
    wi = spec.workloads.index(w)
    placements, mig_plan, configs = _fleet(spec)
    return _build(spec, wi, w, wi == 0 if first is None else first, placements[wi],
                  mig_plan, configs)


def plan_all(spec: Spec, *, errors: list[GpuValuesError] | None = None) -> tuple[Values, ...]:
    """Values for every workload; the first release installs the GPU platform.

    With `errors`, a workload whose values cannot be built is left out and its error
    appended there (so `validate` reports every workload); without, the error is raised.
    A fleet that cannot be planned at all always raises.
    """
    placements, mig_plan, configs = _fleet(spec)
    built = []
    for i, w in enumerate(spec.workloads):
        try:
            built.append(_build(spec, i, w, i == 0, placements[i], mig_plan, configs))
        except GpuValuesError as exc:
            if errors is None:
                raise
            errors.append(exc)
    return tuple(built)


def _fleet(spec: Spec) -> tuple[list[_Placement], "_MigPlan | None", dict]:
    """What every workload's values depend on, planned once for the whole spec: each
    workload's placement, the MIG layout of the pools and the device-plugin configs."""
    placements = [_place(spec, i, w) for i, w in enumerate(spec.workloads)]
    mig_plan = _mig_plan(spec, placements)
    return placements, mig_plan, _all_device_plugin_configs(spec, placements, mig_plan)


def _all_device_plugin_configs(spec: Spec, placements: list[_Placement],
                               mig_plan: _MigPlan | None) -> dict:
    """Every named device-plugin config the fleet needs; a node takes exactly one, so
    two workloads needing different configs on one pool cannot share it."""
    configs: dict = {}
    per_pool: dict[str, tuple[str, str]] = {}
    for w, pl in zip(spec.workloads, placements):
        dp = _device_plugin_config(pl, mig_plan)
        if dp is None:
            continue
        name, cfg = dp
        seen = per_pool.get(pl.pool.name)
        if seen and seen[0] != name:
            raise _err(PlanError, f"workloads {seen[1]!r} and {w.name!r} need different "
                       f"device-plugin configs ({seen[0]}, {name}) on pool {pl.pool.name}, "
                       "but a node runs one; give them separate pools (nodePool) or the "
                       "same sharing", spec, "workloads", spec.workloads.index(w))
        per_pool[pl.pool.name] = (name, w.name)
        configs[name] = cfg
    return configs


def _build(spec: Spec, wi: int, w: Workload, first: bool, placement: _Placement,
           mig_plan: _MigPlan | None, all_configs: dict) -> Values:
    gpu = placement.gpu
    decisions = [f"{w.name}: pool {placement.pool.name} ({placement.pool.nodes} x "
                 f"{placement.pool.gpus_per_node} {gpu.name}); {placement.why}"]
    warnings: list[Finding] = list(spec.warnings) if first else []

    def warn(message: str, code: str = "GV000", *at: Any) -> None:
        source, line, col = spec.position(*(at or ("workloads", wi)))
        warnings.append(Finding(code, message, yamlio.format_path(at or ("workloads", wi)),
                                source, line, col, "warning"))

    if placement.mode == "dra" and spec.kube_minor < 34:
        at: tuple = ("kubernetesVersion",)
        if spec.loaded is None or at not in spec.loaded.positions:
            at = ("workloads", wi)
        raise _err(SpecError, f"sharing dra needs Kubernetes >= 1.34 (resource.k8s.io/v1); "
                   f"the spec targets {spec.kubernetes_version} [GV009]", spec, *at)

    server: dict = {"type": w.server}
    if w.image:
        repo, tag, digest = _split_image(w.image)
        server["image"] = {"repository": repo, "tag": tag, "digest": digest}
    if w.model_load_timeout_seconds:
        server["modelLoadTimeoutSeconds"] = w.model_load_timeout_seconds
    gpu_values: dict = {"mode": placement.mode, "count": placement.count}
    if placement.mode == "mig":
        strategy = spec.sharing_for(w).mig_strategy
        gpu_values["mig"] = {"strategy": strategy, "profile": placement.mig_profile}
    if placement.mode == "shared" and w.server == "vllm" and placement.replicas_per_gpu:
        # vLLM pre-allocates --gpu-memory-utilization (default 0.9) of the whole GPU; with
        # time-slicing or MPS every replica on the GPU would, and all but one would OOM.
        gpu_values["shared"] = {"memoryFraction": math.floor(90 / placement.replicas_per_gpu) / 100}
    model: dict = {"name": w.model}
    if w.model_pvc:
        model.update({"source": "pvc", "pvc": {"claimName": w.model_pvc}})
    values: dict = {"server": server, "model": model, "gpu": gpu_values}

    # Topology: multi-GPU pods go to nodes whose NVLink group fits them.
    label, nvlink_group, topo_labels = _topology(spec, placement)
    if placement.count > 1 and placement.mode in ("whole", "dra"):
        if label is None:
            values["topology"] = {"key": ""}
            warn(f"{placement.count} GPUs per pod, but node pool {placement.pool.name} has no "
                 "topology: pods are placed without an NVLink affinity (add topology.file or "
                 "topology.label to the pool)", "GV006")
        else:
            values["topology"] = {"values": [label]}
    values["gpuProducts"] = _gfd_products(gpu, placement)

    # Inventory in the units a replica consumes (GPUs, MIG instances, shared replicas).
    pool_gpus = placement.pool.gpus
    inventory_units = pool_gpus * placement.units_per_gpu
    in_mig_plan = mig_plan is not None and placement.mode == "mig"
    if in_mig_plan:
        inventory_units = mig_plan.units.get(w.name, 0)
        decisions += list(mig_plan.notes)
        decisions.append(f"MIG layout gives {w.name} {inventory_units} x "
                         f"{placement.mig_profile} at peak")
    autoscaling, more, capacity_warnings = _autoscaling(spec, wi, w, placement,
                                                        inventory_units)
    decisions += more
    for text in capacity_warnings:
        warn(text, "GV003")
    values["autoscaling"] = autoscaling

    configs: dict = {}
    node_labels: dict = {}
    dp = _device_plugin_config(placement, mig_plan)
    if dp:
        configs[dp[0]] = dp[1]
    mig_parted = None
    node_groups: dict = {}
    if in_mig_plan:
        mig_parted = mig_plan.mig_parted
        for pool, config, count in mig_plan.node_groups:
            if pool == placement.pool.name:
                node_labels[config] = dict(mig_plan.node_labels[config])
                node_groups[config] = (pool, count)
                decisions.append(f"label {count} {pool} node(s) with config {config}")
        spare = placement.pool.nodes - sum(c for _, c in node_groups.values())
        if spare > 0:
            decisions.append(f"{spare} {placement.pool.name} node(s) are not needed by the "
                             "MIG plan at peak")
    elif dp:
        node_labels[placement.pool.name] = {DP_CONFIG_LABEL: dp[0]}
    if topo_labels:
        if not node_labels:
            node_labels[placement.pool.name] = {}
        for labels in node_labels.values():
            labels.update(topo_labels)
    for config in node_labels:
        node_groups.setdefault(config, (placement.pool.name, placement.pool.nodes))
    release_configs = all_configs if first else {}
    values["platform"] = _platform(spec, first, autoscaling["engine"], release_configs)
    if not first and configs:
        decisions.append("device-plugin configs are installed by the first workload's "
                         "release; label the nodes as node_labels says")

    # What the semantic rules need to check these values (gpuvalues.checks.built).
    share = math.ceil(inventory_units / placement.units_per_gpu) if in_mig_plan else pool_gpus
    facts = {"kube_version": spec.kubernetes_version, "gpu_models": (gpu.name,),
             "gpus_per_node": placement.pool.gpus_per_node, "inventory_gpus": share,
             "nvlink_group": nvlink_group, "nvlink_source": f"node pool {placement.pool.name}",
             "memory_gb": w.memory_gb, "tensor_parallel": w.tensor_parallel}
    return Values(w.name, values, mig_parted, node_labels, configs, tuple(decisions),
                  tuple(warnings), node_groups, facts)


def inputs_from_spec(spec: Spec) -> tuple[list, list, list[str]]:
    """The optimal planner's inputs for `gpuvalues plan`: (`milp.ModelDemand`s,
    `milp.NodePool`s, notes) from a spec.

    Replicas: the peak replicas `values` sizes the Deployment for (autoscaling.maxReplicas,
    else the capacity model's, else the default), so `plan` previews what `values` deploys. `sharing.migProfile` pins the profile; `whole` pins
    whole GPUs (or the full MIG profile). Workloads needing several GPUs per replica
    (gpus > 1 or tensorParallel > 1) are left out with a note: a MIG plan places one
    instance per replica.
    """
    from gpuvalues.planners import milp  # HiGHS + numpy: imported only when planning

    notes: list[str] = []
    demands: list = []
    pool_modes: dict[str, set] = {}
    pool_reps: dict[str, int | None] = {}
    names = [p.name for p in spec.node_pools]
    fulls = tuple(sorted({catalog.get_gpu(p.gpu).full_profile.name for p in spec.node_pools
                          if catalog.get_gpu(p.gpu).full_profile is not None}))
    for w in spec.workloads:
        share = spec.sharing_for(w)
        if w.gpus_per_replica > 1:
            notes.append(f"workload {w.name}: {w.gpus_per_replica} GPUs per replica (tensor parallel) is planned "
                         "on whole GPUs outside the MIG plan")
            continue
        gpu_mode = {"mig": "mig", "dra": "dra", "time-slicing": "shared", "mps": "shared"}.get(share.mode, "whole")
        replicas = _peak_replicas(spec, w, gpu_mode)
        allowed = None
        if share.mig_profile:
            allowed = (share.mig_profile,)
        elif share.mode == "whole":
            allowed = (milp.WHOLE,) + fulls
        for pn in ([w.node_pool] if w.node_pool else names):
            if share.mode in ("time-slicing", "mps"):
                pool_modes.setdefault(pn, set()).add(share.mode)
                pool_reps[pn] = share.replicas_per_gpu
        demands.append(milp.ModelDemand(w.name, replicas=replicas, memory_gb=w.memory_gb,
                                           allowed_profiles=allowed,
                                           pools=(w.node_pool,) if w.node_pool else None))
    pools = []
    for p in spec.node_pools:
        modes = pool_modes.get(p.name, set())
        if len(modes) > 1:
            raise PlanError(f"pool {p.name!r}: workloads ask for both time-slicing and MPS; the device plugin "
                            "applies one sharing mode per node", field=f"cluster.nodePools.{p.name}")
        mode = next(iter(modes), None)
        gpu = catalog.get_gpu(p.gpu)
        if mode and p.mig and gpu.mig:
            notes.append(f"pool {p.name}: MIG is on, so {mode} is not used there")
            mode = None
        pools.append(milp.NodePool(p.name, p.gpu, p.gpus_per_node, p.nodes, mig_enabled=bool(p.mig),
                                      sharing=mode, sharing_replicas=pool_reps.get(p.name) if mode else None,
                                      price_per_gpu=p.price_per_gpu_hour))
    return demands, pools, notes


def _split_image(image: str) -> tuple[str, str, str]:
    """`repo:tag@sha256:...` -> (repo, tag, digest); the schema checked the syntax."""
    digest = ""
    if "@" in image:
        image, digest = image.split("@", 1)
    repo, tag = image, ""
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        repo, tag = image[:colon], image[colon + 1:]
    return repo, tag, digest


def spec_inventory(spec: Spec, built: Values):
    """An `Inventory` of the spec's node pools as they will look once `built` is applied:
    GFD product and MIG-strategy labels, the node labels `built.node_labels` asks for,
    and allocatable GPUs, MIG devices (from the MIG layout) or shared replicas. CPU and
    memory are left out (gpuvalues.planners.fit treats them as unlimited). For `gpuvalues.planners.fit`."""
    from gpuvalues.planners.inventory import GpuInfo, Inventory, Node

    nodes = []
    for pool in spec.node_pools:
        gpu = catalog.get_gpu(pool.gpu)
        gfd = sorted(catalog.gfd_product_label(a) for a in (*gpu.aliases, gpu.name)
                     if a.upper().startswith("NVIDIA"))
        product = gfd[-1] if gfd else gpu.name
        groups = [(g, n) for g, (p, n) in built.node_groups.items() if p == pool.name]
        index = 0
        for group, count in groups or [(None, pool.nodes)]:
            labels = {"nvidia.com/gpu.count": str(pool.gpus_per_node),
                      "nvidia.com/gpu.product": product,
                      **(built.node_labels.get(group, {}) if group else {})}
            alloc = {"nvidia.com/gpu": pool.gpus_per_node}
            mig_profiles: dict = {}
            replicas = 1
            devices = _group_devices(built, group, pool.gpus_per_node)
            config = built.device_plugin_configs.get(labels.get(DP_CONFIG_LABEL, ""), {})
            shared = [(kind, r) for kind in ("timeSlicing", "mps")
                      for r in (config.get("sharing", {}).get(kind) or {}).get("resources", [])]
            if devices is not None:
                labels["nvidia.com/mig.strategy"] = "mixed"
                for devs in devices:
                    for prof, n in devs.items():
                        mig_profiles[prof] = mig_profiles.get(prof, 0) + n
                alloc = {catalog.mig_resource_name(prof): n for prof, n in mig_profiles.items()}
            elif shared:
                kind, res = shared[0]
                replicas = res["replicas"]
                # GFD's labels under sharing (k8s-device-plugin internal/lm/resource.go)
                labels["nvidia.com/gpu.product"] = product + "-SHARED"
                labels["nvidia.com/gpu.replicas"] = str(replicas)
                labels["nvidia.com/gpu.sharing-strategy"] = \
                    "mps" if kind == "mps" else "time-slicing"
                alloc = {"nvidia.com/gpu.shared": pool.gpus_per_node * replicas}
            info = GpuInfo(product=labels["nvidia.com/gpu.product"], count=pool.gpus_per_node,
                           mig_capable=gpu.mig_capable,
                           mig_strategy="mixed" if devices is not None else "none",
                           mig_profiles=mig_profiles, replicas=replicas,
                           sharing_strategy=labels.get("nvidia.com/gpu.sharing-strategy",
                                                       "none"))
            for _ in range(count):
                index += 1
                nodes.append(Node(f"{pool.name}-{index:03d}", labels=labels,
                                  capacity=alloc, allocatable=alloc, gpu=info))
        for _ in range(pool.nodes - index):      # nodes the MIG plan leaves unconfigured
            index += 1
            nodes.append(Node(f"{pool.name}-{index:03d}",
                              labels={"nvidia.com/gpu.product": product},
                              capacity={"nvidia.com/gpu": pool.gpus_per_node},
                              allocatable={"nvidia.com/gpu": pool.gpus_per_node}))
    return Inventory(tuple(nodes), source="spec")


def _group_devices(built: Values, group: str | None, gpus: int) -> list | None:
    """mig-devices of each GPU of a node group, from the mig-parted config (None: no MIG)."""
    if group is None or not built.mig_parted or group not in built.mig_parted["mig-configs"]:
        return None
    per_gpu: dict = {}
    for entry in built.mig_parted["mig-configs"][group]:
        idxs = entry["devices"] if isinstance(entry["devices"], list) else range(gpus)
        for i in idxs:
            per_gpu[i] = dict(entry.get("mig-devices") or {}) if entry["mig-enabled"] else {}
    return list(per_gpu.values())
