"""Why no plan fits: the binding constraint named (a model no instance serves, one pool's
capacity, the inventory as a whole, or integrality), with numbers that agree with the claim."""
from __future__ import annotations

import math
from typing import Sequence

import highspy

from gpuvalues.catalog import get_gpu
from gpuvalues.errors import PlanError
from gpuvalues.planners.mig.milp.highs import Vector
from gpuvalues.planners.mig.milp.model import Column, Model, ModelDemand, demand_need, need_gib
from gpuvalues.planners.mig.milp.solve import lp_relaxation_bound, solve_lp


def diagnose_infeasible(model: Model, demands: Sequence[ModelDemand], costs: list[float]) -> PlanError:
    for m, d in enumerate(demands):
        if demand_need(d) > 0 and not any(mm == m for (_, _, mm) in model.weights):
            sizes = []
            for k, pool in enumerate(model.pools):
                its = model.itypes[k]
                big = max(its, key=lambda it: it.memory_gib)
                sizes.append(f"{pool.name}: largest {big.name} {big.memory_gib:g} GiB usable")
            why = f"needs {d.memory_gb:g} GB ({need_gib(d):.2f} GiB)" if d.memory_gb else "has no usable instance type"
            if d.throughput is not None:
                why += " or lacks a throughput entry for the instance types that fit"
            return PlanError(f"model {d.name!r} {why}; no instance in any pool can serve it ({'; '.join(sizes)}). "
                             "Add a pool with bigger GPUs, allow more profiles, or lower its memory need",
                             field=f"models.{d.name}")
    return _capacity_diagnosis(model, demands)


def _pool_usage(model: Model, sol: Vector, cols: list[Column]) -> list[float]:
    use = [0.0] * len(model.pools)
    for v, c in zip(sol, cols):
        if c[0] == "x":
            use[c[1]] += float(v)
    return use


def _capacity_diagnosis(model: Model, demands: Sequence[ModelDemand]) -> PlanError:
    """Why no plan fits, computed per pool with the binding constraint named:

    1. a pool's capacity: with every other pool at its capacity, the LP still needs more of this
       pool's GPUs than it holds (typically models pinned to it);
    2. the inventory as a whole: the LP without capacities needs more GPUs than all pools hold;
    3. integrality: the LP fits, but whole instances per GPU do not.
    Each message states numbers that agree with its claim (never "need 28, hold 28")."""
    pools, n = model.pools, len(model.pools)
    status, _, sol, cols, _ = solve_lp(model, demands, [1.0] * n, integer=False)
    if status != highspy.HighsModelStatus.kOptimal or sol is None:
        need = lp_relaxation_bound(model, demands, [1.0] * n, capacity=False)
        have = sum(p.capacity for p in pools)
        if need is not None and math.ceil(need - 1e-6) > have:
            return PlanError(f"the inventory is too small: the models need at least {math.ceil(need - 1e-6)} GPUs "
                             f"(LP bound) but the pools hold {have} ({', '.join(f'{p.name}: {p.capacity}' for p in pools)}). "
                             "Binding constraint: total capacity. Add nodes or lower replicas/throughput", field="pools")
        short = []
        for k in range(n):
            # fewest GPUs of pool k with the others full: > its capacity means k's capacity binds
            only_k = [1.0 if j == k else 0.0 for j in range(n)]
            st, info, _, _, _ = solve_lp(model, demands, only_k, integer=False, relax=frozenset({k}))
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
