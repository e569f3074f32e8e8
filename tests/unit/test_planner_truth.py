"""Claims of optimality are checked, not trusted (issue 23).

- `certify` recomputes an answer from its solution; a claim it cannot back is no proof.
- The cases in data/planner_claims.yaml, where the planners at 55d8461 claimed a proven
  optimum they did not have, against the exact reference (tests/unit/reference.py).
- Property tests: on generated small fleets, the plan's GPUs, the re-plan's GPUs and nodes
  changed (with and without --max-node-changes, --max-unavailable-per-pool, --gpu-slack) and
  every bound they claim agree with the reference; a negative control shows the comparison
  catches a wrong answer.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import highspy
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvalues.catalog import get_gpu
from gpuvalues.errors import PlanError
from gpuvalues.planners.mig.milp import certify as certifying
from gpuvalues.planners.mig.milp.certify import certify
from gpuvalues.planners.mig.milp.highs import Rows, run_once
from gpuvalues.planners.mig.milp.model import ModelDemand, NodePool
from gpuvalues.planners.mig.milp.plan import plan
from gpuvalues.planners.mig.replan import replan
from gpuvalues.planners.mig.replan import CurrentLayout, CurrentNode
from tests.unit import reference as R

CASES = yaml.safe_load((Path(__file__).parent / "data" / "planner_claims.yaml").read_text())


def demands_of(case) -> list[ModelDemand]:
    out = []
    for d in case["demands"]:
        out.append(ModelDemand(d["name"], replicas=d.get("replicas"), throughput=d.get("throughput"),
                               throughput_per_instance=d.get("throughputPerInstance", {}),
                               memory_gb=d.get("memoryGB"), pools=tuple(d["pools"]) if "pools" in d else None))
    return out


def pools_of(case) -> list[NodePool]:
    return [NodePool(p["name"], p["gpu"], p["gpusPerNode"], p["nodes"]) for p in case["pools"]]


def current_of(case) -> CurrentLayout:
    return CurrentLayout(tuple(CurrentNode(n["name"], n["pool"], n["config"], tuple(n["gpus"]), n["pods"])
                               for n in case["current"]))


# --------------------------------------------------------------------------- certify

def tiny_mip(cost=1.0):
    """min cost*x  s.t.  2x >= 3, x in [0, 10] integer: x = 2 is the optimum, the LP gives 1.5."""
    rows = Rows()
    rows.add([(0, 2.0)], 3.0, highspy.kHighsInf)
    return rows.lp(np.array([cost]), np.zeros(1), np.full(1, 10.0), integer=True)


def test_certify_recomputes_the_objective_and_proves_only_what_holds():
    lp = tiny_mip()
    ok = certify(lp, [2.0], claimed=2.0, dual_bound=2.0, lp_bound=1.5)
    assert ok.objective == 2 and ok.bound == 2 and ok.optimal and ok.gap == 0 and ok.trusted
    # the LP bound alone proves it too: ceil(1.5) = 2 for an integer objective
    assert certify(lp, [2.0], lp_bound=1.5).optimal


def test_certify_rejects_a_claim_its_solution_does_not_meet():
    # highspy's failure mode: "optimal, objective 2, bound 2" with a solution worth 3
    lp = tiny_mip()
    c = certify(lp, [3.0], claimed=2.0, dual_bound=2.0, lp_bound=1.5)
    assert c.objective == 3 and not c.trusted           # recomputed, not the claim
    assert c.bound == 2 and not c.optimal and c.gap == pytest.approx(1 / 3)
    # a bound above the solution in hand is no bound: back to the LP's
    c = certify(lp, [3.0], claimed=3.0, dual_bound=4.0, lp_bound=1.5)
    assert c.bound == 2 and not c.trusted and not c.optimal
    # a "solution" that breaks a row is none
    assert certify(lp, [1.0], claimed=1.0, dual_bound=1.0) is None
    assert certify(lp, None) is None


def test_certify_keeps_fractions_for_a_fractional_objective():
    c = certify(tiny_mip(0.5), [2.0], claimed=1.0, dual_bound=0.9, lp_bound=0.75)
    assert c.bound == pytest.approx(0.9) and not c.optimal   # no ceiling: the objective is not an integer


# --------------------------------------------------------------------------- the recorded cases

@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_recorded_false_claims_are_now_true(case):
    dem, pools = demands_of(case), pools_of(case)
    want = case["expected"]
    if case["kind"] == "plan":
        assert R.fewest_gpus(dem, pools) == want["gpus"]             # the reference's answer
        p = plan(dem, pools, baselines=False)
        assert p.gpus_used == want["gpus"]
        assert p.optimal and p.mip_bound == want["gpus"] and p.gap == 0
        assert p.gpus_used != case["was"]["bound"]                    # what 55d8461 said was the bound
        return
    opts = case["options"]
    nodes = [(n["pool"], tuple(n["gpus"])) for n in case["current"]]
    assert R.replan_optimum(dem, pools, nodes, **opts) == (want["gpus"], want["changes"])
    r = replan(dem, pools, current_of(case), **opts)
    assert (r.gpus_optimum, r.changes_count) == (want["gpus"], want["changes"])
    assert r.optimal and r.gpus_bound == want["gpus"] and r.changes_bound == want["changes"]
    assert r.gpus_used <= want["gpus"] + opts.get("gpu_slack", 0)
    assert not [w for w in r.warnings if "not proven" in w or "time limit" in w]
    for d in dem:
        assert r.plan.served[d.name] >= d.replicas


# --------------------------------------------------------------------------- against the reference

GPUS = ["A100-80GB", "A30", "H100-80GB-SXM", "A100-40GB"]
MEMS = {"A100-80GB": [5, 8, 15, 30, 60, 75], "A30": [3, 5, 10, 20], "H100-80GB-SXM": [5, 9, 19, 38, 70],
        "A100-40GB": [4, 8, 15, 30]}
BASE = {g: [p.name for p in get_gpu(g).mig.profiles if p.is_base] for g in GPUS}


@st.composite
def fleets(draw, *, current: bool):
    pools, nodes = [], []
    for i in range(draw(st.integers(1, 2))):
        gpu = draw(st.sampled_from(GPUS))
        gpn = draw(st.integers(1, 2))
        n = draw(st.integers(1, 3 if current else 2))
        mig_on = draw(st.booleans()) or draw(st.booleans()) or draw(st.booleans())
        pools.append(NodePool(f"p{i}", gpu, gpn, n, mig_enabled=mig_on))
        if current:
            layouts = [dict(lay) for lay in R.all_layouts(gpu) if lay and all(p in BASE[gpu] for p, _ in lay)]
            for _ in range(draw(st.integers(0, n))):
                gpus = tuple(draw(st.sampled_from(layouts)) if mig_on and draw(st.integers(0, 5)) else None
                             for _ in range(gpn))
                nodes.append((f"p{i}", gpus))
    mems = sorted({m for p in pools for m in MEMS[p.gpu]})
    demands = []
    for j in range(draw(st.integers(1, 3))):
        pin = (draw(st.sampled_from(pools)).name,) if draw(st.integers(0, 3)) == 0 else None
        mem = draw(st.sampled_from(mems))
        if draw(st.integers(0, 3)) == 0:   # throughput: per-profile rates of the pools' base profiles
            tpi = {p: draw(st.sampled_from([2, 3, 5])) for g in {q.gpu for q in pools} for p in BASE[g]
                   if draw(st.booleans())}
            tpi["gpu"] = 7
            demands.append(ModelDemand(f"m{j}", throughput=draw(st.integers(0, 8)), throughput_per_instance=tpi,
                                       memory_gb=mem, pools=pin))
        else:
            demands.append(ModelDemand(f"m{j}", replicas=draw(st.integers(0, 5)), memory_gb=mem, pools=pin))
    return pools, nodes, demands


def plan_disagreements(want: int | None, got) -> list[str]:
    """What a plan (or None for a PlanError) claims that the reference's fewest GPUs contradicts."""
    if want is None:
        return [] if got is None else [f"a plan of {got.gpus_used} GPUs where none exists"]
    if got is None:
        return [f"no plan, but {want} GPUs suffice"]
    out = []
    if got.gpus_used < want:
        out.append(f"{got.gpus_used} GPUs, below the optimum {want}: the plan cannot be valid")
    if got.mip_bound > want + 1e-9 or got.lp_bound > want + 1e-6:
        out.append(f"bound {got.mip_bound} / LP {got.lp_bound} above the optimum {want}")
    if got.optimal and got.gpus_used != want:
        out.append(f"claims {got.gpus_used} GPUs optimal, the optimum is {want}")
    if got.optimal and got.gap != 0:
        out.append("optimal with a gap")
    true_gap = (got.gpus_used - got.mip_bound) / got.gpus_used if got.gpus_used else 0.0
    if abs(got.gap - max(0.0, true_gap)) > 1e-9:
        out.append(f"gap {got.gap} is not (GPUs - bound) / GPUs = {true_gap}")
    return out


def replan_disagreements(want: tuple[int, int] | None, got, slack: int) -> list[str]:
    """What a re-plan claims that the reference's (fewest GPUs, fewest changes) contradicts."""
    if want is None:
        return [] if got is None else ["a re-plan where none exists"]
    if got is None:
        return [f"no re-plan, but {want} exists"]
    g, c = want
    out = []
    if got.gpus_used > g + slack:
        out.append(f"{got.gpus_used} GPUs, above the optimum {g} + slack {slack}")
    if got.gpus_bound > g + 1e-9 or got.gpus_lp_bound > g + 1e-6:
        out.append(f"GPU bound {got.gpus_bound} / LP {got.gpus_lp_bound} above the optimum {g}")
    if got.changes_bound > c + 1e-9 or got.changes_lp_bound > c + 1e-6:
        out.append(f"change bound {got.changes_bound} / LP {got.changes_lp_bound} above the optimum {c}")
    if got.changes_count < c:
        out.append(f"{got.changes_count} changes, below the optimum {c}")
    if got.optimal and (got.gpus_optimum, got.changes_count) != (g, c):
        out.append(f"claims {got.gpus_optimum} GPUs and {got.changes_count} changes optimal; the optimum is {want}")
    if got.optimal and [w for w in got.warnings if "not proven" in w or "time limit" in w]:
        out.append("optimal with a warning that it is not")
    return out


def run_plan(demands, pools):
    try:
        return plan(demands, pools, baselines=False)
    except PlanError:
        return None


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=fleets(current=False))
def test_plan_agrees_with_the_reference(case):
    pools, _, demands = case
    want = R.fewest_gpus(demands, pools)
    got = run_plan(demands, pools)
    assert plan_disagreements(want, got) == []
    if got is not None:
        assert got.optimal   # small fleets: always proven
        for d in demands:
            assert got.served[d.name] >= (d.replicas if d.replicas is not None else d.throughput) - 1e-9


BUDGETS = st.sampled_from([{}, {"gpu_slack": 1}, {"max_node_changes": 0}, {"max_node_changes": 1},
                           {"max_node_changes": 2}, {"max_unavailable_per_pool": 1},
                           {"gpu_slack": 1, "max_node_changes": 1}, {"gpu_slack": 1, "max_unavailable_per_pool": 1}])


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=fleets(current=True), budget=BUDGETS)
def test_replan_agrees_with_the_reference(case, budget):
    pools, nodes, demands = case
    want = R.replan_optimum(demands, pools, nodes, **budget)
    cur = CurrentLayout(tuple(CurrentNode(f"n{i}", pool, f"{pool}-c{i}", gpus, i % 3)
                              for i, (pool, gpus) in enumerate(nodes)))
    try:
        got = replan(demands, pools, cur, **budget)
    except PlanError:
        got = None
    assert replan_disagreements(want, got, budget.get("gpu_slack", 0)) == []
    if got is not None:
        assert got.optimal
        for d in demands:
            assert got.plan.served[d.name] >= (d.replicas if d.replicas is not None else d.throughput) - 1e-9


def test_the_comparison_catches_wrong_answers():
    """Negative control: a plan one GPU above the optimum claimed optimal, a bound above it,
    a re-plan that changes a node more than needed, each is reported."""
    dem = [ModelDemand("m", replicas=3, memory_gb=5)]
    pools = [NodePool("p", "A30", 1, 2)]
    want = R.fewest_gpus(dem, pools)
    assert want == 1                                       # four 1g.6gb on one A30
    good = plan(dem, pools, baselines=False)
    assert plan_disagreements(want, good) == []
    assert plan_disagreements(want, replace(good, gpus_used=2))         # 2 "optimal"
    assert plan_disagreements(want, replace(good, mip_bound=2.0))       # a bound above the optimum
    assert plan_disagreements(want, replace(good, optimal=False, gap=0.0, mip_bound=0.0))  # a gap that is not GPUs - bound
    assert plan_disagreements(None, good) and plan_disagreements(want, None)
    nodes = [("p", ({"1g.6gb": 4},)), ("p", ({"4g.24gb": 1},))]
    rwant = R.replan_optimum(dem, pools, nodes)
    assert rwant == (1, 0)
    cur = CurrentLayout((CurrentNode("a", "p", "c0", ({"1g.6gb": 4},), 4),
                         CurrentNode("b", "p", "c1", ({"4g.24gb": 1},), 1)))
    r = replan(dem, pools, cur)
    assert replan_disagreements(rwant, r, 0) == []
    assert replan_disagreements(rwant, replace(r, nodes_changed=("a",)), 0)   # a change "optimal"
    assert replan_disagreements(rwant, replace(r, gpus_used=2), 0)            # a GPU above the optimum
    assert replan_disagreements(rwant, replace(r, changes_bound=1.0), 0)      # a bound above the optimum
    # and the reference itself sees a changed demand: 4g.24gb twice needs the other node changed
    assert R.replan_optimum([ModelDemand("m", replicas=2, memory_gb=20)], pools, nodes) == (2, 1)


# --------------------------------------------------------------------------- baselines

@st.composite
def pinned_fleets(draw):
    """MIG pools and replica demands pinned as the fleet pins them: each to one profile of its
    pool that holds its memory (the smallest, or the user's `sharing.migProfile`)."""
    pools = [NodePool(f"p{i}", draw(st.sampled_from(GPUS)), draw(st.integers(1, 4)), draw(st.integers(1, 3)))
             for i in range(draw(st.integers(1, 2)))]
    demands = []
    for j in range(draw(st.integers(1, 4))):
        pool = draw(st.sampled_from(pools))
        gpu = get_gpu(pool.gpu)
        mem = draw(st.sampled_from(MEMS[pool.gpu]))
        held = [p for p in gpu.mig.profiles if p.is_base and p.memory_gib >= mem * float(R.GIB_PER_GB)]
        if not held:
            continue
        pin = draw(st.sampled_from(held))
        demands.append(ModelDemand(f"m{j}", replicas=draw(st.integers(0, 6)), memory_gb=mem,
                                   allowed_profiles=(pin.name,), pools=(pool.name,)))
    return pools, demands or [ModelDemand("m", replicas=1, memory_gb=5, pools=(pools[0].name,))]


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=pinned_fleets())
def test_plan_is_never_worse_than_a_baseline(case):
    pools, demands = case
    try:
        p = plan(demands, pools)
    except PlanError:
        return
    for b in p.baselines:
        if b.gpus is not None:
            assert p.gpus_used <= b.gpus, (b, p.gpus_used)


def test_a_baseline_does_not_fit_memory_more_loosely_than_the_plan():
    """A 5 GB model pinned to 2g.20gb (sharing.migProfile): 55d8461's all-1g baseline put it
    on 1g.10gb instances (2 GPUs) and "beat" the plan's 4; with the plan's memory rule it fits
    no 1g instance and gets whole GPUs."""
    pools = [NodePool("a100", "A100-80GB", 4, 2)]
    dem = [ModelDemand("small", replicas=12, memory_gb=5, allowed_profiles=("2g.20gb",), pools=("a100",))]
    p = plan(dem, pools)
    got = {b.name: b.gpus for b in p.baselines}
    assert p.gpus_used == 4 == R.fewest_gpus(dem, pools)
    assert got["all-1g"] == 12 and got["all-balanced"] == 6 and got["whole-gpu"] == 12
    # the whole-GPU baseline keeps a model's pools: pinned to the small pool, it is short there
    pools2 = [NodePool("a", "A100-80GB", 1, 1), NodePool("b", "A100-80GB", 8, 1)]
    p2 = plan([ModelDemand("m", throughput=3, throughput_per_instance={"1g.10gb": 1, "gpu": 1}, memory_gb=5,
                           pools=("a",))], pools2)
    whole = next(b for b in p2.baselines if b.name == "whole-gpu")
    assert whole.gpus == 3 and "more than the inventory" in whole.note


# --------------------------------------------------------------------------- README's bench tables

def test_bench_tables_are_written_between_markers_only(tmp_path):
    """README's planner tables are the bench's (`--write-readme`): the three sections exist,
    and writing one replaces only what is between its markers."""
    import importlib.util
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("benchlib", root / "bench" / "benchlib.py")
    benchlib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchlib)
    text = (root / "README.md").read_text()
    for name in ("planner", "planner-at-scale", "replan"):
        assert text.count(f"<!-- bench:{name} -->\n") == 1
    doc = tmp_path / "README.md"
    doc.write_text("a\n<!-- bench:t -->\n| old |\n<!-- /bench -->\nb <!-- /bench -->\n")
    benchlib.readme_section("t", "| new |\n|---|\n", doc)
    assert doc.read_text() == "a\n<!-- bench:t -->\n| new |\n|---|\n<!-- /bench -->\nb <!-- /bench -->\n"
    with pytest.raises(SystemExit):
        benchlib.readme_section("missing", "x", doc)


@pytest.fixture
def lying_solver(monkeypatch):
    """A solver that always claims one less than the solution it returns, with a bound to
    match (what highspy does sometimes when warm-started; here on every MIP run, cold too):
    a fake around the real HiGHS, since the real one cannot be made to lie on demand."""
    real = run_once

    class Lying:
        def __init__(self, info):
            self._info = info

        def __getattr__(self, name):
            if name in ("objective_function_value", "mip_dual_bound"):
                return self._info.objective_function_value - 1
            return getattr(self._info, name)

    def lie(lp, *, integer, **kw):
        status, info, sol = real(lp, integer=integer, **kw)
        if integer and sol is not None:
            return highspy.HighsModelStatus.kOptimal, Lying(info), sol
        return status, info, sol

    monkeypatch.setattr(certifying, "run_once", lie)   # run_highs' one call into the adapter


def test_a_claim_that_never_checks_out_is_reported_not_believed(lying_solver):
    """The plan keeps the real solution, is not called optimal and says why, with the true
    gap to a bound that holds."""
    case = next(c for c in CASES if c["kind"] == "plan")
    p = plan(demands_of(case), pools_of(case), baselines=False)
    assert p.gpus_used == 2 and not p.optimal                 # the solution, not the claim
    assert p.mip_bound == 1 and p.gap == pytest.approx(0.5)    # ceil of the LP bound 0.26
    assert any("claimed an optimum of" in w and "gap 50.00%" in w for w in p.warnings), p.warnings


def test_a_replan_claim_that_never_checks_out_is_reported(lying_solver):
    """Both re-plan objectives: unproven ones are said with their gap, and what the LP bound
    alone proves stays proven."""
    by = {c["name"]: c for c in CASES}
    c = by["replan-serving-fleet-changed-everywhere"]
    r = replan(demands_of(c), pools_of(c), current_of(c), **c["options"])
    assert (r.gpus_optimum, r.changes_count) == (2, 0) and not r.optimal and r.gpus_bound == 1
    assert any("fewest GPUs not proven: 2 found, bound 1 (gap 50.00%)" in w for w in r.warnings), r.warnings
    c = by["replan-budget-node-changes"]
    r = replan(demands_of(c), pools_of(c), current_of(c), **c["options"])
    assert r.optimal and (r.gpus_bound, r.changes_bound) == (4, 1)   # the LP bounds prove both


def test_a_model_with_no_demand_that_nothing_serves_needs_no_gpu():
    """Found by the reference search (seed 2958 of the plan generator): throughput 0 for a
    60 GB model with no rate on the only profile that holds it left HiGHS an empty model,
    which 55d8461 reported as "no plan satisfies the workload mix"."""
    dem = [ModelDemand("m0", throughput=0, memory_gb=60,
                       throughput_per_instance={"1g.10gb": 5, "3g.40gb": 1, "gpu": 10})]
    pools = [NodePool("p0", "A100-80GB", 2, 1)]
    assert R.fewest_gpus(dem, pools) == 0
    p = plan(dem, pools)
    assert p.gpus_used == 0 and p.optimal and p.gap == 0
