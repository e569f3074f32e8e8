"""Planner: optimality against a brute-force oracle, hand-computed cases, bounds, baselines, errors.

The oracle is independent of gpuvalues.planners.mig.geometry and gpuvalues.planners.mig.milp.model: it lists feasible MIG layouts
by walking memory slots (as in test_mig.py) and decides whether a set of GPUs can host the
replicas with Hall's condition for the transportation problem (every subset S of models needs
no more replicas than the instances usable by some model in S), trying GPU counts upward.
"""
from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuvalues import catalog
from gpuvalues.catalog import GIB_PER_GB
from gpuvalues.errors import PlanError
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import migparted
from gpuvalues.planners.mig.milp.model import ModelDemand, PlanPool
from gpuvalues.planners.mig.milp.plan import plan, sharing_plan
from tests.unit.oracles import replicas_oracle


@lru_cache(maxsize=None)
def oracle_layouts(gpu_name: str) -> tuple:
    """Maximal feasible multisets of base profiles (brute force over slot walks)."""
    gpu = catalog.get_gpu(gpu_name)
    base = [p for p in gpu.profiles if p.is_base]
    n = gpu.mig.memory_slices
    feas = set()

    def walk(slot, chosen):
        if slot >= n:
            c = Counter(chosen)
            if all(c[p.name] <= p.max_instances for p in base) and \
                    sum(gpu.profile(x).compute_slices * k for x, k in c.items()) <= gpu.mig.compute_slices:
                feas.add(tuple(sorted(c.items())))
            return
        walk(slot + 1, chosen)
        for p in base:
            if slot in p.starts and slot + p.memory_slices <= n:
                walk(slot + p.memory_slices, chosen + [p.name])

    walk(0, [])

    def plus(k, p):
        c = Counter(dict(k))
        c[p] += 1
        return tuple(sorted(c.items()))

    return tuple(k for k in feas if k and not any(plus(k, p.name) in feas for p in base))


def hall_ok(instances: Counter, demands, gpu) -> bool:
    """Can `instances` (profile -> count) host every model's replicas? (Hall's condition)"""
    def usable(d):
        # usable GiB (nvidia-smi's figure) against the model's GB, as placement fits them
        return {p for p in instances
                if d.memory_gb is None or gpu.profile(p).memory_gib >= d.memory_gb * GIB_PER_GB - 1e-9}
    for r in range(1, len(demands) + 1):
        for S in itertools.combinations(demands, r):
            need = sum(d.replicas for d in S)
            cover = set().union(*(usable(d) for d in S))
            if need > sum(instances[p] for p in cover):
                return False
    return True


def oracle_min_gpus(demands, gpu_name, cap):
    gpu = catalog.get_gpu(gpu_name)
    layouts = oracle_layouts(gpu_name)
    for n in range(0, cap + 1):
        for combo in itertools.combinations_with_replacement(layouts, n):
            inst = Counter()
            for key in combo:
                for p, c in key:
                    inst[p] += c
            if hall_ok(inst, demands, gpu):
                return n
    return None


MEM = [5, 8, 10, 15, 20, 30, 40, 60, 75]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_planner_matches_brute_force(data):
    gpu = data.draw(st.sampled_from(["A100-80GB", "A30"]))
    k = data.draw(st.integers(1, 3))
    mem = MEM if gpu == "A100-80GB" else [3, 6, 10, 12, 20, 24]
    demands = [ModelDemand(f"m{i}", replicas=data.draw(st.integers(0, 6)), memory_gb=data.draw(st.sampled_from(mem)))
               for i in range(k)]
    cap = 3
    best = oracle_min_gpus(demands, gpu, cap)
    if best is None:
        with pytest.raises(PlanError):
            plan(demands, [PlanPool("p", gpu, gpus_per_node=cap, nodes=1)], baselines=False)
        return
    p = plan(demands, [PlanPool("p", gpu, gpus_per_node=cap, nodes=1)], baselines=False)
    assert p.gpus_used == best
    assert p.optimal and p.gap == 0
    assert p.lp_bound <= best + 1e-6
    # the plan really hosts every replica on an instance with enough memory
    got = Counter()
    g = catalog.get_gpu(gpu)
    for pool in p.pools:
        for grp in pool.gpu_groups:
            for inst in grp.instances:
                if inst.model is not None:
                    d = next(d for d in demands if d.name == inst.model)
                    assert g.profile(inst.profile).memory_gib >= d.memory_gb * GIB_PER_GB - 1e-9
                    got[inst.model] += grp.count
    for d in demands:
        assert got[d.name] == d.replicas


def test_small_models_pack_seven_per_a100():
    # 14 replicas of a 4 GB model: 7 x 1g.10gb per A100-80GB -> 2 GPUs; whole GPUs need 14.
    p = plan([ModelDemand("small", replicas=14, memory_gb=4)], [PlanPool("a", "A100-80GB", 8, 2)])
    assert p.gpus_used == 2 and p.gap == 0
    base = {b.name: b.gpus for b in p.baselines}
    assert base == {"whole-gpu": 14, "all-balanced": 4, "all-1g": 2}  # balanced: 2x1g+2g+3g = 4 replicas/GPU
    assert p.pools[0].gpu_groups[0].layout.label() == "7x1g.10gb"


def test_throughput_hand_computed():
    tput = {"1g.10gb": 600, "2g.20gb": 1300, "3g.40gb": 2100, "7g.80gb": 4800}
    # 4000/s with 1g only: 7 x 600 = 4200 >= 4000 on one GPU
    p = plan([ModelDemand("bert", throughput=4000, throughput_per_instance=tput, allowed_profiles=("1g.10gb",))],
             [PlanPool("a", "A100-80GB", 8, 1)], baselines=False)
    assert p.gpus_used == 1 and p.served["bert"] >= 4000
    # 4300/s with 1g only: needs 8 instances -> 2 GPUs
    p = plan([ModelDemand("bert", throughput=4300, throughput_per_instance=tput, allowed_profiles=("1g.10gb",))],
             [PlanPool("a", "A100-80GB", 8, 1)], baselines=False)
    assert p.gpus_used == 2
    # all profiles: best per GPU is 2x3g = 4200? no: 3g+2g+2x1g = 2100+1300+1200 = 4600; 3x2g+1g = 4500;
    # 7x1g = 4200; 7g = 4800 -> 4800 covers 4700 on one GPU
    p = plan([ModelDemand("bert", throughput=4700, throughput_per_instance=tput)], [PlanPool("a", "A100-80GB", 8, 1)],
             baselines=False)
    assert p.gpus_used == 1


def test_gpu_qualified_throughput_prefers_faster_pool():
    # H100 1g is faster; qualified key wins over the generic one. 2 GPUs of A100 are not enough
    # (7 x 100 x 2 = 1400 < 1500) but one H100 is (7 x 250 = 1750).
    d = ModelDemand("m", throughput=1500, throughput_per_instance={"1g.10gb": 100, "H100-80GB-SXM/1g.10gb": 250},
                    allowed_profiles=("1g.10gb",))
    p = plan([d], [PlanPool("a", "A100-80GB", 2, 1), PlanPool("h", "NVIDIA-H100-80GB-HBM3", 1, 1)], baselines=False)
    used = {pp.pool.name: pp.gpus_used for pp in p.pools}
    assert used == {"a": 0, "h": 1}


def test_cost_objective_uses_cheaper_pool_first():
    d = [ModelDemand("m", replicas=10, memory_gb=8)]
    pools = [PlanPool("a", "A100-80GB", 1, 1), PlanPool("h", "H100-80GB-SXM", 4, 1)]
    p = plan(d, pools, objective="cost", prices={"A100-80GB": 2.0, "NVIDIA H100 80GB HBM3": 3.0})
    used = {pp.pool.name: pp.gpus_used for pp in p.pools}
    assert used == {"a": 1, "h": 1} and p.cost == 5.0   # 7 on the A100, 3 on one H100
    with pytest.raises(PlanError, match="price per GPU"):
        plan(d, pools, objective="cost")


def test_capacity_error_gives_bound():
    with pytest.raises(PlanError, match=r"need at least 3 GPUs \(LP bound\) but the pools hold 2"):
        plan([ModelDemand("m", replicas=15, memory_gb=8)], [PlanPool("a", "A100-80GB", 2, 1)])


def test_model_too_big_named():
    with pytest.raises(PlanError, match="model 'llama70b-bf16' needs 141 GB") as exc:
        plan([ModelDemand("llama70b-bf16", replicas=1, memory_gb=141)], [PlanPool("a", "A100-80GB", 8, 1)])
    assert exc.value.field == "models.llama70b-bf16"


@pytest.mark.parametrize("demand, pool, text", [
    (ModelDemand("m"), PlanPool("a", "A100-80GB"), "exactly one of replicas or throughput"),
    (ModelDemand("m", throughput=5), PlanPool("a", "A100-80GB"), "throughput_per_instance"),
    (ModelDemand("m", replicas=1), PlanPool("a", "K80"), "unknown GPU model"),
    (ModelDemand("m", replicas=1), PlanPool("a", "A100-80GB", sharing="mps"), "mig_enabled: false"),
    (ModelDemand("m", replicas=1), PlanPool("bad name!", "A100-80GB"), "label-safe"),
    (ModelDemand("m", throughput=5, throughput_per_instance={"1g.10g": 3}), PlanPool("a", "A100-80GB"),
     "'1g.10g' is not a profile of any pool's GPU"),
    (ModelDemand("m", replicas=1, excluded_profiles=("3g.20gb",)), PlanPool("a", "A100-80GB"), "not a profile"),
])
def test_bad_inputs(demand, pool, text):
    with pytest.raises(PlanError, match=text):
        plan([demand], [pool])


def test_configs_realise_the_plan():
    d = [ModelDemand("a", replicas=3, memory_gb=18), ModelDemand("b", replicas=5, memory_gb=8),
         ModelDemand("c", replicas=1, memory_gb=70)]
    p = plan(d, [PlanPool("pool-a", "A100-80GB", gpus_per_node=2, nodes=4)])
    cfg = p.mig_parted_config
    migparted.validate_mig_parted_config(cfg, gpu="A100-80GB")
    # every node group has a label selecting an existing mig-parted config
    for pp in p.pools:
        for ng in pp.node_groups:
            assert p.node_labels[ng.config_name]["nvidia.com/mig.config"] in cfg["mig-configs"]
    # instances built by the mig-parted configs (per node, times node counts) cover every replica
    built = Counter()
    for pp in p.pools:
        for ng in pp.node_groups:
            for dev in ng.devices:
                for prof, c in (dev or ()):
                    built[prof] += c * ng.count
    assigned = Counter()
    for pp in p.pools:
        for g in pp.gpu_groups:
            for i in g.instances:
                assigned[i.profile] += g.count
    assert built == assigned
    dp = p.device_plugin_configs["pool-a"]
    deviceplugin.validate_device_plugin_config(dp, mig_enabled=True)
    assert dp["flags"]["migStrategy"] == "mixed"
    json.dumps(p.to_dict())


def test_time_slicing_plan_warns_and_sizes_by_memory():
    # L4 24 GB, 6 GB models -> 4 replicas per GPU; 10 replicas -> 3 GPUs
    p = sharing_plan([ModelDemand("m", replicas=10, memory_gb=6)], "L4", "time-slicing", gpus=4, gpus_per_node=4)
    assert p.gpus_used == 3 and p.pools[0].sharing_replicas == 4
    assert any("no memory or fault isolation" in w and "OOM" in w for w in p.warnings)
    cfg = p.device_plugin_configs[p.pools[0].pool.name]
    assert cfg["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_mps_plan_respects_client_limit():
    # V100 (CC 7.0): at most 16 MPS clients even though 32 GB / 1 GB = 32
    p = sharing_plan([ModelDemand("m", replicas=20, memory_gb=1)], "V100-32GB", "mps", gpus=2, gpus_per_node=2)
    assert p.pools[0].sharing_replicas == 16 and p.gpus_used == 2
    assert any("2048 MiB (total / replicas)" in w and "at most 16 clients" in w for w in p.warnings)
    # T4 (CC 7.5): limit 48; usable memory (14.88 GiB) holds 15 x 1 GB (0.93 GiB)
    p = sharing_plan([ModelDemand("m", replicas=20, memory_gb=1)], "T4", "mps", gpus=2, gpus_per_node=2)
    assert p.pools[0].sharing_replicas == int(14.88 // (1e9 / 2**30)) == 15
    with pytest.raises(PlanError, match="exceed the limit of 16"):
        sharing_plan([ModelDemand("m", replicas=2, memory_gb=1)], "V100-32GB", "mps", gpus=1, replicas=20)


def test_sixteen_thousand_gpus_is_exact():
    # Big numbers: 100,000 replicas of a 1g model need exactly ceil(100000 / 7) = 14286 GPUs.
    p = plan([ModelDemand("m", replicas=100_000, memory_gb=5)], [PlanPool("a", "A100-80GB", 8, 2048)], baselines=False)
    assert p.gpus_used == 14286 and p.gap == 0


SPEC = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - name: a100
      gpu: NVIDIA-A100-SXM4-80GB
      gpusPerNode: 8
      nodes: 1
      mig: true
workloads:
  - name: small
    model: BAAI/bge-large-en-v1.5
    memoryGB: 4
    throughputPerReplica: 10
    load: {peak: 140}
sharing:
  mode: mig
"""


def test_cli_plan_json_and_svg(tmp_path, capsys):
    from gpuvalues import cli
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    svg = tmp_path / "layouts.svg"
    assert cli.main(["plan", str(spec), "--output", "json", "--svg", str(svg)]) == 0
    data = json.loads(capsys.readouterr().out)
    # plan sizes replicas as `values` does: M/M/c at peak x 1.2 headroom (140/s -> 168/s,
    # 10/s per replica) = 22 replicas (independent Erlang C oracle) of a 4 GB model; a
    # 1g.10gb holds it and an A100 holds 7, so ceil(22 / 7) = 4 GPUs
    replicas = replicas_oracle(140 * 1.2, 10)
    assert replicas == 22
    mig = data["mig"]
    assert mig["gpus_used"] == math.ceil(replicas / 7) == 4 and mig["gap"] == 0
    assert mig["pools"][0]["gpu_groups"][0]["layout"] == "7x1g.10gb"
    assert data["workloads"][0]["resource"] == "nvidia.com/mig-1g.10gb"
    assert "<svg" in svg.read_text() and "1g.10gb" in svg.read_text()
    assert cli.main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "slot 0" in out and "[1g.10gb]" in out and "whole-gpu" in out


def test_cli_plan_bad_input_exit_2_no_file(tmp_path, capsys):
    from gpuvalues import cli
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("NVIDIA-A100-SXM4-80GB", "NVIDIA-K80").replace("memoryGB: 4", "memoryGB: 4"))
    svg = tmp_path / "layouts.svg"
    assert cli.main(["plan", str(spec), "--svg", str(svg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown GPU model 'NVIDIA-K80'" in err
    assert not svg.exists()
    spec.write_text(SPEC.replace("memoryGB: 4", "memoryGB: 500"))
    assert cli.main(["plan", str(spec)]) == 2
    assert "needs 7 GPUs (465.66 GiB + 5% headroom)" in capsys.readouterr().err


def test_whole_pool_on_mig_gpu_turns_mig_off():
    p = plan([ModelDemand("big", replicas=3, memory_gb=70)], [PlanPool("h", "H100-80GB-SXM", 4, 1, mig_enabled=False)],
             baselines=False)
    assert p.gpus_used == 3 and p.pools[0].mode == "whole"
    entries = p.mig_parted_config["mig-configs"]["h"]
    assert entries == [{"devices": "all", "mig-enabled": False}]
    assert p.node_labels["h"] == {"nvidia.com/mig.config": "h", "nvidia.com/device-plugin.config": "h"}
    assert p.device_plugin_configs["h"] == {"version": "v1", "flags": {"migStrategy": "none",
                                                                       **deviceplugin.CONTAINER_FEATURES}}


def test_plan_warns_when_placements_are_derived():
    from gpuvalues.planners.mig.milp.model import ModelDemand, PlanPool
    from gpuvalues.planners.mig.milp.plan import plan
    demands = [ModelDemand("m", replicas=3)]
    derived = plan(demands, [PlanPool("h200", "H200-141GB", gpus_per_node=8, nodes=1)], baselines=False)
    assert any("h200" in w and "placements are derived" in w for w in derived.warnings)
    published = plan(demands, [PlanPool("a100", "A100-80GB", gpus_per_node=8, nodes=1)], baselines=False)
    assert not any("placements are derived" in w for w in published.warnings)


# --- planner at scale (issue 17): per-pool infeasibility, LP rounding, shared time limit ---

def test_pinned_pool_shortage_names_the_pool_not_the_fleet():
    # 15 replicas of an 8 GB model pinned to a 2-GPU pool (7 per A100 -> 3 GPUs); the fleet holds 10
    d = [ModelDemand("m", replicas=15, memory_gb=8, pools=("a",)), ModelDemand("n", replicas=3, memory_gb=8)]
    with pytest.raises(PlanError) as exc:
        plan(d, [PlanPool("a", "A100-80GB", 2, 1), PlanPool("b", "A100-80GB", 8, 1)])
    msg = str(exc.value)
    assert "pool 'a' (A100-80GB) needs at least 3 of its GPUs" in msg and "holds 2" in msg
    assert "only run there: m" in msg and "Binding constraint: capacity of pool a" in msg
    assert exc.value.field == "pools.a" and "hold 10" not in msg


def test_integrality_named_when_the_lp_fits():
    # two models, each half a 7g.80gb instance by throughput: the LP shares one GPU, integers cannot
    d = [ModelDemand(n, throughput=1, throughput_per_instance={"7g.80gb": 2}) for n in ("A", "B")]
    with pytest.raises(PlanError, match=r"LP relaxation does \(1.0 of 1 GPUs\): binding constraint: whole MIG "
                                         r"instances per GPU \(integrality"):
        plan(d, [PlanPool("a", "A100-80GB", 1, 1)])


@pytest.mark.parametrize("seed", range(30))
def test_infeasibility_messages_never_contradict_themselves(seed):
    import random
    import re
    rnd = random.Random(seed)
    pools = [PlanPool("a", "A100-80GB", rnd.choice([1, 2]), rnd.randint(1, 2)),
             PlanPool("h", "H100-80GB-SXM", rnd.choice([1, 2]), rnd.randint(1, 2))]
    d = [ModelDemand(f"m{i}", replicas=rnd.randint(1, 20), memory_gb=rnd.choice([4, 8, 19, 35, 60]),
                     pools=rnd.choice([None, ("a",), ("h",)])) for i in range(3)]
    try:
        plan(d, pools, baselines=False)
    except PlanError as exc:
        msg = str(exc)
        found = re.findall(r"at least (\d+) (?:GPUs|of its GPUs)[^.]*? (?:hold|holds) (\d+)", msg)
        assert found or "integrality" in msg, msg   # every message states its numbers
        for need, have in found:
            assert int(need) > int(have), msg


def test_plan_is_never_worse_than_lp_rounding_even_at_a_tiny_time_limit():
    from gpuvalues.planners.mig.milp import model as milp
    from gpuvalues.planners.mig.milp.solve import round_lp, solve_lp
    import numpy as np
    d = [ModelDemand(f"m{i}", replicas=5 + 3 * i, memory_gb=[4, 9, 19, 35][i % 4]) for i in range(12)]
    pools = [PlanPool("a", "A100-80GB", 8, 64), PlanPool("h", "H100-80GB-SXM", 8, 64)]
    model = milp.build_model(d, pools, "optimal")
    _, info, sol, cols, _ = solve_lp(model, d, [1.0, 1.0], integer=False)
    rounded = round_lp(model, d, sol, cols)
    xs = np.array([c[0] == "x" for c in cols])
    assert rounded is not None
    p = plan(d, pools, baselines=False, time_limit=0.001)
    assert p.gpus_used <= rounded[xs].sum()
    assert p.gpus_used >= math.ceil(info.objective_function_value - 1e-6)   # and never below the LP bound


def test_time_limit_is_shared_with_the_baselines():
    import time
    d = [ModelDemand(f"m{i}", replicas=5 + 3 * i, memory_gb=[4, 9, 19, 35][i % 4]) for i in range(12)]
    pools = [PlanPool("a", "A100-80GB", 8, 64), PlanPool("h", "H100-80GB-SXM", 8, 64)]
    t0 = time.perf_counter()
    p = plan(d, pools, time_limit=0.05)
    assert time.perf_counter() - t0 < 3.0   # three baselines of 30 s each before
    assert len(p.baselines) == 3
    # each baseline finished within what was left, or says the time limit stopped it
    # (which of the two depends on the machine's speed, not on the rule)
    assert all(b.gpus is not None or "time limit" in b.note for b in p.baselines), p.baselines


def test_rounding_is_a_valid_plan():
    # the rounding alone (HiGHS given no time for the MIP) still serves every model within capacity
    d = [ModelDemand(f"m{i}", replicas=3 + i, memory_gb=[4, 9, 19][i % 3]) for i in range(6)]
    pools = [PlanPool("a", "A100-80GB", 8, 4)]
    p = plan(d, pools, baselines=False, time_limit=0.001)
    for dd in d:
        assert p.served[dd.name] >= dd.replicas
    assert p.gpus_used <= 32 and sum(g.count for g in p.pools[0].gpu_groups) == p.gpus_used


def test_a_gpu_without_an_all_balanced_formula_still_gets_a_plan():
    # RTX PRO 5000: 2 compute slices, which mig-parted's all-balanced formula (7- and 4-slice
    # GPUs) does not cover; the baseline says so instead of failing the plan (an
    # AttributeError before, then a MigLayoutError)
    p = plan([ModelDemand("m", replicas=1, memory_gb=5)], [PlanPool("p", "RTX-PRO-5000", 1, 1)])
    assert p.gpus_used == 1
    balanced = next(b for b in p.baselines if b.name == "all-balanced")
    assert balanced.gpus is None and "not possible" in balanced.note and "2 compute slices" in balanced.note
