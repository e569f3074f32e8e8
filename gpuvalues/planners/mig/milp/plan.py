"""The planner's entry points: `plan` (the optimal MIG plan of a workload mix, with baselines)
and `sharing_plan` (one non-MIG pool); they turn a solved model into a `Plan`."""
from __future__ import annotations

import math
import time
from typing import Any, Mapping, Sequence


from gpuvalues.catalog import GIB_PER_GB, get_gpu
from gpuvalues.errors import MigLayoutError, PlanError
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import migparted
from gpuvalues.planners.mig.milp.diagnose import diagnose_infeasible
from gpuvalues.planners.mig.milp.model import (assign_gpus, Baseline, check_inputs, chunk_nodes, gpu_groups,
                                               LayoutKey, Model, ModelDemand, NodeConfigGroup, Plan,
                                               plan_warnings, PlanPool, pool_costs, pool_device_plugin_config,
                                               PoolPlan, run_queues, spare_instances, throughput_of, WHOLE)
from gpuvalues.planners.mig.milp.solve import XCounts, ZCounts, solution_values, solve_model, trim_solution

# mig-parted's mig-devices per GPU of each node config (None: MIG off)
NodeConfigs = dict[str, list[dict[str, int] | None]]


def _pool_plans(model: Model, demands: Sequence[ModelDemand], x: XCounts, z: ZCounts
                ) -> tuple[list[PoolPlan], NodeConfigs, dict[str, dict[str, str]], dict[str, dict[str, Any]]]:
    pool_plans = []
    node_configs: NodeConfigs = {}
    labels: dict[str, dict[str, str]] = {}
    dp_configs: dict[str, dict[str, Any]] = {}
    pool_names = {p.name for p in model.pools}
    for k, pool in enumerate(model.pools):
        gpu = get_gpu(pool.gpu)
        mode = model.modes[k]
        keys = model.layouts[k]
        used_keys: list[tuple[LayoutKey, int]] = [(key, cnt) for li, key in enumerate(keys)
                                                  if (cnt := x.get((k, li), 0))]
        counted, layouts = assign_gpus(mode, gpu, used_keys, run_queues(z, k, demands))
        groups = gpu_groups(pool.name, counted, layouts)
        n_gpus = sum(counted.values())
        spare = spare_instances(counted)
        unused = 0
        if mode == "mig":
            unused = sum((gpu.geometry.memory_slices - sum(gpu.profile(p).memory_slices * c for p, c in key)) * cnt
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
            ngroups.append(NodeConfigGroup(pool.name, name, cnt, devs))
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


def plan(demands: Sequence[ModelDemand], pools: Sequence[PlanPool], *, objective: str = "gpus",
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
    costs = pool_costs(pools, objective, prices)
    deadline = time.perf_counter() + time_limit
    model, res = solve_model(demands, pools, costs, "optimal", time_limit, rel_gap=gap_tolerance)
    if res is None:
        raise diagnose_infeasible(model, demands, costs)
    status, info, sol, cols, secs, lp, extra = res
    x, z = solution_values(sol, cols)
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


def _baselines(demands: Sequence[ModelDemand], pools: Sequence[PlanPool], costs: list[float],
               deadline: float | None = None) -> list[Baseline]:
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
                bpools = [PlanPool(p.name, p.gpu, p.gpus_per_node, p.nodes, False, p.sharing, p.sharing_replicas,
                                   p.price_per_gpu) if not p.sharing else p for p in pools]
            model, res = solve_model(dem, bpools, costs, "optimal" if rule == "whole" else rule, left, with_bounds=False)
            if res is None:
                left = 30.0 if deadline is None else deadline - time.perf_counter()
                model, res = solve_model(dem, bpools, costs, "optimal" if rule == "whole" else rule, max(left, 1e-3),
                                  with_bounds=False, capacity=False)
                if res is not None:
                    note += f"; more than the inventory's {sum(p.capacity for p in pools)} GPUs"
        except (PlanError, MigLayoutError) as exc:   # MigLayoutError: no all-balanced for the GPU
            out.append(Baseline(name, None, None, f"{note}; not possible: {exc}"))
            continue
        if res is None:
            why = diagnose_infeasible(model, dem if rule == "whole" else demands, costs).message
            out.append(Baseline(name, None, None, f"{note}; not possible: {why}"))
            continue
        status, info, sol, cols, secs, _, extra = res
        x, _ = solution_values(sol, cols)
        gpus = sum(x.values())
        if not extra["optimal"]:
            note += ("; not proven minimal: the solver's claim did not check out (best found)"
                     if extra["rejected"] is not None else "; stopped at the time limit (best found)")
        cost = sum(costs[k] * v for (k, _), v in x.items())
        out.append(Baseline(name, gpus, float(cost), note))
    return out


def _pinned_memory_gb(d: ModelDemand, pools: Sequence[PlanPool]) -> float | None:
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


def _whole_demand(d: ModelDemand, pools: Sequence[PlanPool]) -> ModelDemand:
    if d.throughput is None:
        return d
    tpi = dict(d.throughput_per_instance)   # the demand keeps its pools: a baseline moves no model
    for p in pools:
        gpu = get_gpu(p.gpu)
        full = gpu.full_profile
        if full is None:
            continue
        own = throughput_of(d, gpu, WHOLE)
        if own is None:
            t = throughput_of(d, gpu, full.name)
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
    pool = PlanPool(name=f"{get_gpu(gpu).name.lower()}-{mode}", gpu=gpu, gpus_per_node=min(gpus_per_node, gpus),
                    nodes=math.ceil(gpus / min(gpus_per_node, gpus)), mig_enabled=False, sharing=mode,
                    sharing_replicas=replicas, price_per_gpu=price_per_gpu)
    return plan(demands, [pool])
