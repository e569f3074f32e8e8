"""Re-plan with the fewest changes (issue 17) against an independent exact model.

The oracle below does not call the planner: it enumerates which nodes change, gives the
changed nodes' GPUs every combination of A30 layouts (the maximal layouts of the MIG User
Guide's A30 table, typed here by hand), and decides whether instances cover the replicas by
Hall's condition (compatibility is "nominal memory >= need", so the sets are nested). It finds
the fewest GPUs, then the fewest changed nodes among plans with at most that many + slack.
"""
from __future__ import annotations

import itertools
import random

import pytest

from gpuvalues.errors import PlanError
from gpuvalues.catalog import GIB_PER_GB, get_gpu
from gpuvalues.planners.mig.milp.model import ModelDemand, NodePool
from gpuvalues.planners.mig.replan import replan
from gpuvalues.planners.mig.replan import CurrentLayout, CurrentNode

# A30 maximal layouts over its base profiles (1g.6gb, 2g.12gb, 4g.24gb): MIG User Guide A30 table
A30_LAYOUTS = ({"4g.24gb": 1}, {"2g.12gb": 2}, {"2g.12gb": 1, "1g.6gb": 2}, {"1g.6gb": 4})
# usable memory (GiB, the catalog's nvidia-smi figures); demands are in GB (10^9 bytes)
MEM = {p: get_gpu("A30").profile(p).memory_gib for p in ("1g.6gb", "2g.12gb", "4g.24gb")}


def covers(layouts, demands) -> bool:
    inst = [MEM[p] for lay in layouts for p, c in lay.items() for _ in range(c)]
    for t in sorted({m for _, m in demands}, reverse=True):
        need = t * GIB_PER_GB
        if sum(1 for v in inst if v >= need - 1e-9) < sum(r for r, m in demands if m >= t):
            return False
    return True


def min_gpus(kept: list[dict], free: int, demands) -> int | None:
    """Fewest GPUs: a subset of the kept GPUs plus up to `free` GPUs with any layout."""
    for t in range(len(kept) + free + 1):
        for u in range(min(t, len(kept)) + 1):
            if t - u > free:
                continue
            for sub in itertools.combinations(kept, u):
                for extra in itertools.combinations_with_replacement(A30_LAYOUTS, t - u):
                    if covers(list(sub) + list(extra), demands):
                        return t
    return None


def oracle(nodes, gpn, demands, slack=0, budget=None):
    """(fewest GPUs, fewest changed nodes) over every set of nodes to change."""
    best = {}
    for r in range(len(nodes) + 1):
        if budget is not None and r > budget:
            break
        for changed in itertools.combinations(range(len(nodes)), r):
            kept = [g for i, n in enumerate(nodes) if i not in changed for g in n if g]
            g = min_gpus(kept, gpn * r, demands)
            if g is not None:
                best[changed] = g
    if not best:
        return None
    g_star = min(best.values())
    return g_star, min(len(c) for c, g in best.items() if g <= g_star + slack)


def case(seed):
    rnd = random.Random(seed)
    gpn = rnd.choice([1, 2])
    n_nodes = rnd.choice([1, 2, 3])
    listed = rnd.randint(0, n_nodes) if rnd.random() < 0.2 else n_nodes
    nodes = [[dict(rnd.choice(A30_LAYOUTS + ({},))) for _ in range(gpn)] for _ in range(listed)]
    demands = [(rnd.randint(0, 4), rnd.choice([5, 6, 10, 12, 20])) for _ in range(rnd.choice([1, 2]))]
    slack = rnd.choice([0, 0, 0, 1])
    budget = rnd.choice([None, None, None, 0, 1, 2])
    return gpn, n_nodes, nodes, demands, slack, budget


def run(seed):
    gpn, n_nodes, nodes, demands, slack, budget = case(seed)
    pool = NodePool("p", "A30", gpn, n_nodes)
    cur = CurrentLayout(tuple(CurrentNode(f"n{i}", "p", f"c{i}", tuple(dict(g) for g in n), pods=i)
                              for i, n in enumerate(nodes)))
    dem = [ModelDemand(f"m{j}", replicas=r, memory_gb=m) for j, (r, m) in enumerate(demands)]
    # the oracle sees unlisted nodes as nodes with no instances (changing one is a change)
    full = nodes + [[{}] * gpn for _ in range(n_nodes - len(nodes))]
    want = oracle(full, gpn, demands, slack, budget)
    return dem, pool, cur, want, slack, budget


@pytest.mark.parametrize("seed", range(300))
def test_replan_matches_exact_model(seed):
    dem, pool, cur, want, slack, budget = run(seed)
    # one pool: a per-pool budget is the same limit as a total one (every third case uses it)
    limits = {"max_unavailable_per_pool" if seed % 3 == 0 else "max_node_changes": budget}
    if want is None:
        with pytest.raises(PlanError):
            replan(dem, [pool], cur, gpu_slack=slack, **limits)
        return
    r = replan(dem, [pool], cur, gpu_slack=slack, **limits)
    assert r.optimal
    assert r.gpus_optimum == want[0]                      # GPU count optimal (first objective)
    assert r.changes_count == want[1]                     # node changes minimal under it (unlisted too)
    assert r.gpus_used <= want[0] + slack
    assert r.gpus_lp_bound <= want[0] + 1e-6 and r.changes_lp_bound <= want[1] + 1e-6
    for d in dem:                                        # the plan serves every model
        assert r.plan.served[d.name] >= d.replicas
    by_name = {n.name: n for n in cur.nodes}
    for name, cfg in r.node_configs.items():             # unchanged nodes keep their config
        if name not in r.nodes_changed and name in by_name:
            assert cfg == by_name[name].config


def test_oracle_can_disagree():
    # negative control: the oracle's answer differs from a wrong claim (all nodes changed)
    gpn, nodes = 1, [[{"1g.6gb": 4}], [{"4g.24gb": 1}]]
    assert oracle(nodes, gpn, [(4, 5)]) == (1, 0)
    assert oracle(nodes, gpn, [(2, 20)]) == (2, 1)        # the second 4g.24gb needs a change


def test_no_change_when_the_current_layout_still_serves():
    cur = CurrentLayout((CurrentNode("a", "p", "all-1g", ({"1g.6gb": 4},), pods=4),
                         CurrentNode("b", "p", "all-4g", ({"4g.24gb": 1},), pods=1)))
    r = replan([ModelDemand("m", replicas=3, memory_gb=5)], [NodePool("p", "A30", 1, 2)], cur)
    assert r.nodes_changed == () and r.pods_displaced == 0 and r.gpus_used == 1


def test_budget_error_names_the_budget():
    cur = CurrentLayout((CurrentNode("a", "p", "all-1g", ({"1g.6gb": 4},), pods=4),
                         CurrentNode("b", "p", "all-1g", ({"1g.6gb": 4},), pods=4)))
    with pytest.raises(PlanError, match=r"drain budget \(--max-node-changes 0\).*at least 2 node changes"):
        replan([ModelDemand("m", replicas=2, memory_gb=20)], [NodePool("p", "A30", 1, 2)], cur, max_node_changes=0)


def test_pods_displaced_counts_the_changed_nodes():
    cur = CurrentLayout((CurrentNode("a", "p", "all-1g", ({"1g.6gb": 4},), pods=3),
                         CurrentNode("b", "p", "all-1g", ({"1g.6gb": 4},), pods=1)))
    r = replan([ModelDemand("m", replicas=1, memory_gb=20), ModelDemand("s", replicas=2, memory_gb=5)],
               [NodePool("p", "A30", 1, 2)], cur)
    # one node must become 4g.24gb: the one with fewer pods (b)
    assert r.nodes_changed == ("b",) and r.pods_displaced == 1 and not r.pods_estimated


def test_two_pools_change_only_where_needed():
    # pool a can serve the extra 20 GB replica only by changing a node; pool b's nodes stay
    cur = CurrentLayout((CurrentNode("a1", "a", "all-1g", ({"1g.6gb": 4},), pods=2),
                         CurrentNode("a2", "a", "all-1g", ({"1g.6gb": 4},), pods=1),
                         CurrentNode("b1", "b", "b-7g", ({"7g.80gb": 1},), pods=1)))
    dem = [ModelDemand("s", replicas=4, memory_gb=5, pools=("a",)),
           ModelDemand("big", replicas=1, memory_gb=20, pools=("a",)),
           ModelDemand("huge", replicas=1, memory_gb=70, pools=("b",))]
    r = replan(dem, [NodePool("a", "A30", 1, 2), NodePool("b", "A100-80GB", 1, 1)], cur)
    assert r.nodes_changed == ("a2",) and r.changes_by_pool == {"a": 1} and r.pods_displaced == 1
    assert r.node_configs["b1"] == "b-7g" and r.gpus_used == 3
