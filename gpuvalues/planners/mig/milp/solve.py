"""Solving the configuration ILP: its LP relaxation, LP rounding (the warm start and the floor
of the plan), the exact remainder, and the MIP (`solve_model`)."""
from __future__ import annotations

import math
import time
from collections import Counter
from typing import Sequence, TypedDict

import highspy
import numpy as np

from gpuvalues.errors import PlanError
from gpuvalues.planners.mig.milp.certify import Certificate, run_highs
from gpuvalues.planners.mig.milp.highs import Rows, Vector
from gpuvalues.planners.mig.milp.model import (Column, Model, ModelDemand, PlanPool, build_model, built_by,
                                               demand_need, serving)

# solve_lp's answer: status, info, solution (None: none), the columns, the MIP's certificate
LpAnswer = tuple[highspy.HighsModelStatus, highspy.HighsInfo, "Vector | None", list[Column], "Certificate | None"]
# a solution as counts: x[(pool, layout)] GPUs, z[(pool, itype, model)] instances
XCounts = dict[tuple[int, int], int]
ZCounts = dict[tuple[int, str, int], int]
# LP rounding's fixed part: (spare instances {(pool, itype): n}, need per model, GPUs left per pool)
Residual = tuple[dict[tuple[int, str], float], list[float], list[float]]


class SolveExtra(TypedDict):
    """What `solve_model` adds to HiGHS's answer (certified, never the solver's report)."""

    objective: float
    bound: float
    rounded: float
    optimal: bool
    rejected: float | None     # HiGHS's claimed optimum when its answer did not check out


# solve_model's answer: (status, info or None, solution, columns, seconds, LP bound or None, extra)
Solved = tuple[highspy.HighsModelStatus, "highspy.HighsInfo | None", Vector, list[Column], float, "float | None",
               SolveExtra]


def solve_lp(model: Model, demands: Sequence[ModelDemand], costs: list[float], *, integer: bool,
           capacity: bool = True, time_limit: float = 30.0, abs_gap: float = 1e-6, rel_gap: float = 0.0,
           start: Vector | None = None, relax: frozenset[int] = frozenset(),
           residual: Residual | None = None, lp_bound: float | None = None) -> LpAnswer:
    """Solve the configuration ILP (or its LP relaxation): (status, info, solution, columns,
    certificate; see `run_highs`). `start`: a feasible solution HiGHS starts from (the rounded
    LP); `relax`: pools whose capacity row is dropped (diagnosis); `residual`: (spare instances
    {(pool, itype): n}, need per model, GPUs left per pool) to solve what is left after a fixed
    part of the plan (LP rounding); `lp_bound`: the LP relaxation's value, for the certificate."""
    spare_built: dict[tuple[int, str], float] = {}
    needs: list[float] | None = None
    caps: list[float] | None = None
    if residual is not None:
        spare_built, needs, caps = residual
    cols: list[Column] = []  # ("x", k, layout_index) | ("z", k, itype, m)
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
        for itype in model.itypes[k]:
            z = serving(col_index, k, itype.name, len(demands))
            if not z:
                continue
            add_row(z + built_by(col_index, "x", k, keys, itype.name), -inf,
                    float(spare_built.get((k, itype.name), 0.0)))
    for m, d in enumerate(demands):
        entries = [(col_index[("z", k, it, mm)], w) for (k, it, mm), w in model.weights.items() if mm == m]
        add_row(entries, demand_need(d) if needs is None else needs[m], inf)
    lp = rows.lp(cost, np.zeros(n), np.full(n, inf), integer=integer)
    status, info, sol, cert = run_highs(lp, integer=integer, time_limit=time_limit, rel_gap=rel_gap,
                                        abs_gap=abs_gap, start=start, lp_bound=lp_bound)
    return status, info, sol, cols, cert


def lp_relaxation_bound(model: Model, demands: Sequence[ModelDemand], costs: list[float],
                        capacity: bool = True) -> float | None:
    status, info, sol, _, _ = solve_lp(model, demands, costs, integer=False, capacity=capacity)
    if status != highspy.HighsModelStatus.kOptimal:
        return None
    return float(info.objective_function_value)


def solution_values(sol: Vector, cols: Sequence[Column]) -> tuple[XCounts, ZCounts]:
    x: XCounts = {}
    z: ZCounts = {}
    for i, c in enumerate(cols):
        v = int(round(sol[i]))
        if v <= 0:
            continue
        if c[0] == "x":
            x[(c[1], c[2])] = v
        else:
            z[(c[1], c[2], c[3])] = v
    return x, z


def trim_solution(z: ZCounts, model: Model, demands: Sequence[ModelDemand]) -> ZCounts:
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


def round_lp(model: Model, demands: Sequence[ModelDemand], lp_sol: Vector, cols: list[Column],
              capacity: bool = True) -> Vector | None:
    """A feasible integer solution from the LP optimum ("LP rounding"): floor the LP, cover each
    model's residual need with its best-weighted instance type, then add GPUs of the layout that
    builds the most missing instances until every instance used is built. None if that breaks a
    pool's capacity. Work is per layout and model, never per GPU."""
    col_index = {c: i for i, c in enumerate(cols)}
    val: Vector = np.floor(np.maximum(lp_sol, 0.0) + 1e-9)
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
        deficit: Counter[str] = Counter()
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


def _round_residual(model: Model, demands: Sequence[ModelDemand], costs: list[float], lp_sol: Vector,
                    cols: list[Column], capacity: bool, time_limit: float) -> Vector | None:
    """LP rounding with an exact remainder: keep the floor of the LP's GPUs and assignments, then
    solve what is left (a few dozen GPUs whatever the fleet size, so small numbers HiGHS solves
    fast) exactly within `time_limit`. None if that fails."""
    col_index = {c: i for i, c in enumerate(cols)}
    val: Vector = np.floor(np.maximum(lp_sol, 0.0) + 1e-9)
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
    _, _, sol, _, cert = solve_lp(model, demands, costs, integer=True, capacity=capacity, time_limit=time_limit,
                                abs_gap=0.999 if integral else 1e-6, residual=(spare, needs, caps))
    if cert is None or sol is None:   # no solution, or one that breaks a row
        return None
    out: Vector = val + np.round(sol)
    return out


def solve_model(demands: Sequence[ModelDemand], pools: Sequence[PlanPool], costs: list[float], layout_rule: str,
                time_limit: float, with_bounds: bool = True, capacity: bool = True, rel_gap: float = 0.0,
                solver_layouts: bool = True) -> tuple[Model, Solved | None]:
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
    lp_status, lp_info, lp_sol, cols, _ = solve_lp(model, demands, costs, integer=False, capacity=capacity,
                                                 time_limit=max(time_limit, 30.0))
    if lp_status == highspy.HighsModelStatus.kModelEmpty:   # no column: every need is 0, nothing to place
        status = highspy.HighsModelStatus.kOptimal
        extra: SolveExtra = {"objective": 0.0, "bound": 0.0, "rounded": 0.0, "optimal": True, "rejected": None}
        return model, (status, None, np.zeros(0), cols, time.perf_counter() - t0, 0.0 if with_bounds else None,
                       extra)
    if lp_status != highspy.HighsModelStatus.kOptimal or lp_sol is None:
        return model, None
    lp = float(lp_info.objective_function_value)
    cost_vec = np.array([costs[c[1]] if c[0] == "x" else 0.0 for c in cols])
    rounded = round_lp(model, demands, lp_sol, cols, capacity)
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
    if proven and not solver_layouts and rounded is not None:   # the caller only needs an optimal solution: done
        extra = {"objective": r_obj, "bound": r_obj, "rounded": r_obj, "optimal": True, "rejected": None}
        return model, (highspy.HighsModelStatus.kOptimal, None, rounded, cols, time.perf_counter() - t0, lp if with_bounds else None, extra)
    if left > 0:
        status, info, sol, cols, cert = solve_lp(model, demands, costs, integer=True, time_limit=left,
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
    assert sol is not None, "a certificate comes with its solution, and a finite rounding is one"
    return model, (status, info, sol, cols, secs, lp if with_bounds else None, extra)
