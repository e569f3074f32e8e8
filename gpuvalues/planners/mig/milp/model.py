"""Optimal MIG planner: fewest GPUs (or lowest cost) that serve a workload mix, provably.

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

Public API (frozen dataclasses; all pure):
- `ModelDemand(name, replicas=None, throughput=None, throughput_per_instance={}, memory_gb=None,
  excluded_profiles=(), allowed_profiles=None, pools=None)`. `throughput_per_instance` keys: a profile
  name (`"1g.10gb"`), `"gpu"` (whole GPU), `"shared"` (one time-slicing/MPS slot), each
  optionally qualified by GPU (`"H100-80GB-SXM/1g.10gb"`; the qualified key wins).
  With `throughput` set, only instance types with a throughput entry are used.
- `NodePool(name, gpu, gpus_per_node=8, nodes=1, mig_enabled=True, sharing=None,
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
  `prices` maps a GPU model (any alias) to a price per GPU; `NodePool.price_per_gpu` wins.
- `certify(lp, solution, claimed=, dual_bound=, lp_bound=)` -> `Certificate` (objective, bound,
  optimal, gap) or None; `run_highs` applies it to every MIP, the plan's and the re-plan's.
- `Plan.to_dict()` (for JSON/YAML), `Plan.mig_parted_config`, `Plan.node_labels`,
  `Plan.device_plugin_configs`, `Plan.baselines`, `Plan.lp_bound`, `Plan.gap`.
- `sharing_plan(demands, gpu, mode, gpus=..., replicas=None)` -> `Plan` for one non-MIG pool.
- `plan_table(plan.to_dict(), pictures)`, `layout_pictures(plan)`: the CLI's table and ASCII pictures.

`Plan.node_labels` maps a node-config name to the labels its nodes need
(`nvidia.com/mig.config` selects the mig-parted config of that name; `nvidia.com/device-plugin.config`
selects `Plan.device_plugin_configs[<pool>]`). `PoolPlan.node_groups` says how many nodes get each.
"""
from __future__ import annotations

import math
import os
import sys
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import highspy
import numpy as np

from gpuvalues.catalog import GIB_PER_GB, GpuModel, get_gpu
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
class NodePool:
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
    layout: mig.Layout | None
    instances: tuple[Instance, ...]
    count: int

    @property
    def label(self) -> str:
        """Short text of the layout (`1x3g.40gb+2x2g.20gb`), or `<n>x<profile>` without MIG."""
        if self.layout is not None:
            return self.layout.label()
        return f"{len(self.instances)}x{self.instances[0].profile}" if self.instances else "idle"


@dataclass(frozen=True)
class NodeGroup:
    """`count` nodes configured alike; `devices[i]` is the mig-devices of GPU i (None = MIG off/idle)."""

    pool: str
    config_name: str
    count: int
    devices: tuple[tuple[tuple[str, int], ...] | None, ...]


@dataclass(frozen=True)
class PoolPlan:
    """One pool's part of a plan: GPU and node groups, spare instances and memory slices."""

    pool: NodePool
    mode: str  # mig | whole | time-slicing | mps
    gpus_used: int
    nodes_used: int
    gpu_groups: tuple[GpuGroup, ...]
    node_groups: tuple[NodeGroup, ...]
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

    def to_dict(self) -> dict:
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

def check_inputs(demands: Sequence[ModelDemand], pools: Sequence[NodePool]) -> None:
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


def _pool_mode(pool: NodePool) -> str:
    gpu = get_gpu(pool.gpu)
    if pool.sharing:
        return pool.sharing
    return "mig" if (pool.mig_enabled and gpu.mig) else "whole"


def _tput(d: ModelDemand, gpu: GpuModel, itype: str) -> float | None:
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


def _need_gib(d: ModelDemand) -> float | None:
    """A demand's memory (`memory_gb`, decimal GB) in GiB, to fit against usable memory."""
    return None if d.memory_gb is None else d.memory_gb * GIB_PER_GB


def _shared_replicas(pool: NodePool, gpu: GpuModel, demands: Sequence[ModelDemand]) -> int:
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
    needs = [_need_gib(d) for d in demands if d.memory_gb is not None and _need_gib(d) <= gpu.memory_gib / 2]
    if not needs:
        raise PlanError(f"pool {pool.name!r}: set sharing_replicas, or give models a memory_gb of at most half "
                        f"of {gpu.name}'s {gpu.memory_gib:g} GiB usable so replicas per GPU follow from memory",
                        field=f"pools.{pool.name}.sharing_replicas")
    return deviceplugin.replicas_per_gpu(gpu, max(needs), pool.sharing)


def _itypes(pool: NodePool, demands: Sequence[ModelDemand], replicas: int | None) -> list[_IType]:
    gpu = get_gpu(pool.gpu)
    mode = _pool_mode(pool)
    if mode == "mig":
        named = {k.rsplit("/", 1)[-1] for d in demands for k in d.throughput_per_instance}
        named |= {p for d in demands for p in (d.allowed_profiles or ())}
        return [_IType(p.name, p.memory_gib) for p in gpu.profiles if p.is_base or p.name in named]
    if mode == "whole":
        return [_IType(WHOLE, gpu.memory_gib)]
    return [_IType(SHARED, gpu.memory_gib / replicas)]


def _weight(d: ModelDemand, gpu: GpuModel, it: _IType) -> float | None:
    """Replicas or throughput one instance of `it` gives model `d`; None if it cannot serve it."""
    if it.name in d.excluded_profiles:
        return None
    if d.allowed_profiles is not None and it.name not in d.allowed_profiles:
        return None
    if d.memory_gb is not None and _need_gib(d) > it.memory_gib + 1e-9:
        return None
    if d.throughput is None:
        return 1.0
    t = _tput(d, gpu, it.name)
    return t if t and t > 0 else None


# --------------------------------------------------------------------------- MILP

@dataclass
class _Model:
    pools: list[NodePool]
    modes: list[str]
    shared_r: list[int | None]
    itypes: list[list[_IType]]
    layouts: list[list[tuple[tuple[str, int], ...]]]       # per pool: layout keys (itype -> count)
    weights: dict[tuple[int, str, int], float]             # (pool, itype, model) -> weight


def build_model(demands: Sequence[ModelDemand], pools: Sequence[NodePool], layout_rule: str) -> _Model:
    modes, shared_r, itypes, layouts = [], [], [], []
    weights: dict[tuple[int, str, int], float] = {}
    for k, pool in enumerate(pools):
        gpu = get_gpu(pool.gpu)
        mode = _pool_mode(pool)
        r = _shared_replicas(pool, gpu, demands) if mode in ("time-slicing", "mps") else None
        its = _itypes(pool, demands, r)
        if mode == "mig" and layout_rule == "whole":
            full = gpu.full_profile
            its = [_IType(full.name, full.memory_gib)]
        for it in its:
            for m, d in enumerate(demands):
                if d.pools is not None and pool.name not in d.pools:
                    continue
                w = _weight(d, gpu, it)
                if w is not None:
                    weights[(k, it.name, m)] = w
        usable = [it.name for it in its if any((k, it.name, m) in weights for m in range(len(demands)))]
        if mode == "mig":
            if layout_rule == "optimal":
                keys = [L.key for L in mig.enumerate_layouts(gpu, maximal=True, profiles=usable)] if usable else []
            elif layout_rule == "whole":
                keys = [((gpu.full_profile.name, 1),)]
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
            keys = [((SHARED, r),)]
        built = {p for key in keys for p, _ in key}
        if layout_rule != "optimal":  # baselines: only the instance types their layouts build
            if mode == "mig" and layout_rule in ("balanced", "all-1g"):
                # models that fit no instance of the baseline layout get whole GPUs (full profile)
                full = gpu.full_profile.name
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
    return _Model(list(pools), modes, shared_r, itypes, layouts, weights)


def demand_need(d: ModelDemand) -> float:
    return float(d.replicas if d.replicas is not None else d.throughput)


def _prices(pools: Sequence[NodePool], objective: str, prices: Mapping[str, float] | None) -> list[float]:
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


_BANNER_SHOWN = False


def run_highs(lp: highspy.HighsLp, *, integer: bool, time_limit: float, rel_gap: float = 0.0,
              abs_gap: float = 0.999, start=None, lp_bound: float | None = None):
    """Solve `lp` with HiGHS, quietly and deterministically (one thread, seed 0), within
    `time_limit`, warm-started from `start` for a MIP: (status, info, solution or None,
    certificate). Shared by the plan and the re-plan models.

    A MIP's answer is not trusted: `certify` checks it against the solution returned (with
    `lp_bound`, the caller's LP relaxation value, as a bound that always holds). highspy 1.16
    warm-started can claim "optimal" with an objective and bound below the solution it
    returns; a warm-started answer that does not check out (within `rel_gap`) is solved
    again cold in the time left, and the better solution and the higher bound are kept.
    The certificate is None for an LP, or when no solution was found."""
    t0 = time.perf_counter()
    status, info, sol = _highs_once(lp, integer=integer, time_limit=time_limit, rel_gap=rel_gap,
                                    abs_gap=abs_gap, start=start)
    if not integer:
        return status, info, sol, None
    cert = certify(lp, sol, claimed=info.objective_function_value, dual_bound=info.mip_dual_bound,
                   lp_bound=lp_bound)
    left = time_limit - (time.perf_counter() - t0)
    if start is not None and not (cert is not None and cert.accepted(rel_gap)) and left > 0:
        st2, info2, sol2 = _highs_once(lp, integer=True, time_limit=left, rel_gap=rel_gap, abs_gap=abs_gap,
                                       start=None)
        cert2 = certify(lp, sol2, claimed=info2.objective_function_value, dual_bound=info2.mip_dual_bound,
                        lp_bound=lp_bound)
        if cert2 is not None and (cert is None or cert2.objective < cert.objective - 1e-9):
            status, info, sol, cert = st2, info2, sol2, cert2.joined(cert)
        elif cert is not None:
            cert = cert.joined(cert2)
    return status, info, sol, cert


def _highs_once(lp: highspy.HighsLp, *, integer: bool, time_limit: float, rel_gap: float, abs_gap: float,
                start):
    h = _new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
    if integer:
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        h.setOptionValue("mip_abs_gap", abs_gap)
    h.passModel(lp)
    if integer and start is not None:
        warm = highspy.HighsSolution()
        warm.col_value = list(map(float, start))
        warm.value_valid = True
        h.setSolution(warm)
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    sol = np.array(h.getSolution().col_value) if info.primal_solution_status == 2 else None
    return status, info, sol


@dataclass(frozen=True)
class Certificate:
    """A MIP answer checked against the solution it came with (`certify`)."""

    objective: float           # recomputed from the solution, rounded to integers
    bound: float               # a lower bound that holds (ceiled when the objective is an integer)
    claimed: float | None      # the objective HiGHS reported
    trusted: bool              # HiGHS's report matched its solution, so its dual bound counts

    @property
    def optimal(self) -> bool:
        """The objective meets a valid bound: a proven minimum."""
        return self.objective <= self.bound + 1e-9

    @property
    def gap(self) -> float:
        """(objective - bound) / objective, 0 when proven."""
        return 0.0 if self.optimal or self.objective == 0 else max(0.0, (self.objective - self.bound) / abs(self.objective))

    def accepted(self, rel_gap: float) -> bool:
        """Proven, or within the relative gap the caller asked for."""
        return self.optimal or (rel_gap > 0 and self.gap <= rel_gap)

    def joined(self, other: "Certificate | None") -> "Certificate":
        """This solution with the higher of both runs' bounds (both bound the same model)."""
        if other is None or other.bound > self.objective + 1e-9:   # a bound above a solution is none
            return self
        return Certificate(self.objective, max(self.bound, other.bound), self.claimed, self.trusted)


def certify(lp: highspy.HighsLp, sol, *, claimed: float | None = None, dual_bound: float | None = None,
            lp_bound: float | None = None) -> Certificate | None:
    """Check a MIP solution of `lp` and what the solver claims about it.

    The solution is rounded to integers and checked against the columns' bounds and every
    row (None if it breaks one: it is no solution); its objective is recomputed from those
    integers. The bound is `lp_bound` (the LP relaxation, always valid) and HiGHS's MIP dual
    bound only when HiGHS's reported objective equals the recomputed one (else its search ran
    on a wrong incumbent and its bound is not evidence); for an integer objective (integer
    costs and offset) its ceiling. A bound above the solution's own objective cannot be valid
    and falls back to `lp_bound`."""
    if sol is None:
        return None
    x = np.round(np.asarray(sol, dtype=float))
    cost = np.asarray(lp.col_cost_, dtype=float)
    tol = 1e-6
    if np.any(x < np.asarray(lp.col_lower_) - tol) or np.any(x > np.asarray(lp.col_upper_) + tol):
        return None
    a = lp.a_matrix_
    starts, index, value = np.asarray(a.start_), np.asarray(a.index_), np.asarray(a.value_)
    n_rows = len(lp.row_lower_)
    rows = np.repeat(np.arange(n_rows), np.diff(starts))
    act = np.bincount(rows, weights=value * x[index], minlength=n_rows) if len(index) else np.zeros(n_rows)
    lo, hi = np.asarray(lp.row_lower_, dtype=float), np.asarray(lp.row_upper_, dtype=float)
    slack = tol * (1.0 + np.abs(act))
    if np.any(act < lo - slack) or np.any(act > hi + slack):
        return None
    obj = float(cost @ x + lp.offset_)
    integral = bool(np.all(cost == np.round(cost))) and float(lp.offset_).is_integer()
    trusted = claimed is not None and abs(float(claimed) - obj) <= 1e-6 * max(1.0, abs(obj))

    def valid(use_dual: bool) -> float:
        bounds = [float(lp_bound)] if lp_bound is not None and math.isfinite(lp_bound) else []
        if use_dual and dual_bound is not None and math.isfinite(dual_bound):
            bounds.append(float(dual_bound))
        b = max(bounds) if bounds else -math.inf
        return float(math.ceil(b - 1e-6)) if integral and math.isfinite(b) else b

    bound = valid(trusted)
    if bound > obj + 1e-9:   # contradicts a solution in hand: not a bound
        trusted, bound = False, valid(False)
    return Certificate(obj, min(bound, obj), None if claimed is None else float(claimed), trusted)


class Rows:
    """The constraint rows of a HiGHS LP, added one at a time (row-wise sparse matrix);
    `lp()` makes the `HighsLp`. Shared by the plan and the re-plan models."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.starts: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []

    def add(self, entries, lo: float, hi: float) -> None:
        """One row `lo <= sum(v * x[j] for j, v in entries) <= hi`."""
        for j, v in entries:
            self.index.append(j)
            self.value.append(v)
        self.starts.append(len(self.index))
        self.lower.append(lo)
        self.upper.append(hi)

    def lp(self, cost, lower, upper, *, integer: bool, offset: float = 0.0) -> highspy.HighsLp:
        """The LP (or MIP with `integer`) over these rows and columns."""
        n = len(cost)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, len(self.lower)
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, lower, upper
        lp.offset_ = offset
        lp.row_lower_ = np.array(self.lower, dtype=float)
        lp.row_upper_ = np.array(self.upper, dtype=float)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(self.starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(self.index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(self.value, dtype=float)
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, len(self.lower)
        if integer:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * n
        return lp


def _new_highs() -> highspy.Highs:
    """A Highs instance; the first one prints a banner on fd 1 (C level), which would corrupt
    `--output json`, so that one is built with fd 1 pointed at /dev/null."""
    global _BANNER_SHOWN
    if _BANNER_SHOWN:
        return highspy.Highs()
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    _BANNER_SHOWN = True
    return h


def _solve(model: _Model, demands: Sequence[ModelDemand], costs: list[float], *, integer: bool,
           capacity: bool = True, time_limit: float = 30.0, abs_gap: float = 1e-6, rel_gap: float = 0.0,
           start: np.ndarray | None = None, relax: frozenset[int] = frozenset(),
           residual: tuple | None = None, lp_bound: float | None = None):
    """Solve the configuration ILP (or its LP relaxation): (status, info, solution, columns,
    certificate; see `run_highs`). `start`: a feasible solution HiGHS starts from (the rounded
    LP); `relax`: pools whose capacity row is dropped (diagnosis); `residual`: (spare instances
    {(pool, itype): n}, need per model, GPUs left per pool) to solve what is left after a fixed
    part of the plan (LP rounding); `lp_bound`: the LP relaxation's value, for the certificate."""
    spare_built, needs, caps = residual if residual is not None else ({}, None, None)
    cols: list[tuple] = []  # ("x", k, layout_index) | ("z", k, itype, m)
    for k, keys in enumerate(model.layouts):
        for li in range(len(keys)):
            cols.append(("x", k, li))
    for (k, it, m) in sorted(model.weights):
        cols.append(("z", k, it, m))
    col_index = {c: i for i, c in enumerate(cols)}
    n = len(cols)
    cost = np.zeros(n)
    for i, c in enumerate(cols):
        if c[0] == "x":
            cost[i] = costs[c[1]]
    rows = Rows()
    add_row = rows.add
    inf = highspy.kHighsInf
    for k, keys in enumerate(model.layouts):
        if capacity and k not in relax:
            add_row([(col_index[("x", k, li)], 1.0) for li in range(len(keys))], -inf,
                    float(model.pools[k].capacity if caps is None else caps[k]))
        for it in model.itypes[k]:
            z = [(col_index[("z", k, it.name, m)], 1.0) for m in range(len(demands)) if ("z", k, it.name, m) in col_index]
            if not z:
                continue
            x = [(col_index[("x", k, li)], -float(dict(key).get(it.name, 0))) for li, key in enumerate(keys)
                 if dict(key).get(it.name, 0)]
            add_row(z + x, -inf, float(spare_built.get((k, it.name), 0.0)))
    for m, d in enumerate(demands):
        entries = [(col_index[("z", k, it, mm)], w) for (k, it, mm), w in model.weights.items() if mm == m]
        add_row(entries, demand_need(d) if needs is None else needs[m], inf)
    lp = rows.lp(cost, np.zeros(n), np.full(n, inf), integer=integer)
    status, info, sol, cert = run_highs(lp, integer=integer, time_limit=time_limit, rel_gap=rel_gap,
                                        abs_gap=abs_gap, start=start, lp_bound=lp_bound)
    return status, info, sol, cols, cert


def _lp_bound(model, demands, costs, capacity=True):
    status, info, sol, _, _ = _solve(model, demands, costs, integer=False, capacity=capacity)
    if status != highspy.HighsModelStatus.kOptimal:
        return None
    return float(info.objective_function_value)


def diagnose_infeasible(model: _Model, demands: Sequence[ModelDemand], costs: list[float]) -> PlanError:
    for m, d in enumerate(demands):
        if demand_need(d) > 0 and not any(mm == m for (_, _, mm) in model.weights):
            sizes = []
            for k, pool in enumerate(model.pools):
                its = model.itypes[k]
                big = max(its, key=lambda it: it.memory_gib)
                sizes.append(f"{pool.name}: largest {big.name} {big.memory_gib:g} GiB usable")
            why = f"needs {d.memory_gb:g} GB ({_need_gib(d):.2f} GiB)" if d.memory_gb else "has no usable instance type"
            if d.throughput is not None:
                why += " or lacks a throughput entry for the instance types that fit"
            return PlanError(f"model {d.name!r} {why}; no instance in any pool can serve it ({'; '.join(sizes)}). "
                             "Add a pool with bigger GPUs, allow more profiles, or lower its memory need",
                             field=f"models.{d.name}")
    return _capacity_diagnosis(model, demands)


def _pool_usage(model: _Model, sol: np.ndarray, cols: list) -> list[float]:
    use = [0.0] * len(model.pools)
    for v, c in zip(sol, cols):
        if c[0] == "x":
            use[c[1]] += float(v)
    return use


def _capacity_diagnosis(model: _Model, demands: Sequence[ModelDemand]) -> PlanError:
    """Why no plan fits, computed per pool with the binding constraint named:

    1. a pool's capacity: with every other pool at its capacity, the LP still needs more of this
       pool's GPUs than it holds (typically models pinned to it);
    2. the inventory as a whole: the LP without capacities needs more GPUs than all pools hold;
    3. integrality: the LP fits, but whole instances per GPU do not.
    Each message states numbers that agree with its claim (never "need 28, hold 28")."""
    pools, n = model.pools, len(model.pools)
    status, _, sol, cols, _ = _solve(model, demands, [1.0] * n, integer=False)
    if status != highspy.HighsModelStatus.kOptimal:
        need = _lp_bound(model, demands, [1.0] * n, capacity=False)
        have = sum(p.capacity for p in pools)
        if need is not None and math.ceil(need - 1e-6) > have:
            return PlanError(f"the inventory is too small: the models need at least {math.ceil(need - 1e-6)} GPUs "
                             f"(LP bound) but the pools hold {have} ({', '.join(f'{p.name}: {p.capacity}' for p in pools)}). "
                             "Binding constraint: total capacity. Add nodes or lower replicas/throughput", field="pools")
        short = []
        for k in range(n):
            # fewest GPUs of pool k with the others full: > its capacity means k's capacity binds
            only_k = [1.0 if j == k else 0.0 for j in range(n)]
            st, info, _, _, _ = _solve(model, demands, only_k, integer=False, relax=frozenset({k}))
            if st == highspy.HighsModelStatus.kOptimal:
                short.append((k, math.ceil(float(info.objective_function_value) - 1e-6)))
        if short:
            parts = []
            for k, need_k in short:
                pinned = [d.name for d in demands if d.pools is not None and pools[k].name in d.pools]
                parts.append(f"pool {pools[k].name!r} ({get_gpu(pools[k].gpu).name}) needs at least {need_k} of its "
                             f"GPUs (LP bound, the other pools full) but holds {pools[k].capacity}"
                             + (f" (models that may only run there: {', '.join(pinned)})" if pinned else ""))
            names = ", ".join(pools[k].name for k, _ in short)
            return PlanError("a pool is too small: " + "; or ".join(parts) + f". Binding constraint: capacity of "
                             f"pool {names}. Add nodes there, let the models use other pools, or lower "
                             "replicas/throughput", field=f"pools.{pools[short[0][0]].name}")
        return PlanError("no plan satisfies the workload mix on this inventory: no single pool's capacity "
                         "explains it; check the models' pools and profiles", field="pools")
    use = _pool_usage(model, sol, cols)
    k = max(range(n), key=lambda j: use[j] / max(pools[j].capacity, 1))
    return PlanError(f"no plan fits although the LP relaxation does ({sum(use):.1f} of "
                     f"{sum(p.capacity for p in pools)} GPUs): binding constraint: whole MIG instances per GPU "
                     f"(integrality: one instance serves one model), tightest in pool {pools[k].name!r} "
                     f"(LP uses {use[k]:.1f} of its {pools[k].capacity}). Add nodes or lower replicas/throughput",
                     field=f"pools.{pools[k].name}")


def _values(sol, cols):
    x: dict[tuple[int, int], int] = {}
    z: dict[tuple[int, str, int], int] = {}
    for i, c in enumerate(cols):
        v = int(round(sol[i]))
        if v <= 0:
            continue
        if c[0] == "x":
            x[(c[1], c[2])] = v
        else:
            z[(c[1], c[2], c[3])] = v
    return x, z


def trim_solution(z: dict, model: _Model, demands: Sequence[ModelDemand]) -> dict:
    """Drop assignments beyond what each model needs (they become spare instances)."""
    z = dict(z)
    for m, d in enumerate(demands):
        need = demand_need(d)
        items = sorted(((key, model.weights[key]) for key in z if key[2] == m), key=lambda kv: kv[1])
        total = sum(z[key] * w for key, w in items)
        for key, w in items:  # smallest contributions first
            while z.get(key, 0) > 0 and total - w >= need - 1e-9:
                z[key] -= 1
                total -= w
            if z.get(key) == 0:
                del z[key]
    return z


def _round_lp(model: _Model, demands: Sequence[ModelDemand], lp_sol: np.ndarray, cols: list,
              capacity: bool = True) -> np.ndarray | None:
    """A feasible integer solution from the LP optimum ("LP rounding"): floor the LP, cover each
    model's residual need with its best-weighted instance type, then add GPUs of the layout that
    builds the most missing instances until every instance used is built. None if that breaks a
    pool's capacity. Work is per layout and model, never per GPU."""
    col_index = {c: i for i, c in enumerate(cols)}
    val = np.floor(np.maximum(lp_sol, 0.0) + 1e-9)
    for m, d in enumerate(demands):
        short = demand_need(d) - sum(w * val[col_index[("z",) + key]] for key, w in model.weights.items() if key[2] == m)
        if short <= 1e-9:
            continue
        # prefer the type the LP used most for this model, then the heaviest weight
        opts = [(lp_sol[col_index[("z",) + key]], w, key) for key, w in model.weights.items() if key[2] == m and w > 0]
        if not opts:
            return None
        _, w, key = max(opts, key=lambda o: (o[0] > 1e-9, o[1]))
        val[col_index[("z",) + key]] += math.ceil(short / w - 1e-9)
    for k, keys in enumerate(model.layouts):
        counts = [dict(key) for key in keys]
        deficit = Counter()
        for (kk, it, m) in model.weights:
            if kk == k:
                deficit[it] += val[col_index[("z", k, it, m)]]
        for li, c in enumerate(counts):
            for it, n in c.items():
                deficit[it] -= n * val[col_index[("x", k, li)]]
        while any(v > 1e-9 for v in deficit.values()):
            gain = [(sum(min(n, max(deficit[it], 0)) for it, n in c.items()), li) for li, c in enumerate(counts)]
            best, li = max(gain)
            if best <= 0:
                return None
            # a batch of this layout: as many GPUs as its scarcest useful type still needs
            batch = max(1, min(math.floor(deficit[it] / n) for it, n in counts[li].items() if deficit[it] >= n)
                        if any(deficit[it] >= n for it, n in counts[li].items()) else 1)
            val[col_index[("x", k, li)]] += batch
            for it, n in counts[li].items():
                deficit[it] -= n * batch
        used = sum(val[col_index[("x", k, li)]] for li in range(len(keys)))
        if capacity and used > model.pools[k].capacity:
            return None
    return val


def _round_residual(model: _Model, demands: Sequence[ModelDemand], costs: list[float], lp_sol: np.ndarray,
                    cols: list, capacity: bool, time_limit: float) -> np.ndarray | None:
    """LP rounding with an exact remainder: keep the floor of the LP's GPUs and assignments, then
    solve what is left (a few dozen GPUs whatever the fleet size, so small numbers HiGHS solves
    fast) exactly within `time_limit`. None if that fails."""
    col_index = {c: i for i, c in enumerate(cols)}
    val = np.floor(np.maximum(lp_sol, 0.0) + 1e-9)
    spare: dict[tuple[int, str], float] = {}
    for k, keys in enumerate(model.layouts):
        for it in model.itypes[k]:
            built = sum(n * val[col_index[("x", k, li)]] for li, key in enumerate(keys)
                        for name, n in key if name == it.name)
            zs = sorted((col_index[("z", k, it.name, m)] for m in range(len(demands))
                         if ("z", k, it.name, m) in col_index), key=lambda j: -val[j])
            used = sum(val[j] for j in zs)
            for j in zs:   # more assigned than the floored GPUs build: give the excess back
                cut = min(val[j], max(used - built, 0))
                val[j] -= cut
                used -= cut
            spare[(k, it.name)] = built - used
    needs = []
    for m, d in enumerate(demands):
        got = sum(w * val[col_index[("z",) + key]] for key, w in model.weights.items() if key[2] == m)
        needs.append(max(0.0, demand_need(d) - got))
    caps = [model.pools[k].capacity - sum(val[col_index[("x", k, li)]] for li in range(len(keys)))
            for k, keys in enumerate(model.layouts)]
    if capacity and min(caps) < 0:
        return None
    integral = all(float(c).is_integer() for c in costs)
    _, _, sol, _, cert = _solve(model, demands, costs, integer=True, capacity=capacity, time_limit=time_limit,
                                abs_gap=0.999 if integral else 1e-6, residual=(spare, needs, caps))
    if cert is None:   # no solution, or one that breaks a row
        return None
    return val + np.round(sol)


def solve_model(demands, pools, costs, layout_rule, time_limit, with_bounds=True, capacity=True, rel_gap=0.0,
         solver_layouts=True):
    """Solve one model: LP, LP rounding as a warm start, then the MIP within `time_limit`; the
    result is the better of the MIP's incumbent and the rounding (never worse than rounding).
    Returns (model, None) when infeasible, else (model, (status, info, sol, cols, secs, lp, extra))
    where extra has the objective, MIP bound and the rounding's objective."""
    model = build_model(demands, pools, layout_rule)
    for m, d in enumerate(demands):
        if demand_need(d) > 0 and not any(mm == m for (_, _, mm) in model.weights):
            return model, None
    integral = all(float(c).is_integer() for c in costs)
    t0 = time.perf_counter()
    # the LP relaxation runs to the end whatever the limit (milliseconds even at 262,144 GPUs):
    # the rounding, the plan's floor, needs it
    lp_status, lp_info, lp_sol, cols, _ = _solve(model, demands, costs, integer=False, capacity=capacity,
                                                 time_limit=max(time_limit, 30.0))
    if lp_status == highspy.HighsModelStatus.kModelEmpty:   # no column: every need is 0, nothing to place
        status = highspy.HighsModelStatus.kOptimal
        extra = {"objective": 0.0, "bound": 0.0, "rounded": 0.0, "optimal": True, "rejected": None}
        return model, (status, None, np.zeros(0), cols, time.perf_counter() - t0, 0.0 if with_bounds else None,
                       extra)
    if lp_status != highspy.HighsModelStatus.kOptimal or lp_sol is None:
        return model, None
    lp = float(lp_info.objective_function_value)
    cost_vec = np.array([costs[c[1]] if c[0] == "x" else 0.0 for c in cols])
    rounded = _round_lp(model, demands, lp_sol, cols, capacity)
    r_obj = float(cost_vec @ rounded) if rounded is not None else math.inf
    lp_ceil = math.ceil(lp - 1e-6) if integral else lp
    if r_obj > lp_ceil + 1e-9:   # not yet optimal: try the exact remainder on a slice of the time
        better = _round_residual(model, demands, costs, lp_sol, cols, capacity,
                                 min(1.0, time_limit / 4))
        if better is not None and float(cost_vec @ better) < r_obj:
            rounded, r_obj = better, float(cost_vec @ better)
    left = time_limit - (time.perf_counter() - t0)
    status, info, sol, cert = highspy.HighsModelStatus.kTimeLimit, None, None, None
    lp_cert = lp_ceil if integral else lp     # the LP relaxation's bound (ceiled for integer costs)
    # A rounding that already meets the LP bound is optimal: the MIP then runs without it, so
    # the plan keeps the solver's layouts rather than the LP vertex's (the rounding stays the
    # fallback); otherwise it is the MIP's warm start.
    proven = rounded is not None and lp_ceil >= r_obj - 1e-9
    if proven and not solver_layouts:   # the caller only needs an optimal solution: done
        status, info, sol = highspy.HighsModelStatus.kOptimal, None, rounded
        extra = {"objective": r_obj, "bound": r_obj, "rounded": r_obj, "optimal": True, "rejected": None}
        return model, (status, info, sol, cols, time.perf_counter() - t0, lp if with_bounds else None, extra)
    if left > 0:
        status, info, sol, cols, cert = _solve(model, demands, costs, integer=True, time_limit=left,
                                               abs_gap=0.999 if integral else 1e-6, rel_gap=rel_gap,
                                               start=None if proven else rounded, capacity=capacity, lp_bound=lp)
    secs = time.perf_counter() - t0
    if cert is None and rounded is None:
        if status == highspy.HighsModelStatus.kTimeLimit:   # not proven infeasible: out of time
            raise PlanError(f"no plan found within the time limit ({time_limit:g} s): raise it", field="time_limit")
        if status == highspy.HighsModelStatus.kOptimal:     # a claimed solution that breaks a row
            raise PlanError("the solver's only solution breaks the model's constraints; nothing is proven "
                            "(raise the time limit)", field="time_limit")
        return model, None
    # the objective and bound are what certify recomputed, never the solver's report
    obj, bound = (cert.objective, cert.bound) if cert is not None else (math.inf, lp_cert)
    if r_obj < obj - 1e-9:   # the rounding beats the MIP's incumbent (time limit hit early)
        sol, obj, status = rounded, r_obj, highspy.HighsModelStatus.kTimeLimit
    bound = min(max(bound, lp_cert), obj)
    # HiGHS said optimal but its answer did not check out (even solved again cold)
    rejected = (float(info.objective_function_value) if info is not None and cert is not None and not cert.trusted
                and status == highspy.HighsModelStatus.kOptimal else None)
    extra = {"objective": obj, "bound": bound, "rounded": r_obj, "optimal": obj <= bound + 1e-9,
             "rejected": rejected}
    return model, (status, info, sol, cols, secs, lp if with_bounds else None, extra)


# --------------------------------------------------------------------------- output

def assign_runs(slots: Sequence[tuple[str, int]], queues: dict[str, deque], count: int):
    """Yield (instances-per-GPU models, repeat) for `count` identical GPUs whose instance types
    are `slots` [(itype, start)], consuming the run-length `queues` ({itype: deque([model, n])},
    None = spare). Identical GPUs are handled as counts: one step per change of assignment,
    not one per GPU (a 262,144-GPU fleet takes a few hundred steps)."""
    per: Counter = Counter(it for it, _ in slots)
    while count > 0:
        # how many GPUs in a row can take the queues' head models unchanged
        repeat = count
        for it, n in per.items():
            q = queues[it]
            if q:   # an empty queue leaves spares on every GPU: no limit
                repeat = min(repeat, q[0][1] // n) if q[0][1] >= n else 1
        models = []
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


def spare_instances(counted: Mapping[tuple[Any, tuple[Instance, ...]], int]) -> Counter[str]:
    """Instances no model uses, by profile, over (layout key, instances) -> GPU counts."""
    spare: Counter[str] = Counter()
    for (_key, inst), n in counted.items():
        for i in inst:
            if i.model is None:
                spare[i.profile] += n
    return spare


def chunk_nodes(keys: Sequence[tuple[Any, int]], per_node: int) -> Counter:
    """Nodes of `per_node` GPUs from (layout key, count) runs in order, as a Counter of
    device tuples (the last node padded with None); whole runs become node counts at once."""
    nodes: Counter = Counter()
    partial: list = []
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


def _pool_plans(model: _Model, demands, x, z) -> tuple[list[PoolPlan], dict, dict, dict]:
    pool_plans = []
    node_configs: dict[str, list] = {}
    labels: dict[str, dict[str, str]] = {}
    dp_configs: dict[str, dict] = {}
    pool_names = {p.name for p in model.pools}
    for k, pool in enumerate(model.pools):
        gpu = get_gpu(pool.gpu)
        mode = model.modes[k]
        keys = model.layouts[k]
        # run-length queue of models per instance type in this pool
        queues: dict[str, deque] = defaultdict(deque)
        for (kk, it, m), v in sorted(z.items()):
            if kk == k and v > 0:
                queues[it].append([demands[m].name, v])
        counted: Counter = Counter()   # (layout key, instances) -> GPUs
        used_keys: list[tuple[Any, int]] = []
        layouts: dict[Any, mig.Layout] = {}
        for li, key in enumerate(keys):
            cnt = x.get((k, li), 0)
            if not cnt:
                continue
            used_keys.append((key, cnt))
            if mode == "mig":
                placements = tuple(mig.place(gpu, dict(key)))   # once per layout, not per GPU
                layouts[key] = mig.Layout(gpu.name, placements)
                slots = [(pl.profile, pl.start) for pl in placements]
            else:
                (it, n), = key
                slots = [(it, i) for i in range(n)]
            for models, rep in assign_runs(slots, queues, cnt):
                inst = tuple(Instance(it, st, mdl) for (it, st), mdl in zip(slots, models))
                counted[(key, inst)] += rep
        groups = tuple(GpuGroup(pool.name, layouts.get(key) if mode == "mig" else None, inst, n)
                       for (key, inst), n in sorted(counted.items(), key=lambda kv: (-kv[1], str(kv[0]))))
        n_gpus = sum(counted.values())
        spare = spare_instances(counted)
        unused = 0
        if mode == "mig":
            unused = sum((gpu.mig.memory_slices - sum(gpu.profile(p).memory_slices * c for p, c in key)) * cnt
                         for key, cnt in used_keys)
        # nodes: GPUs sorted by layout, chunked; identical nodes share a config
        node_count = chunk_nodes(sorted(used_keys, key=lambda kc: str(kc[0])), pool.gpus_per_node)
        n_nodes = sum(node_count.values())
        ngroups = []
        for idx, (devs, cnt) in enumerate(sorted(node_count.items(), key=lambda kv: (-kv[1], str(kv[0])))):
            name = f"{pool.name}-{idx + 1}" if len(node_count) > 1 else pool.name
            name = name[:63].rstrip("-_.")
            while name in labels or (name != pool.name and name in pool_names):  # keep config names unique
                name = f"{name[:58]}-x{idx + 1}"
            ngroups.append(NodeGroup(pool.name, name, cnt, devs))
            if mode == "mig":
                node_configs[name] = [dict(d) if d is not None else {} for d in devs]
                labels[name] = {**migparted.node_labels(name), deviceplugin.CONFIG_LABEL: pool.name}
            elif gpu.mig is not None:
                # a MIG-capable GPU used whole or shared: make sure MIG is off on these nodes
                node_configs[name] = [None] * pool.gpus_per_node
                labels[name] = {**migparted.node_labels(name), deviceplugin.CONFIG_LABEL: pool.name}
            else:
                labels[name] = {deviceplugin.CONFIG_LABEL: pool.name}
        dp_configs[pool.name] = pool_device_plugin_config(mode, model.shared_r[k], gpu)
        pool_plans.append(PoolPlan(pool, mode, n_gpus, n_nodes, groups, tuple(ngroups), dict(spare), unused,
                                   model.shared_r[k]))
    return pool_plans, node_configs, labels, dp_configs


def pool_device_plugin_config(mode: str, replicas: int | None, gpu: GpuModel) -> dict:
    """The device-plugin config of a planned pool: the mixed MIG strategy, none (whole
    GPUs), or time-slicing/MPS with `replicas` per GPU (plan and re-plan)."""
    if mode == "mig":
        return deviceplugin.build_device_plugin_config(mig_strategy="mixed")
    if mode == "whole":
        return deviceplugin.build_device_plugin_config(mig_strategy="none")
    return deviceplugin.build_device_plugin_config(sharing=mode, replicas=replicas, gpu=gpu,
                                                   mig_enabled=False)


def plan_warnings(model: _Model, demands) -> list[str]:
    out = []
    for k, pool in enumerate(model.pools):
        gpu = get_gpu(pool.gpu)
        r = model.shared_r[k]
        if model.modes[k] == "time-slicing":
            out.append(f"pool {pool.name}: {TIME_SLICING_WARNING}; each of the {r} replicas per {gpu.name} must "
                       f"stay within {gpu.memory_gib / r:.1f} GiB (OOM risk)")
        elif model.modes[k] == "mps":
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


def plan(demands: Sequence[ModelDemand], pools: Sequence[NodePool], *, objective: str = "gpus",
         prices: Mapping[str, float] | None = None, baselines: bool = True, time_limit: float = 30.0,
         gap_tolerance: float = 0.0) -> Plan:
    """The optimal plan: per-pool GPU layouts, model -> instance assignment, configs, bounds, baselines.

    `time_limit` (seconds) is shared by the solver and the baselines: the baselines get what the
    solver leaves, and are reported as not computed when nothing is left. `gap_tolerance` stops
    the solver once the plan is within that relative gap of the bound (0.001 = 0.1%). The plan
    is never worse than rounding the LP solution (warm start and fallback)."""
    demands, pools = list(demands), list(pools)
    check_inputs(demands, pools)
    if not time_limit > 0:  # HiGHS would ignore a negative limit (or NaN) and run unbounded
        raise PlanError(f"time limit must be > 0 seconds, got {time_limit!r}", field="time_limit")
    if not 0 <= gap_tolerance < 1:
        raise PlanError(f"gap tolerance must be in [0, 1), got {gap_tolerance!r}", field="gap_tolerance")
    costs = _prices(pools, objective, prices)
    deadline = time.perf_counter() + time_limit
    model, res = solve_model(demands, pools, costs, "optimal", time_limit, rel_gap=gap_tolerance)
    if res is None:
        raise diagnose_infeasible(model, demands, costs)
    status, info, sol, cols, secs, lp, extra = res
    x, z = _values(sol, cols)
    z = trim_solution(z, model, demands)
    # certified (`certify`): the objective recomputed from the solution, a bound that holds
    obj, bound, optimal = extra["objective"], extra["bound"], extra["optimal"]
    gap = 0.0 if optimal or obj == 0 else max(0.0, (obj - bound) / abs(obj))
    pool_plans, node_configs, labels, dp_configs = _pool_plans(model, demands, x, z)
    served = {}
    for m, d in enumerate(demands):
        served[d.name] = float(sum(v * model.weights[(k, it, mm)] for (k, it, mm), v in z.items() if mm == m))
    mp_cfg = migparted.build_mig_parted_config(node_configs) if node_configs else None
    warnings = plan_warnings(model, demands)
    if not optimal and extra["rejected"] is not None:
        warnings.append(f"the solver claimed an optimum of {extra['rejected']:g} that its own solution does not "
                        f"meet, also when solved again without a warm start: the plan is valid (objective "
                        f"{obj:g}) but not proven optimal; gap {gap:.2%} to the bound {bound:g}")
    elif not optimal and gap_tolerance == 0:
        warnings.append(f"solver stopped at the time limit ({time_limit:g} s): gap {gap:.2%}; the plan is valid "
                        "but may not be optimal")
    base = tuple(_baselines(demands, pools, costs, deadline)) if baselines else ()
    return Plan(objective=objective, pools=tuple(pool_plans),
                gpus_used=sum(p.gpus_used for p in pool_plans),
                cost=float(sum(costs[k] * p.gpus_used for k, p in enumerate(pool_plans))),
                lp_bound=float(lp) if lp is not None else float("nan"), mip_bound=bound, gap=gap, optimal=optimal,
                solve_seconds=secs, served=served, baselines=base, warnings=tuple(warnings),
                mig_parted_config=mp_cfg, node_labels=labels, device_plugin_configs=dp_configs)


BASELINES = (("whole-gpu", "whole", "one whole GPU per replica (MIG off): the seed's waste case"),
             ("all-balanced", "balanced", "MIG GPUs in mig-parted's all-balanced (2x1g+1x2g+1x3g); models that "
                                          "fit no such instance get whole GPUs"),
             ("all-1g", "all-1g", "MIG GPUs split into 1g instances (7 on 7-slice GPUs); models that fit no 1g "
                                  "instance get whole GPUs"))


def _baselines(demands, pools, costs, deadline: float | None = None) -> list[Baseline]:
    """Each baseline solved exactly too; if the inventory is too small for it, solved again
    without pool capacities so it still reports how many GPUs it would take. All share what is
    left of the plan's time limit (`deadline`, perf_counter seconds)."""
    out = []
    # a baseline is another layout strategy: the fleet's pinned profiles do not bind it, but the
    # memory they hold does (the plan's memory rule: the fleet pins the smallest profile that
    # holds the need with its headroom, so no smaller instance may serve it in a baseline either)
    demands = [ModelDemand(d.name, d.replicas, d.throughput, d.throughput_per_instance, _pinned_memory_gb(d, pools),
                           d.excluded_profiles, None, d.pools) for d in demands]
    for name, rule, note in BASELINES:
        left = 30.0 if deadline is None else deadline - time.perf_counter()
        if left <= 0:
            out.append(Baseline(name, None, None, f"{note}; not computed: the time limit was used up"))
            continue
        try:
            dem, bpools = demands, pools
            if rule == "whole":
                # the whole GPU without MIG: a demand's "gpu" entry, else its full-profile entry
                dem = [_whole_demand(d, pools) for d in demands]
                bpools = [NodePool(p.name, p.gpu, p.gpus_per_node, p.nodes, False, p.sharing, p.sharing_replicas,
                                   p.price_per_gpu) if not p.sharing else p for p in pools]
            model, res = solve_model(dem, bpools, costs, "optimal" if rule == "whole" else rule, left, with_bounds=False)
            if res is None:
                left = 30.0 if deadline is None else deadline - time.perf_counter()
                model, res = solve_model(dem, bpools, costs, "optimal" if rule == "whole" else rule, max(left, 1e-3),
                                  with_bounds=False, capacity=False)
                if res is not None:
                    note += f"; more than the inventory's {sum(p.capacity for p in pools)} GPUs"
        except PlanError as exc:
            out.append(Baseline(name, None, None, f"{note}; not possible: {exc}"))
            continue
        if res is None:
            why = diagnose_infeasible(model, dem if rule == "whole" else demands, costs).message
            out.append(Baseline(name, None, None, f"{note}; not possible: {why}"))
            continue
        status, info, sol, cols, secs, _, extra = res
        x, _ = _values(sol, cols)
        gpus = sum(x.values())
        if not extra["optimal"]:
            note += ("; not proven minimal: the solver's claim did not check out (best found)"
                     if extra["rejected"] is not None else "; stopped at the time limit (best found)")
        cost = sum(costs[k] * v for (k, _), v in x.items())
        out.append(Baseline(name, gpus, float(cost), note))
    return out


def _pinned_memory_gb(d: ModelDemand, pools: Sequence[NodePool]) -> float | None:
    """A demand's memory need as the plan applies it: its own `memory_gb`, raised to the usable
    memory of the smallest profile it is pinned to (`allowed_profiles`) on the pools it may use."""
    if d.allowed_profiles is None:
        return d.memory_gb
    held = []
    for p in pools:
        if d.pools is not None and p.name not in d.pools:
            continue
        gpu = get_gpu(p.gpu)
        for name in d.allowed_profiles:
            if gpu.mig is not None and name in gpu.profile_names:
                held.append(gpu.profile(name).memory_gib)
    if not held:
        return d.memory_gb
    return max(d.memory_gb or 0.0, min(held) / GIB_PER_GB)


def _whole_demand(d: ModelDemand, pools: Sequence[NodePool]) -> ModelDemand:
    if d.throughput is None:
        return d
    tpi = dict(d.throughput_per_instance)   # the demand keeps its pools: a baseline moves no model
    for p in pools:
        gpu = get_gpu(p.gpu)
        full = gpu.full_profile
        if full is None:
            continue
        own = _tput(d, gpu, WHOLE)
        if own is None:
            t = _tput(d, gpu, full.name)
            if t is not None:
                tpi[f"{gpu.name}/{WHOLE}"] = t
    return ModelDemand(d.name, d.replicas, d.throughput, tpi, d.memory_gb,
                       tuple(x for x in d.excluded_profiles if x != WHOLE), None, d.pools)


def sharing_plan(demands: Sequence[ModelDemand], gpu: str, mode: str, *, gpus: int, gpus_per_node: int = 8,
                 replicas: int | None = None, price_per_gpu: float | None = None) -> Plan:
    """Plan time-slicing or MPS on a GPU model without MIG (or with MIG off): one pool of `gpus` GPUs.

    Replicas per GPU come from `replicas`, or from memory: floor(GPU memory / largest model
    memory need), capped at the MPS client limit. The plan carries the seed's warnings.
    `gpus` is rounded up to whole nodes of `gpus_per_node`.
    """
    if mode not in ("time-slicing", "mps"):
        raise PlanError(f"mode must be time-slicing or mps, got {mode!r}", field="mode")
    if gpus < 1:
        raise PlanError("gpus must be >= 1", field="gpus")
    pool = NodePool(name=f"{get_gpu(gpu).name.lower()}-{mode}", gpu=gpu, gpus_per_node=min(gpus_per_node, gpus),
                    nodes=math.ceil(gpus / min(gpus_per_node, gpus)), mig_enabled=False, sharing=mode,
                    sharing_replicas=replicas, price_per_gpu=price_per_gpu)
    return plan(demands, [pool])
