"""Re-plan a running fleet with the fewest changes (issue 17), over the planner's public model API.

Changing a node's MIG layout means draining it, so a re-plan should keep as many nodes as it
can. The model is the planner's configuration ILP (`gpuvalues.planners.mig.milp.model`) with the fleet's
current layout added, node by node:

    keep[k,c]  integer in [0, N(k,c)]   nodes of pool k with current config c left untouched
    y[k,L']    integer >= 0             GPUs of kept nodes, with current layout L', that serve
                                        something:  y[k,L'] <= sum_c mult(c,L') keep[k,c]
    x[k,L]     integer >= 0             GPUs of changed nodes given a new layout L:
                                        sum_L x[k,L] <= gpus_per_node(k) * (N(k) - sum_c keep[k,c])
    z[k,p,m]   integer >= 0             instances of type p serving model m, as in `plan`
    instances used <= built by x and y; every model's need met; change budgets:
    sum_k changes(k) <= max_node_changes, changes(k) <= max_unavailable_per_pool.

Lexicographic: first the fewest GPUs (sum x + y; identical to `plan`'s optimum when no
budget binds, since a changed node can take any layout), then, with GPUs <= that optimum +
`gpu_slack`, the fewest changed nodes. Both LP relaxations are reported as bounds, and
both objectives are certified (`certify`: recomputed from the solution returned, proven
only against a bound that holds; else the true gap is reported and said). Nodes a pool has
but the current layout does not list are unconfigured: configuring one is a change (it gets
a label), but it displaces no pods; they are counted per pool and config
(`Replan.unlisted_changes`), never given names that `rollout` would act on.

Public API (frozen dataclasses, pure):
- `CurrentNode(name, pool, config, gpus, pods=None)`: `gpus[i]` is GPU i's mig-devices
  (`{"3g.40gb": 2}`; `{}` MIG on with no instances; None MIG off); `pods` GPU pods on it if known.
- `CurrentLayout(nodes, source=None)`; `gpuvalues.io.current` reads both file forms into it.
- `replan(demands, pools, current, *, gpu_slack=0, max_node_changes=None,
  max_unavailable_per_pool=None, time_limit=30.0)` -> `Replan`; `PlanError` when no plan fits
  (the budget that binds is named).
- `Replan.to_dict()`; `Replan.plan` is a `milp.Plan` of the result (configs and labels for
  every node config in use, kept ones under their current names).
"""
from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypedDict

import highspy
import numpy as np

from gpuvalues.catalog import get_gpu
from gpuvalues.errors import PlanError
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import migparted
from gpuvalues.planners.mig.milp import model as milp
from gpuvalues.planners.mig.milp.certify import Certificate, run_highs
from gpuvalues.planners.mig.milp.diagnose import diagnose_infeasible
from gpuvalues.planners.mig.milp.highs import Rows, Vector
from gpuvalues.planners.mig.milp.model import Column, LayoutKey
from gpuvalues.planners.mig.milp.solve import XCounts, ZCounts, solve_model, trim_solution

# a node's per-GPU layouts as hashable data: GPU i's sorted (profile, count) pairs, None = MIG off
Signature = tuple[LayoutKey | None, ...]
# one stage's answer: (status, objective, solution or None, columns, current keys per pool, certificate)
Stage = tuple[highspy.HighsModelStatus, float, "Vector | None", list[Column], list[list[LayoutKey]],
              "Certificate | None"]


class _Budgets(TypedDict):
    max_node_changes: int | None
    max_unavailable: int | None


# the budgets in the CLI's words (errors name what the user typed, not the parameter)
FLAGS = {"gpu_slack": "--gpu-slack", "max_node_changes": "--max-node-changes",
         "max_unavailable_per_pool": "--max-unavailable-per-pool"}


@dataclass(frozen=True)
class CurrentNode:
    """One node as it runs now: its pool, its `nvidia.com/mig.config` and per-GPU mig-devices."""

    name: str
    pool: str
    config: str | None
    gpus: tuple[Mapping[str, int] | None, ...]
    pods: int | None = None
    pinned: bool = False   # whole-GPU / tensor-parallel replicas run there: kept as it is

    @property
    def signature(self) -> Signature:
        """The per-GPU layouts as hashable data (two nodes alike have the same signature)."""
        return tuple(None if g is None else tuple(sorted((p, c) for p, c in g.items() if c)) for g in self.gpus)


@dataclass(frozen=True)
class CurrentLayout:
    """The fleet's current MIG layout, node by node."""

    nodes: tuple[CurrentNode, ...]
    source: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Replan:
    """A re-plan: the new plan, what changes, and the LP bounds on both objectives."""

    plan: milp.Plan
    gpus_used: int
    gpus_optimum: int              # fewest GPUs under the budgets (first objective)
    gpus_lp_bound: float
    nodes_changed: tuple[str, ...]
    nodes_drained: tuple[str, ...]  # changed nodes that had a config (unlisted ones are only labelled)
    changes_lp_bound: float        # LP bound on node changes with GPUs <= optimum + slack
    pods_displaced: int
    pods_estimated: bool           # True when some changed node did not say its pods
    node_configs: Mapping[str, str | None]   # None: an unlisted node left unconfigured
    previous_configs: Mapping[str, str | None]
    changes_by_pool: Mapping[str, int]
    optimal: bool                  # both minima proven: each objective meets its certified bound
    solve_seconds: float
    warnings: tuple[str, ...] = ()
    gpus_bound: float = 0.0        # certified lower bound on GPUs (`certify`)
    changes_bound: float = 0.0     # certified lower bound on node changes with GPUs <= found + slack
    # nodes of a pool the current layout does not list that need a config: pool -> config -> count
    unlisted_changes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def changes_count(self) -> int:
        """Nodes changed: the named ones and the unlisted ones that need a config."""
        return len(self.nodes_changed) + sum(sum(c.values()) for c in self.unlisted_changes.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON/YAML output."""
        return {
            "gpus_used": self.gpus_used, "gpus_optimum": self.gpus_optimum,
            "gpus_lp_bound": round(self.gpus_lp_bound, 3),
            "nodes_changed": self.changes_count, "nodes_drained": len(self.nodes_drained),
            "changes_lp_bound": round(self.changes_lp_bound, 3),
            "gpus_bound": self.gpus_bound, "changes_bound": self.changes_bound,
            "pods_displaced": self.pods_displaced, "pods_estimated": self.pods_estimated,
            "optimal": self.optimal, "solve_seconds": round(self.solve_seconds, 4),
            "changes_by_pool": dict(self.changes_by_pool),
            "changes": [{"node": n, "from": self.previous_configs.get(n), "to": self.node_configs[n]}
                        for n in self.nodes_changed],
            "node_configs": dict(sorted(self.node_configs.items())),
            "unlisted_changes": [{"pool": p, "nodes": n, "to": c} for p, cs in sorted(self.unlisted_changes.items())
                                 for c, n in sorted(cs.items())],
            "warnings": list(self.warnings),
            "plan": self.plan.to_dict(),
        }


@dataclass
class _Group:
    pool: int
    signature: Signature
    config: str | None
    nodes: list[CurrentNode]
    keys: Counter[LayoutKey]   # per-GPU usable layout key -> GPUs per node
    listed: bool = True
    pinned: bool = False   # never changed (its nodes carry whole-GPU / tensor-parallel replicas)


def _usable_key(devices: Mapping[str, int] | None, mode: str, names: set[str], r: int | None) -> LayoutKey | None:
    """A current GPU's layout as a planner layout key over the usable instance types."""
    if mode == "whole":
        return ((milp.WHOLE, 1),) if devices is None else None
    if mode in ("time-slicing", "mps"):
        return ((milp.SHARED, r),) if devices is None and r is not None else None   # shared: r is set
    if devices is None:
        return None
    key = tuple(sorted((p, c) for p, c in devices.items() if c and p in names))
    return key or None


def _groups(model: milp.Model, current: CurrentLayout) -> list[list[_Group]]:
    pools = model.pools
    index = {p.name: k for k, p in enumerate(pools)}
    by_pool: list[dict[tuple[Signature, str | None, bool], _Group]] = [dict() for _ in pools]
    for node in current.nodes:
        if node.pool not in index:
            raise PlanError(f"current layout: node {node.name!r} is in pool {node.pool!r}, which the spec does not "
                            f"have (pools: {', '.join(index)})", source=current.source, field=f"nodes.{node.name}")
        k = index[node.pool]
        if len(node.gpus) != pools[k].gpus_per_node:
            raise PlanError(f"current layout: node {node.name!r} lists {len(node.gpus)} GPUs but pool "
                            f"{node.pool!r} has {pools[k].gpus_per_node} per node", source=current.source,
                            field=f"nodes.{node.name}")
        g = by_pool[k].setdefault((node.signature, node.config, node.pinned),
                                  _Group(k, node.signature, node.config, [], Counter(), pinned=node.pinned))
        g.nodes.append(node)
    out = []
    for k, pool in enumerate(pools):
        names = {it.name for it in model.itypes[k]}
        groups = list(by_pool[k].values())
        listed = sum(len(g.nodes) for g in groups)
        if listed > pool.nodes:
            raise PlanError(f"current layout lists {listed} nodes in pool {pool.name!r}, which has {pool.nodes} "
                            "for MIG", source=current.source, field="nodes")
        if listed < pool.nodes:   # the pool's other nodes have no config yet: counted, never named
            placeholder = [CurrentNode(f"<unlisted {pool.name} {i + 1}>", pool.name, None,
                                       (None,) * pool.gpus_per_node, 0) for i in range(pool.nodes - listed)]
            groups.append(_Group(k, (None,) * pool.gpus_per_node, None, placeholder, Counter(), listed=False))
        for g in groups:
            for dev in g.nodes[0].gpus:
                key = _usable_key(dev, model.modes[k], names, model.shared_r[k])
                if key is not None and (g.listed or model.modes[k] != "mig"):
                    g.keys[key] += 1
        out.append(groups)
    return out


def _milp(model: milp.Model, demands: Sequence[milp.ModelDemand], groups: list[list[_Group]], *, stage: int,
          gpu_cap: float | None, max_node_changes: int | None, max_unavailable: int | None,
          integer: bool, time_limit: float, start: Vector | None = None,
          fix_keep: Mapping[tuple[int, int], int] | None = None, feasibility: bool = False,
          lp_bound: float | None = None) -> Stage:
    """Build and solve one stage; returns (status, objective, solution, columns, current keys,
    certificate). The objective is the LP's value for an LP, else the certificate's (recomputed
    from the solution; `certify`, with `lp_bound` as a bound that holds). `start`: a warm
    start; `fix_keep`: pin keep[k,g]; `feasibility`: any solution."""
    cols: list[Column] = []
    cur_keys: list[list[LayoutKey]] = []
    for k, keys in enumerate(model.layouts):
        for li in range(len(keys)):
            cols.append(("x", k, li))
        ck = sorted({key for g in groups[k] for key in g.keys}, key=str)
        cur_keys.append(ck)
        for ci in range(len(ck)):
            cols.append(("y", k, ci))
        for gi in range(len(groups[k])):
            cols.append(("keep", k, gi))
    for (k, it, m) in sorted(model.weights):
        cols.append(("z", k, it, m))
    col = {c: i for i, c in enumerate(cols)}
    n = len(cols)
    inf = highspy.kHighsInf
    lower, upper, cost = np.zeros(n), np.full(n, inf), np.zeros(n)
    for c, i in col.items():
        if c[0] == "keep":
            upper[i] = len(groups[c[1]][c[2]].nodes)
            if groups[c[1]][c[2]].pinned:
                lower[i] = upper[i]
            if fix_keep is not None and (c[1], c[2]) in fix_keep:
                lower[i] = upper[i] = fix_keep[(c[1], c[2])]
    rows = Rows()
    add_row = rows.add

    gpu_entries: list[tuple[int, float]] = []
    change_terms: list[tuple[int, float]] = []
    change_const = 0.0
    for k, keys in enumerate(model.layouts):
        pool = model.pools[k]
        xs = [col[("x", k, li)] for li in range(len(keys))]
        ys = [col[("y", k, ci)] for ci in range(len(cur_keys[k]))]
        kp = [(col[("keep", k, gi)], g) for gi, g in enumerate(groups[k])]
        gpu_entries += [(j, 1.0) for j in xs + ys]
        # new layouts only on changed nodes: sum x + gpn * sum keep <= gpn * N
        add_row([(j, 1.0) for j in xs] + [(j, float(pool.gpus_per_node)) for j, _ in kp], -inf,
                float(pool.gpus_per_node * pool.nodes))
        for ci, key in enumerate(cur_keys[k]):   # kept GPUs used <= kept GPUs with that layout
            add_row([(col[("y", k, ci)], 1.0)] + [(j, -float(g.keys.get(key, 0))) for j, g in kp], -inf, 0.0)
        for itype in model.itypes[k]:   # used <= built by new (x) and kept (y) layouts
            z = milp.serving(col, k, itype.name, len(demands))
            if not z:
                continue
            add_row(z + milp.built_by(col, "x", k, keys, itype.name)
                    + milp.built_by(col, "y", k, cur_keys[k], itype.name), -inf, 0.0)
        # changes(k) = N(k) - sum keep
        if max_unavailable is not None:
            add_row([(j, 1.0) for j, _ in kp], float(pool.nodes - max_unavailable), inf)
        change_terms += [(j, -1.0) for j, _ in kp]
        change_const += pool.nodes
    for m, d in enumerate(demands):
        add_row([(col[("z", k, it, mm)], w) for (k, it, mm), w in model.weights.items() if mm == m],
                milp.demand_need(d), inf)
    if max_node_changes is not None:   # sum keep >= N - budget
        add_row([(j, 1.0) for j, _ in change_terms], float(change_const - max_node_changes), inf)
    if stage == 1:
        for j, _ in gpu_entries:
            cost[j] = 1.0
        offset = 0.0
    else:
        assert gpu_cap is not None, "stage 2 runs under a GPU cap"
        add_row(gpu_entries, -inf, float(gpu_cap))
        for j, v in change_terms:
            cost[j] = v
        offset = change_const
    if feasibility:
        cost[:] = 0.0
        offset = 0.0
    lp = rows.lp(cost, lower, upper, integer=integer, offset=offset)
    # both objectives are integers: an absolute gap under 1 proves the optimum
    status, info, sol, cert = run_highs(lp, integer=integer, time_limit=time_limit, rel_gap=0.0,
                                             abs_gap=0.999, start=start, lp_bound=None if feasibility else lp_bound)
    if integer:
        if cert is None:
            sol = None   # no solution, or one that breaks a row
        value = cert.objective if cert is not None else math.inf
    else:
        value = float(info.objective_function_value)
    return status, value, sol, cols, cur_keys, cert


def replan(demands: Sequence[milp.ModelDemand], pools: Sequence[milp.PlanPool], current: CurrentLayout, *,
           gpu_slack: int = 0, max_node_changes: int | None = None, max_unavailable_per_pool: int | None = None,
           time_limit: float = 30.0) -> Replan:
    """Re-plan with the fewest GPUs (within `gpu_slack`), then the fewest node reconfigurations."""
    demands, pools = list(demands), list(pools)
    milp.check_inputs(demands, pools)
    for name, v in (("gpu_slack", gpu_slack), ("max_node_changes", max_node_changes),
                    ("max_unavailable_per_pool", max_unavailable_per_pool)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise PlanError(f"{FLAGS[name]} must be a non-negative integer, got {v!r}", field=FLAGS[name])
    if not time_limit > 0:
        raise PlanError(f"time limit must be > 0 seconds, got {time_limit!r}", field="time_limit")
    t0 = time.perf_counter()
    model = milp.build_model(demands, pools, "optimal")
    for m, d in enumerate(demands):
        if milp.demand_need(d) > 0 and not any(mm == m for (_, _, mm) in model.weights):
            raise diagnose_infeasible(model, demands, [1.0] * len(pools))
    groups = _groups(model, current)
    budgets: _Budgets = {"max_node_changes": max_node_changes, "max_unavailable": max_unavailable_per_pool}
    st_lp, lp1, _, cols1, keys1, _ = _milp(model, demands, groups, stage=1, gpu_cap=None, integer=False,
                                       time_limit=time_limit, **budgets)
    if st_lp != highspy.HighsModelStatus.kOptimal:
        if max_node_changes is None and max_unavailable_per_pool is None:
            raise diagnose_infeasible(model, demands, [1.0] * len(pools))
        raise _budget_error(model, demands, groups, max_node_changes, max_unavailable_per_pool)

    def left() -> float:
        return time_limit - (time.perf_counter() - t0)
    st1 = sol1 = None
    if max_node_changes is None and max_unavailable_per_pool is None and not any(g.pinned for gs in groups for g in gs):
        # no budget: any node may change, so the fewest GPUs is `plan`'s optimum (LP rounding,
        # warm start); its solution, with every node changed, is a stage-1 solution too
        _, res = solve_model(demands, pools, [1.0] * len(pools), "optimal", left(), solver_layouts=False)
        if res is not None:
            status, _, psol, pcols, _, _, extra = res
            pidx = {c: i for i, c in enumerate(pcols)}
            sol1 = np.array([psol[pidx[c]] if c in pidx else 0.0 for c in cols1])
            g1, b1, proven1, cols, cur_keys = extra["objective"], extra["bound"], extra["optimal"], cols1, keys1
    if sol1 is None:
        st1, g1, sol1, cols, cur_keys, cert1 = _milp(model, demands, groups, stage=1, gpu_cap=None, integer=True,
                                                     time_limit=left(), lp_bound=lp1, **budgets)
        if cert1 is not None:
            b1, proven1 = cert1.bound, cert1.optimal
    if sol1 is None:
        if st1 in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kOptimal):
            raise PlanError(f"no re-plan found within the time limit ({time_limit:g} s): raise it", field="time_limit")
        raise _budget_error(model, demands, groups, max_node_changes, max_unavailable_per_pool)
    # the fewest GPUs found (recomputed from its solution, so the cap below admits that solution)
    gpus_opt = int(round(g1))
    cap = gpus_opt + gpu_slack
    st_lp2, lp2, lp2_sol, cols, _, _ = _milp(model, demands, groups, stage=2, gpu_cap=cap, integer=False,
                                             time_limit=max(left(), 1e-3), **budgets)
    if st_lp2 != highspy.HighsModelStatus.kOptimal:
        lp2, lp2_sol = 0.0, None
    start = _stage2_start(model, demands, groups, lp2_sol, cols, cap, budgets, left) if lp2_sol is not None else None
    _, _, sol2, cols, cur_keys, cert2 = _milp(model, demands, groups, stage=2, gpu_cap=cap, integer=True,
                                              time_limit=max(left(), 1e-3), start=start, lp_bound=lp2, **budgets)
    sol = sol2 if sol2 is not None else sol1
    b2 = cert2.bound if cert2 is not None else float(math.ceil(lp2 - 1e-6))
    return _result(model, demands, groups, sol, cols, cur_keys, gpus_opt, lp1, lp2, (b1, proven1), b2,
                   time.perf_counter() - t0, left() <= 0, time_limit)


def _stage2_start(model: milp.Model, demands: Sequence[milp.ModelDemand], groups: list[list[_Group]],
                  lp_sol: Vector, cols: list[Column], cap: int, budgets: _Budgets, left: Callable[[], float]
                  ) -> Vector | None:
    """A warm start for the change-minimising stage: keep the LP's kept nodes rounded down and
    find any plan on the rest (one quick feasibility MIP); if that fails, change one more
    node of each partly kept group. Most re-plans then only need HiGHS to confirm the bound."""
    keep_lp = {(c[1], c[2]): float(v) for c, v in zip(cols, lp_sol) if c[0] == "keep"}
    for extra in (0, 1):
        fix = {kg: max(0, math.floor(v + 1e-6) - (extra if v < len(groups[kg[0]][kg[1]].nodes) - 1e-6 else 0))
               for kg, v in keep_lp.items()}
        st, _, sol, _, _, _ = _milp(model, demands, groups, stage=2, gpu_cap=cap, integer=True,
                                    time_limit=max(min(left() / 4, 2.0), 1e-3), fix_keep=fix, feasibility=True,
                                    **budgets)
        if sol is not None:
            return sol
    return None


def _budget_error(model: milp.Model, demands: Sequence[milp.ModelDemand], groups: list[list[_Group]],
                  max_node_changes: int | None, max_unavailable: int | None) -> PlanError:
    """Which budget makes the re-plan impossible (the fleet itself can serve the mix)."""
    free, _, _, _, _, _ = _milp(model, demands, groups, stage=1, gpu_cap=None, integer=False, time_limit=30.0,
                                max_node_changes=None, max_unavailable=None)
    if free != highspy.HighsModelStatus.kOptimal:
        return diagnose_infeasible(model, demands, [1.0] * len(model.pools))
    # the fewest changes with no GPU objective: what the budget would have to allow
    _, lp_need, _, _, _, _ = _milp(model, demands, groups, stage=2, gpu_cap=highspy.kHighsInf, integer=False,
                                   time_limit=30.0, max_node_changes=None, max_unavailable=None)
    _, _, _, _, _, cert = _milp(model, demands, groups, stage=2, gpu_cap=highspy.kHighsInf, integer=True,
                                time_limit=30.0, max_node_changes=None, max_unavailable=None, lp_bound=lp_need)
    # a certified bound, never the solver's word: "at least" is what the bound proves
    need_txt = f"at least {int(cert.bound)} node changes" if cert is not None and cert.bound > 0 else "more changes"
    names = []
    if max_node_changes is not None:
        names.append(f"--max-node-changes {max_node_changes}")
    if max_unavailable is not None:
        names.append(f"--max-unavailable-per-pool {max_unavailable}")
    return PlanError(f"no re-plan fits the drain budget ({', '.join(names)}): serving the new demand needs "
                     f"{need_txt} in total. Raise the budget or lower replicas/throughput",
                     field=FLAGS["max_node_changes" if max_node_changes is not None else "max_unavailable_per_pool"])


def _result(model: milp.Model, demands: Sequence[milp.ModelDemand], groups: list[list[_Group]], sol: Vector,
            cols: list[Column], cur_keys: list[list[LayoutKey]], gpus_opt: int, lp1: float, lp2: float,
            gpus_cert: tuple[float, bool], changes_bound: float, secs: float, timed_out: bool,
            time_limit: float) -> Replan:
    val: dict[Column, int] = {c: int(round(v)) for c, v in zip(cols, sol) if round(v) > 0}
    x: XCounts = {(c[1], c[2]): v for c, v in val.items() if c[0] == "x"}
    z: ZCounts = {(c[1], c[2], c[3]): v for c, v in val.items() if c[0] == "z"}
    z = trim_solution(z, model, demands)
    pool_plans: list[milp.PoolPlan] = []
    node_cfg: dict[str, list[dict[str, int] | None]] = {}
    prev: dict[str, str | None] = {}
    changed: list[str] = []
    drained: list[str] = []
    labels: dict[str, dict[str, str]] = {}
    node_configs: dict[str, str | None] = {}
    dp_configs: dict[str, dict[str, Any]] = {}
    pods, estimated = 0, False
    by_pool: dict[str, int] = {}
    unlisted: dict[str, Counter[str]] = {}   # pool -> new config -> unlisted nodes that need it
    used_names = {g.config for gs in groups for g in gs if g.config}
    for k, pool in enumerate(model.pools):
        gpu = get_gpu(pool.gpu)
        mode = model.modes[k]
        # which nodes of each group change: the ones with the fewest pods first
        kept_nodes: list[tuple[CurrentNode, _Group]] = []
        changing: list[tuple[CurrentNode, _Group]] = []
        for gi, g in enumerate(groups[k]):
            keep = val.get(("keep", k, gi), 0)
            order = sorted(g.nodes, key=lambda nd: (nd.pods if nd.pods is not None else math.inf, nd.name),
                           reverse=True)
            kept_nodes += [(nd, g) for nd in order[:keep]]
            changing += [(nd, g) for nd in order[keep:]]
        # GPUs: used kept ones (y) and new layouts (x), models assigned run by run
        runs = [(key, val.get(("y", k, ci), 0)) for ci, key in enumerate(cur_keys[k])]
        runs += [(key, x.get((k, li), 0)) for li, key in enumerate(model.layouts[k])]
        counted, layouts = milp.assign_gpus(mode, gpu, runs, milp.run_queues(z, k, demands))
        gpu_groups = milp.gpu_groups(pool.name, counted, layouts)
        # node configs: kept nodes keep theirs; changed nodes get the new layouts in node-sized chunks
        new_keys = sorted(((key, v) for (kk, li), v in x.items() if kk == k
                           for key in [model.layouts[k][li]]), key=lambda kv: str(kv[0]))
        chunks: list[tuple[LayoutKey | None, ...]] = []
        for devs, cnt in sorted(milp.chunk_nodes(new_keys, pool.gpus_per_node).items(), key=lambda kv: str(kv[0])):
            chunks += [devs] * cnt
        chunks += [(None,) * pool.gpus_per_node] * (len(changing) - len(chunks))
        sig_names = {g.signature: g.config for g in groups[k] if g.config and g.listed}
        for (nd, g) in kept_nodes:
            if not g.listed:   # an unlisted node left alone: nothing to say about it
                continue
            # whole/shared pools need no MIG config
            name = g.config or (pool.name if mode != "mig" else None)
            node_configs[nd.name] = name
            prev[nd.name] = nd.config
            if g.listed and g.config:   # name is g.config
                node_cfg[g.config] = [dict(d) if d is not None else None for d in nd.gpus]
        fresh = 0
        for (nd, g), devs in zip(sorted(changing, key=lambda t: t[0].name), chunks):
            mig_devs: list[dict[str, int] | None] = [dict(d) if d is not None else ({} if mode == "mig" else None)
                                                    for d in devs]
            sig: Signature = tuple(None if d is None else tuple(sorted((p, c) for p, c in d.items() if c)) for d in mig_devs)
            name = sig_names.get(sig)
            if name is None:
                fresh += 1
                name = f"{pool.name}-r{fresh}"[:63]
                while name in used_names:
                    fresh += 1
                    name = f"{pool.name}-r{fresh}"[:63]
                used_names.add(name)
                sig_names[sig] = name
            node_cfg[name] = mig_devs
            if not g.listed:   # counted per pool and config; only the user can name these nodes
                unlisted.setdefault(pool.name, Counter())[name] += 1
                by_pool[pool.name] = by_pool.get(pool.name, 0) + 1
                continue
            node_configs[nd.name] = name
            prev[nd.name] = nd.config
            if name != nd.config or sig != nd.signature:
                changed.append(nd.name)
                if g.listed:
                    drained.append(nd.name)
                by_pool[pool.name] = by_pool.get(pool.name, 0) + 1
                if nd.pods is None:
                    estimated = True
                    pods += sum(sum(d.values()) for d in nd.gpus if d)   # one pod per instance: an upper bound
                else:
                    pods += nd.pods
        # node groups for the plan
        ncount = Counter((c,) for nd, _ in kept_nodes + changing if (c := node_configs.get(nd.name)) is not None)
        for name, n in unlisted.get(pool.name, {}).items():
            ncount[(name,)] += n
        ngroups = tuple(milp.NodeConfigGroup(pool.name, name, cnt, tuple(
            None if d is None else tuple(sorted(d.items())) for d in node_cfg.get(name, [None] * pool.gpus_per_node)))
            for (name,), cnt in sorted(ncount.items()))
        for (name,), _ in ncount.items():
            if mode == "mig" or gpu.mig is not None:
                labels[name] = {**migparted.node_labels(name), deviceplugin.CONFIG_LABEL: pool.name}
            else:
                labels[name] = {deviceplugin.CONFIG_LABEL: pool.name}
        dp_configs[pool.name] = milp.pool_device_plugin_config(mode, model.shared_r[k], gpu)
        spare = milp.spare_instances(counted)
        n_gpus = sum(counted.values())
        pool_plans.append(milp.PoolPlan(pool, mode, n_gpus, sum(ncount.values()),
                                        gpu_groups, ngroups, dict(spare), 0, model.shared_r[k]))
    served = {d.name: float(sum(v * model.weights[(k, it, mm)] for (k, it, mm), v in z.items() if mm == m))
              for m, d in enumerate(demands)}
    mig_cfg = {n: d for n, d in node_cfg.items() if any(dd is not None for dd in d)} or None
    mp = migparted.build_mig_parted_config(mig_cfg) if mig_cfg else None
    gpus_used = sum(p.gpus_used for p in pool_plans)
    # both objectives certified on what is returned: the GPUs (stage 1's solution, recomputed)
    # against their bound, and the nodes this result changes against the changes' bound
    gpus_bound, gpus_proven = gpus_cert
    n_changes = len(changed) + sum(sum(c.values()) for c in unlisted.values())
    changes_proven = n_changes <= changes_bound + 1e-9
    optimal = gpus_proven and changes_proven
    warnings: list[str] = []
    why = f"the solver stopped at the time limit ({time_limit:g} s)" if timed_out else \
        "the solver's claim did not check out against its solution, also solved again cold"
    if not gpus_proven:
        warnings.append(f"fewest GPUs not proven: {gpus_opt} found, bound {gpus_bound:g} "
                        f"(gap {(gpus_opt - gpus_bound) / max(gpus_opt, 1):.2%}): {why}; the re-plan is valid")
    if not changes_proven:
        warnings.append(f"fewest node changes not proven: {n_changes} changed, bound {changes_bound:g}: {why}; "
                        "the re-plan is valid")
    for pool_name, cfgs in sorted(unlisted.items()):
        for name, n in sorted(cfgs.items()):
            warnings.append(f"pool {pool_name}: {n} node(s) the current layout does not list must get config "
                            f"{name}: label them {migparted.MIG_CONFIG_LABEL}={name}, or list them in the current "
                            "layout (rollout changes only the nodes it names)")
    gap = 0.0 if gpus_proven or gpus_used == 0 else max(0.0, (gpus_used - gpus_bound) / gpus_used)
    new_plan = milp.Plan(objective="gpus", pools=tuple(pool_plans), gpus_used=gpus_used, cost=float(gpus_used),
                         lp_bound=lp1, mip_bound=float(gpus_bound), gap=gap,
                         optimal=optimal, solve_seconds=secs, served=served, baselines=(),
                         warnings=tuple(warnings + milp.plan_warnings(model, demands)), mig_parted_config=mp,
                         node_labels=labels, device_plugin_configs=dp_configs)
    return Replan(plan=new_plan, gpus_used=gpus_used, gpus_optimum=gpus_opt, gpus_lp_bound=lp1,
                  nodes_changed=tuple(sorted(changed)), nodes_drained=tuple(sorted(drained)), changes_lp_bound=lp2, pods_displaced=pods,
                  pods_estimated=estimated, node_configs=node_configs, previous_configs=prev,
                  changes_by_pool=by_pool, optimal=optimal, solve_seconds=secs, warnings=tuple(warnings),
                  gpus_bound=float(gpus_bound), changes_bound=float(changes_bound),
                  unlisted_changes={p: dict(c) for p, c in unlisted.items()})
