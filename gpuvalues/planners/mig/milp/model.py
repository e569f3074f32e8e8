"""The MILP planner's model: its inputs (`ModelDemand`, `PlanPool`: a planner pool, not the spec's `fleet.spec.NodePool`), its answer (`Plan`), the
configuration ILP's columns and weights (`build_model`), and how a solution maps to GPUs and
nodes (`assign_runs`, `chunk_nodes`, `spare_instances`). The package: `highs` (the one HiGHS
adapter: solver I/O), `certify`, `solve`, `diagnose`, `plan` (the entry points); the re-planner
(`gpuvalues.planners.mig.replan`) uses this module's public API.

Optimal MIG planner: fewest GPUs (or lowest cost) that serve a workload mix, provably.

Formulation (the configuration ILP of "configurable machine scheduling", Casey et al. 2024):
for each node pool k and each valid maximal MIG layout L of its GPU (over the instance
types some model can use), an integer x[k,L] = how many GPUs of pool k get layout L; for
each pool, instance type p and model m, an integer z[k,p,m] = instances of p serving m.

    min  sum_k price_k * sum_L x[k,L]
    s.t. sum_L x[k,L]                  <= GPUs in pool k
         sum_m z[k,p,m] - sum_L n(L,p) x[k,L] <= 0        (instances used <= instances built)
         sum_{k,p} w(m,k,p) z[k,p,m]   >= need_m          (replicas, or throughput)

Restricting to maximal layouts loses nothing: any layout is contained in a maximal one,
and unused instances cost nothing. The model size depends on the number of layouts,
profiles and models, not on the fleet size (bench/bench_planner.py: 16,384 GPUs < 1 s). HiGHS
(highspy) solves it; we report the LP-relaxation bound, the MIP bound and the gap, certified
(`certify`): the objective is recomputed from the solution returned, HiGHS's dual bound counts
only when its report matches that solution, and a warm-started answer that does not check out
is solved again cold (`run_highs`); "optimal" means the objective meets a bound that holds.

Pools without MIG (or with MIG disabled) offer whole GPUs (instance type "gpu"); with
`sharing="time-slicing"|"mps"` they offer R shared slots per GPU (type "shared"), R from
`sharing_replicas` or, by default, from the largest memory need of the models that can use them.

Public API (frozen dataclasses; all pure; `plan`/`sharing_plan` in `milp.plan`, `certify`/`run_highs`
in `milp.certify`):
- `ModelDemand(name, replicas=None, throughput=None, throughput_per_instance={}, memory_gb=None,
  excluded_profiles=(), allowed_profiles=None, pools=None)`. `throughput_per_instance` keys: a profile
  name (`"1g.10gb"`), `"gpu"` (whole GPU), `"shared"` (one time-slicing/MPS slot), each
  optionally qualified by GPU (`"H100-80GB-SXM/1g.10gb"`; the qualified key wins).
  With `throughput` set, only instance types with a throughput entry are used.
- `PlanPool(name, gpu, gpus_per_node=8, nodes=1, mig_enabled=True, sharing=None,
  sharing_replicas=None, price_per_gpu=None)`.
- `plan(demands, pools, *, objective="gpus"|"cost", prices=None, baselines=True,
  time_limit=30.0, gap_tolerance=0.0)` -> `Plan`; raises `PlanError` saying which model, pool
  or constraint (total capacity, one pool's capacity, integrality) is short. The time limit
  is shared by solver and baselines; the LP rounding (floor, then the remainder solved
  exactly) is the warm start and the floor of the result, so a plan is never worse than it.
  Identical GPUs are counts throughout: one `mig.place` per layout, not per GPU.
- `replan(demands, pools, current, *, gpu_slack=0, max_node_changes=None,
  max_unavailable_per_pool=None, time_limit=30.0)` -> `replan.Replan`: fewest GPUs, then
  fewest node reconfigurations against the current layout (`gpuvalues.planners.mig.replan`).
  `prices` maps a GPU model (any alias) to a price per GPU; `PlanPool.price_per_gpu` wins.
- `certify(lp, solution, claimed=, dual_bound=, lp_bound=)` -> `Certificate` (objective, bound,
  optimal, gap) or None; `run_highs` applies it to every MIP, the plan's and the re-plan's.
- `Plan.to_dict()` (for JSON/YAML), `Plan.mig_parted_config`, `Plan.node_labels`,
  `Plan.device_plugin_configs`, `Plan.baselines`, `Plan.lp_bound`, `Plan.gap`.
- `sharing_plan(demands, gpu, mode, gpus=..., replicas=None)` -> `Plan` for one non-MIG pool.

`Plan.node_labels` maps a node-config name to the labels its nodes need
(`nvidia.com/mig.config` selects the mig-parted config of that name; `nvidia.com/device-plugin.config`
selects `Plan.device_plugin_configs[<pool>]`). `PoolPlan.node_groups` (`NodeConfigGroup`s) says how many nodes get each.
"""
from __future__ import annotations

from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence, TypeVar


from gpuvalues.catalog import GIB_PER_GB, GpuModel, MigProfile, get_gpu
from gpuvalues.errors import CatalogError, PlanError
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import geometry as mig
from gpuvalues.planners.mig import migparted
WHOLE = "gpu"
SHARED = "shared"
TIME_SLICING_WARNING = ("time-slicing gives no memory or fault isolation: every replica on a GPU shares its "
                        "memory, so one that grows past its share can OOM its neighbours, and one crash "
                        "takes them all down")


@dataclass(frozen=True)
class ModelDemand:
    """What one model needs. Give `replicas` or `throughput` (with `throughput_per_instance`)."""

    name: str
    replicas: int | None = None
    throughput: float | None = None
    throughput_per_instance: Mapping[str, float] = field(default_factory=dict)
    memory_gb: float | None = None
    excluded_profiles: tuple[str, ...] = ()
    allowed_profiles: tuple[str, ...] | None = None
    pools: tuple[str, ...] | None = None   # node pools it may run on (None: any)


@dataclass(frozen=True)
class PlanPool:
    """A group of identical nodes: `nodes` x `gpus_per_node` GPUs of model `gpu`."""

    name: str
    gpu: str
    gpus_per_node: int = 8
    nodes: int = 1
    mig_enabled: bool = True
    sharing: str | None = None
    sharing_replicas: int | None = None
    price_per_gpu: float | None = None

    @property
    def capacity(self) -> int:
        """GPUs in the pool (nodes x GPUs per node)."""
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Instance:
    """One instance on a GPU and the model it serves (None = spare)."""

    profile: str
    start: int
    model: str | None


@dataclass(frozen=True)
class GpuGroup:
    """`count` GPUs of one pool with the same layout and the same models on it."""

    pool: str
    layout: mig.GpuLayout | None
    instances: tuple[Instance, ...]
    count: int

    @property
    def label(self) -> str:
        """Short text of the layout (`1x3g.40gb+2x2g.20gb`), or `<n>x<profile>` without MIG."""
        if self.layout is not None:
            return self.layout.label()
        return f"{len(self.instances)}x{self.instances[0].profile}" if self.instances else "idle"


@dataclass(frozen=True)
class NodeConfigGroup:
    """`count` nodes configured alike; `devices[i]` is the mig-devices of GPU i (None = MIG off/idle)."""

    pool: str
    config_name: str
    count: int
    devices: tuple[tuple[tuple[str, int], ...] | None, ...]


@dataclass(frozen=True)
class PoolPlan:
    """One pool's part of a plan: GPU and node groups, spare instances and memory slices."""

    pool: PlanPool
    mode: str  # mig | whole | time-slicing | mps
    gpus_used: int
    nodes_used: int
    gpu_groups: tuple[GpuGroup, ...]
    node_groups: tuple[NodeConfigGroup, ...]
    spare_instances: Mapping[str, int]
    unused_memory_slices: int
    sharing_replicas: int | None = None


@dataclass(frozen=True)
class Baseline:
    """A simpler plan to compare against (whole GPUs, all-balanced, all-1g); `gpus` None when not applicable."""

    name: str
    gpus: int | None
    cost: float | None
    note: str = ""


@dataclass(frozen=True)
class Plan:
    """The planner's answer: pools, totals, LP/MIP bounds, baselines and the node-side configs."""

    objective: str
    pools: tuple[PoolPlan, ...]
    gpus_used: int
    cost: float
    lp_bound: float
    mip_bound: float
    gap: float
    optimal: bool
    solve_seconds: float
    served: Mapping[str, float]
    baselines: tuple[Baseline, ...]
    warnings: tuple[str, ...]
    mig_parted_config: Mapping[str, Any] | None
    node_labels: Mapping[str, Mapping[str, str]]
    device_plugin_configs: Mapping[str, Mapping[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON/YAML output."""
        return {
            "objective": self.objective,
            "gpus_used": self.gpus_used,
            "cost": self.cost,
            "lp_bound": self.lp_bound,
            "mip_bound": self.mip_bound,
            "gap": self.gap,
            "optimal": self.optimal,
            "solve_seconds": round(self.solve_seconds, 4),
            "served": dict(self.served),
            "pools": [{
                "name": p.pool.name, "gpu": get_gpu(p.pool.gpu).name, "mode": p.mode,
                "gpus_used": p.gpus_used, "gpus_available": p.pool.capacity, "nodes_used": p.nodes_used,
                "sharing_replicas": p.sharing_replicas,
                "spare_instances": dict(p.spare_instances), "unused_memory_slices": p.unused_memory_slices,
                "gpu_groups": [{"layout": g.label, "count": g.count,
                                "instances": [{"profile": i.profile, "start": i.start, "model": i.model}
                                              for i in g.instances]} for g in p.gpu_groups],
                "node_groups": [{"config": n.config_name, "count": n.count,
                                 "devices": [dict(d) if d is not None else None for d in n.devices]}
                                for n in p.node_groups],
            } for p in self.pools],
            "baselines": [{"name": b.name, "gpus": b.gpus, "cost": b.cost, "note": b.note} for b in self.baselines],
            "warnings": list(self.warnings),
            "mig_parted_config": self.mig_parted_config,
            "node_labels": {k: dict(v) for k, v in self.node_labels.items()},
            "device_plugin_configs": {k: v for k, v in self.device_plugin_configs.items()},
        }


# --------------------------------------------------------------------------- inputs

def check_inputs(demands: Sequence[ModelDemand], pools: Sequence[PlanPool]) -> None:
    if not demands:
        raise PlanError("no models to plan for: give at least one model with replicas or throughput")
    if not pools:
        raise PlanError("no node pools: give at least one pool (GPU model, GPUs per node, nodes)")
    seen = set()
    for d in demands:
        if d.name in seen:
            raise PlanError(f"model {d.name!r} is listed twice; merge its demands", field=f"models.{d.name}")
        seen.add(d.name)
        if (d.replicas is None) == (d.throughput is None):
            raise PlanError(f"model {d.name!r}: give exactly one of replicas or throughput", field=f"models.{d.name}")
        if d.replicas is not None and (not isinstance(d.replicas, int) or isinstance(d.replicas, bool) or d.replicas < 0):
            raise PlanError(f"model {d.name!r}: replicas must be a non-negative integer, got {d.replicas!r}",
                            field=f"models.{d.name}.replicas")
        if d.throughput is not None:
            if not d.throughput >= 0:
                raise PlanError(f"model {d.name!r}: throughput must be >= 0", field=f"models.{d.name}.throughput")
            if not d.throughput_per_instance:
                raise PlanError(f"model {d.name!r}: throughput needs throughput_per_instance (per-profile "
                                "throughput, e.g. {'1g.10gb': 20, '3g.40gb': 70})",
                                field=f"models.{d.name}.throughput_per_instance")
        for k, v in d.throughput_per_instance.items():
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0):
                raise PlanError(f"model {d.name!r}: throughput for {k} must be a number >= 0, got {v!r}",
                                field=f"models.{d.name}.throughput_per_instance.{k}")
        if d.memory_gb is not None and not d.memory_gb > 0:
            raise PlanError(f"model {d.name!r}: memory_gb must be > 0", field=f"models.{d.name}.memory_gb")
    known = {WHOLE, SHARED}
    for p in pools:
        try:
            known |= set(get_gpu(p.gpu).profile_names)
        except CatalogError:
            pass  # reported below with the pool's field
    for d in demands:
        keys = [(f"throughput_per_instance.{k}", k.rsplit("/", 1)[-1]) for k in d.throughput_per_instance]
        keys += [(f"excluded_profiles.{k}", k) for k in d.excluded_profiles]
        keys += [(f"allowed_profiles.{k}", k) for k in (d.allowed_profiles or ())]
        for fld, k in keys:
            if k not in known:
                raise PlanError(f"model {d.name!r}: {k!r} is not a profile of any pool's GPU (nor 'gpu' or "
                                f"'shared'); known: {', '.join(sorted(known))}", field=f"models.{d.name}.{fld}")
    names = set()
    for p in pools:
        if p.name in names:
            raise PlanError(f"node pool {p.name!r} is listed twice", field=f"pools.{p.name}")
        names.add(p.name)
        try:
            migparted.check_label_value(p.name)
        except Exception:
            raise PlanError(f"pool name {p.name!r} must be a label-safe name (letters, digits, '-', '_', '.')",
                            field=f"pools.{p.name}") from None
        try:
            get_gpu(p.gpu)
        except CatalogError as exc:
            raise PlanError(str(exc), field=f"pools.{p.name}.gpu") from None
        if p.gpus_per_node < 1 or p.nodes < 0:
            raise PlanError(f"pool {p.name!r}: gpus_per_node must be >= 1 and nodes >= 0",
                            field=f"pools.{p.name}")
        if p.sharing not in (None, "time-slicing", "mps"):
            raise PlanError(f"pool {p.name!r}: sharing must be time-slicing or mps, got {p.sharing!r}",
                            field=f"pools.{p.name}.sharing")
        if p.sharing and p.mig_enabled and get_gpu(p.gpu).mig:
            raise PlanError(f"pool {p.name!r}: time-slicing/MPS plans are for GPUs without MIG; set "
                            "mig_enabled: false to share whole GPUs", field=f"pools.{p.name}.sharing")


def pool_mode(pool: PlanPool) -> str:
    gpu = get_gpu(pool.gpu)
    if pool.sharing:
        return pool.sharing
    return "mig" if (pool.mig_enabled and gpu.mig) else "whole"


def throughput_of(d: ModelDemand, gpu: GpuModel, itype: str) -> float | None:
    t = d.throughput_per_instance
    for key in t:
        if "/" in key:
            g, p = key.rsplit("/", 1)
            if p == itype:
                try:
                    if get_gpu(g).name == gpu.name:
                        return float(t[key])
                except CatalogError:
                    raise PlanError(f"model {d.name!r}: unknown GPU in throughput key {key!r}",
                                    field=f"models.{d.name}.throughput_per_instance") from None
    return float(t[itype]) if itype in t else None


@dataclass(frozen=True)
class _IType:
    name: str
    memory_gib: float        # usable, as nvidia-smi reports it (catalog memory_gib)


def need_gib(d: ModelDemand) -> float | None:
    """A demand's memory (`memory_gb`, decimal GB) in GiB, to fit against usable memory."""
    return None if d.memory_gb is None else d.memory_gb * GIB_PER_GB


def _shared_replicas(pool: PlanPool, gpu: GpuModel, demands: Sequence[ModelDemand], mode: str) -> int:
    limit = deviceplugin.mps_max_clients(gpu) if pool.sharing == "mps" else None
    if pool.sharing_replicas is not None:
        r = pool.sharing_replicas
        if r < 2:
            raise PlanError(f"pool {pool.name!r}: sharing_replicas must be >= 2 (the device plugin rejects 1)",
                            field=f"pools.{pool.name}.sharing_replicas")
        if limit and r > limit:
            raise PlanError(f"pool {pool.name!r}: {r} MPS clients exceed the limit of {limit} on {gpu.name} "
                            f"(compute capability {gpu.compute_capability})", field=f"pools.{pool.name}.sharing_replicas")
        return r
    needs = [n for d in demands if (n := need_gib(d)) is not None and n <= gpu.memory_gib / 2]
    if not needs:
        raise PlanError(f"pool {pool.name!r}: set sharing_replicas, or give models a memory_gb of at most half "
                        f"of {gpu.name}'s {gpu.memory_gib:g} GiB usable so replicas per GPU follow from memory",
                        field=f"pools.{pool.name}.sharing_replicas")
    return deviceplugin.replicas_per_gpu(gpu, max(needs), mode)


def _itypes(pool: PlanPool, demands: Sequence[ModelDemand], replicas: int | None) -> list[_IType]:
    gpu = get_gpu(pool.gpu)
    mode = pool_mode(pool)
    if mode == "mig":
        named = {k.rsplit("/", 1)[-1] for d in demands for k in d.throughput_per_instance}
        named |= {p for d in demands for p in (d.allowed_profiles or ())}
        return [_IType(p.name, p.memory_gib) for p in gpu.profiles if p.is_base or p.name in named]
    if mode == "whole":
        return [_IType(WHOLE, gpu.memory_gib)]
    assert replicas is not None, "a shared pool's replicas are set (_shared_replicas)"
    return [_IType(SHARED, gpu.memory_gib / replicas)]


def _weight(d: ModelDemand, gpu: GpuModel, it: _IType) -> float | None:
    """Replicas or throughput one instance of `it` gives model `d`; None if it cannot serve it."""
    if it.name in d.excluded_profiles:
        return None
    if d.allowed_profiles is not None and it.name not in d.allowed_profiles:
        return None
    need = need_gib(d)
    if need is not None and need > it.memory_gib + 1e-9:
        return None
    if d.throughput is None:
        return 1.0
    t = throughput_of(d, gpu, it.name)
    return t if t and t > 0 else None


# --------------------------------------------------------------------------- MILP

# an LP column's name: ("x", pool, layout index) | ("z", pool, itype, model index), and the
# re-plan's ("y", pool, current key index) | ("keep", pool, group index)
Column = tuple[Any, ...]
# a GPU's layout as the model counts it: sorted (instance type, count) pairs
LayoutKey = tuple[tuple[str, int], ...]

@dataclass
class Model:
    pools: list[PlanPool]
    modes: list[str]
    shared_r: list[int | None]
    itypes: list[list[_IType]]
    layouts: list[list[LayoutKey]]                        # per pool: layout keys (itype -> count)
    weights: dict[tuple[int, str, int], float]             # (pool, itype, model) -> weight


def _full_profile(gpu: GpuModel) -> MigProfile:
    """The whole-GPU MIG profile of a MIG GPU (a CatalogError for a catalog entry without one)."""
    full = gpu.full_profile
    if full is None:
        raise CatalogError(f"{gpu.name} has no whole-GPU MIG profile")
    return full


def serving(col: Mapping[Column, int], k: int, itype: str, n_models: int) -> list[tuple[int, float]]:
    """Row entries +1 for each z column of pool `k`'s instance type `itype` (instances used)."""
    return [(col[("z", k, itype, m)], 1.0) for m in range(n_models) if ("z", k, itype, m) in col]


def built_by(col: Mapping[Column, int], kind: str, k: int, keys: Sequence[LayoutKey], itype: str
             ) -> list[tuple[int, float]]:
    """Row entries -n(L, itype) for each layout column (`kind`, k, i) whose layout `keys[i]`
    builds `itype` (instances built); with `serving`, the row "used <= built"."""
    return [(col[(kind, k, i)], -float(n)) for i, key in enumerate(keys) if (n := dict(key).get(itype, 0))]


def build_model(demands: Sequence[ModelDemand], pools: Sequence[PlanPool], layout_rule: str) -> Model:
    modes: list[str] = []
    shared_r: list[int | None] = []
    itypes: list[list[_IType]] = []
    layouts: list[list[tuple[tuple[str, int], ...]]] = []
    weights: dict[tuple[int, str, int], float] = {}
    for k, pool in enumerate(pools):
        gpu = get_gpu(pool.gpu)
        mode = pool_mode(pool)
        r = _shared_replicas(pool, gpu, demands, mode) if mode in ("time-slicing", "mps") else None
        its = _itypes(pool, demands, r)
        if mode == "mig" and layout_rule == "whole":
            full_p = _full_profile(gpu)
            its = [_IType(full_p.name, full_p.memory_gib)]
        for it in its:
            for m, d in enumerate(demands):
                if d.pools is not None and pool.name not in d.pools:
                    continue
                w = _weight(d, gpu, it)
                if w is not None:
                    weights[(k, it.name, m)] = w
        usable = [it.name for it in its if any((k, it.name, m) in weights for m in range(len(demands)))]
        keys: list[tuple[tuple[str, int], ...]]
        if mode == "mig":
            if layout_rule == "optimal":
                keys = [L.key for L in mig.enumerate_layouts(gpu, maximal=True, profiles=usable)] if usable else []
            elif layout_rule == "whole":
                keys = [((_full_profile(gpu).name, 1),)]
            elif layout_rule == "balanced":
                keys = [tuple(sorted(migparted.all_balanced(gpu).items()))]
            elif layout_rule == "all-1g":
                one = max((p for p in gpu.profiles if p.is_base and p.compute_slices == 1), key=lambda p: p.max_instances)
                keys = [((one.name, one.max_instances),)]
            else:
                raise ValueError(layout_rule)
        elif mode == "whole":
            keys = [((WHOLE, 1),)]
        else:
            assert r is not None, "a shared pool's replicas are set above"
            keys = [((SHARED, r),)]
        built = {p for key in keys for p, _ in key}
        if layout_rule != "optimal":  # baselines: only the instance types their layouts build
            if mode == "mig" and layout_rule in ("balanced", "all-1g"):
                # models that fit no instance of the baseline layout get whole GPUs (full profile)
                full = _full_profile(gpu).name
                stuck = [m for m in range(len(demands))
                         if not any((k, p, m) in weights for p in built)]
                if stuck and full not in built:
                    keys = keys + [((full, 1),)]
                    built = built | {full}
                    for key3 in [w for w in weights if w[0] == k and w[1] == full and w[2] not in stuck]:
                        del weights[key3]
            its = [it for it in its if it.name in built]
            for key3 in [w for w in weights if w[0] == k and w[1] not in built]:
                del weights[key3]
        modes.append(mode)
        shared_r.append(r)
        itypes.append(its)
        layouts.append(keys)
    return Model(list(pools), modes, shared_r, itypes, layouts, weights)


def demand_need(d: ModelDemand) -> float:
    """What a demand asks for: replicas, else throughput (check_inputs: exactly one is set)."""
    return float(d.replicas) if d.replicas is not None else float(d.throughput or 0.0)


def pool_costs(pools: Sequence[PlanPool], objective: str, prices: Mapping[str, float] | None) -> list[float]:
    if objective == "gpus":
        return [1.0] * len(pools)
    if objective != "cost":
        raise PlanError(f"objective must be gpus or cost, got {objective!r}", field="objective")
    by_model = {get_gpu(k).name: float(v) for k, v in (prices or {}).items()}
    out = []
    for p in pools:
        price = p.price_per_gpu if p.price_per_gpu is not None else by_model.get(get_gpu(p.gpu).name)
        if price is None or price < 0:
            raise PlanError(f"objective cost needs a price per GPU for pool {p.name!r} ({get_gpu(p.gpu).name}): "
                            "set price_per_gpu or prices", field=f"pools.{p.name}.price_per_gpu")
        out.append(float(price))
    return out


# --------------------------------------------------------------------------- output

# a run-length queue entry: [model name (None = spare), instances left], consumed in place
Run = list[Any]
_K = TypeVar("_K")


def assign_runs(slots: Sequence[tuple[str, int]], queues: dict[str, deque[Run]], count: int
                ) -> Iterator[tuple[tuple[str | None, ...], int]]:
    """Yield (instances-per-GPU models, repeat) for `count` identical GPUs whose instance types
    are `slots` [(itype, start)], consuming the run-length `queues` ({itype: deque([model, n])},
    None = spare). Identical GPUs are handled as counts: one step per change of assignment,
    not one per GPU (a 262,144-GPU fleet takes a few hundred steps)."""
    per: Counter[str] = Counter(it for it, _ in slots)
    while count > 0:
        # how many GPUs in a row can take the queues' head models unchanged
        repeat = count
        for it, n in per.items():
            q = queues[it]
            if q:   # an empty queue leaves spares on every GPU: no limit
                repeat = min(repeat, q[0][1] // n) if q[0][1] >= n else 1
        models: list[str | None] = []
        for it, _ in slots:
            q = queues[it]
            if q:
                models.append(q[0][0])
                q[0][1] -= repeat
                if q[0][1] <= 0:
                    q.popleft()
            else:
                models.append(None)
        yield tuple(models), repeat
        count -= repeat


# GPUs per (layout key, instances with their models): what `assign_gpus` counts
Counted = Counter[tuple[LayoutKey, tuple[Instance, ...]]]


def run_queues(z: Mapping[tuple[int, str, int], int], k: int, demands: Sequence[ModelDemand]
               ) -> dict[str, deque[Run]]:
    """Pool `k`'s run-length queues ({itype: deque([model, instances])}) from a solution's
    instance counts z[(pool, itype, model)], in order: `assign_runs`'s input."""
    queues: dict[str, deque[Run]] = defaultdict(deque)
    for (kk, it, m), v in sorted(z.items()):
        if kk == k and v > 0:
            queues[it].append([demands[m].name, v])
    return queues


def assign_gpus(mode: str, gpu: GpuModel, runs: Iterable[tuple[LayoutKey, int]], queues: dict[str, deque[Run]]
                ) -> tuple[Counted, dict[LayoutKey, mig.GpuLayout]]:
    """GPUs of one pool with their instances and models, from (layout key, GPUs) runs in
    order (`assign_runs` over the queues), and each MIG layout's placement (placed once per
    layout, not per GPU). Plan and re-plan both build their pools' GPU groups with it."""
    counted: Counted = Counter()
    layouts: dict[LayoutKey, mig.GpuLayout] = {}
    for key, cnt in runs:
        if not cnt:
            continue
        if mode == "mig":
            placements = tuple(mig.place(gpu, dict(key)))
            layouts[key] = mig.GpuLayout(gpu.name, placements)
            slots = [(pl.profile, pl.start) for pl in placements]
        else:
            (it, n), = key
            slots = [(it, i) for i in range(n)]
        for models, rep in assign_runs(slots, queues, cnt):
            counted[(key, tuple(Instance(it, st, md) for (it, st), md in zip(slots, models)))] += rep
    return counted, layouts


def gpu_groups(pool: str, counted: Counted, layouts: Mapping[LayoutKey, mig.GpuLayout]) -> tuple[GpuGroup, ...]:
    """The pool's GPU groups, largest first (ties by layout)."""
    return tuple(GpuGroup(pool, layouts.get(key), inst, n)
                 for (key, inst), n in sorted(counted.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def spare_instances(counted: Mapping[tuple[Any, tuple[Instance, ...]], int]) -> Counter[str]:
    """Instances no model uses, by profile, over (layout key, instances) -> GPU counts."""
    spare: Counter[str] = Counter()
    for (_key, inst), n in counted.items():
        for i in inst:
            if i.model is None:
                spare[i.profile] += n
    return spare


def chunk_nodes(keys: Sequence[tuple[_K, int]], per_node: int) -> Counter[tuple[_K | None, ...]]:
    """Nodes of `per_node` GPUs from (layout key, count) runs in order, as a Counter of
    device tuples (the last node padded with None); whole runs become node counts at once."""
    nodes: Counter[tuple[_K | None, ...]] = Counter()
    partial: list[_K] = []
    for key, cnt in keys:
        if partial:
            take = min(cnt, per_node - len(partial))
            partial.extend([key] * take)
            cnt -= take
            if len(partial) == per_node:
                nodes[tuple(partial)] += 1
                partial = []
        if cnt >= per_node:
            nodes[(key,) * per_node] += cnt // per_node
            cnt %= per_node
        if cnt:
            partial = [key] * cnt
    if partial:
        nodes[tuple(partial) + (None,) * (per_node - len(partial))] += 1
    return nodes


def pool_device_plugin_config(mode: str, replicas: int | None, gpu: GpuModel) -> dict[str, Any]:
    """The device-plugin config of a planned pool: the mixed MIG strategy, none (whole
    GPUs), or time-slicing/MPS with `replicas` per GPU (plan and re-plan)."""
    if mode == "mig":
        return deviceplugin.build_device_plugin_config(mig_strategy="mixed")
    if mode == "whole":
        return deviceplugin.build_device_plugin_config(mig_strategy="none")
    return deviceplugin.build_device_plugin_config(sharing=mode, replicas=replicas, gpu=gpu,
                                                   mig_enabled=False)


def plan_warnings(model: Model, demands: Sequence[ModelDemand]) -> list[str]:
    out = []
    for k, pool in enumerate(model.pools):
        gpu = get_gpu(pool.gpu)
        r = model.shared_r[k]
        if model.modes[k] == "time-slicing" and r is not None:   # shared pools have replicas
            out.append(f"pool {pool.name}: {TIME_SLICING_WARNING}; each of the {r} replicas per {gpu.name} must "
                       f"stay within {gpu.memory_gib / r:.1f} GiB (OOM risk)")
        elif model.modes[k] == "mps" and r is not None:
            lim = deviceplugin.mps_client_limits(gpu, r)
            out.append(f"pool {pool.name}: MPS limits each of the {r} clients per {gpu.name} to "
                       f"{lim['memory_limit_mib']} MiB (total / replicas) and {lim['active_thread_percentage']}% of the "
                       f"SMs; at most {deviceplugin.mps_max_clients(gpu)} clients at compute capability "
                       f"{gpu.compute_capability}; no error isolation between clients")
        if model.modes[k] == "mig" and gpu.placement_warning:
            out.append(f"pool {pool.name}: {gpu.placement_warning}")
        if model.modes[k] in ("time-slicing", "mps") and any(d.throughput is not None for d in demands):
            out.append(f"pool {pool.name}: shared-slot throughput comes from your 'shared' entries; slots on one "
                       "GPU compete for it")
    return out
