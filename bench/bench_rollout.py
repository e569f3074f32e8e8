"""Benchmark `rollout.plan_waves` (issue 24): wave planning for large MIG rollouts.

Fleet: P pools of 256 nodes, every node changed. Each pool runs 8 workloads, each with a
PodDisruptionBudget allowing 1 or 2 disruptions; a node hosts 0-3 GPU pods of 1-3 of its
pool's workloads (seeded, deterministic), plus pods without a budget. Rows: 4,096, 16,384
and 65,536 node changes, with `max_unavailable_per_pool` 1 (the default) and 8.

"scan" is the planner before issue 24 (each wave rescans every remaining node: quadratic),
copied here as it was; it is timed only where it finishes in reasonable time, and the two
must give the same waves (checked on every row where both run).

Target: 16,384 node changes planned in < 2 s (the scan took 107 s there). Last line: the
time `load_replan` takes to read and check a re-plan file of 16,384 changes.
Run: .venv/bin/python bench/bench_rollout.py [--scan-up-to N]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from collections import Counter

import sys
from pathlib import Path

from benchlib import timed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuvalues.operations.rollout import NodeChange, load_replan, plan_waves
from tests.unit.test_rollout import scan_waves_reference  # the old planner, one copy


def fleet(n_nodes: int, seed: int = 24):
    rng = random.Random(seed)
    changes, pods, allowance = [], {}, {}
    for p in range(n_nodes // 256):
        pool = f"pool-{p:03d}"
        budgets = [f"ns-{p}/w{w}" for w in range(8)]
        for b in budgets:
            allowance[b] = rng.choice((1, 2))
        for i in range(256):
            node = f"{pool}-node-{i:03d}"
            changes.append(NodeChange(node, pool, "all-1g", "mixed", {"nvidia.com/mig-3g.40gb": 2}))
            mine = Counter()
            for b in rng.sample(budgets, rng.randint(1, 3)):
                if (k := rng.randint(0, 3)):
                    mine[b] += k
            if rng.random() < 0.3:
                mine[f"ns-{p}/(no budget)"] += 1
            pods[node] = dict(mine)
    return changes, pods, allowance


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scan-up-to", type=int, default=4096, help="time the old scan up to this many nodes")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print("| node changes | max per pool | waves | plan_waves() | old scan |")
    print("|---:|---:|---:|---:|---:|")
    for n in (4096, 16384, 65536):
        changes, pods, allowance = fleet(n)
        for k in (1, 8):
            result = []
            t, _ = timed(lambda: result.append(plan_waves(changes, pods, allowance, max_unavailable_per_pool=k)),
                         args.runs)
            waves = result[-1]
            old = "-"
            if n <= args.scan_up_to:
                ref = []
                ts, _ = timed(lambda: ref.append(scan_waves_reference(changes, pods, allowance, k)), 1)
                assert [[c.node for c in w.changes] for w in waves] == ref[-1], "waves differ from the scan"
                old = f"{ts:.2f} s"
            print(f"| {n:,} | {k} | {len(waves):,} | {t:.3f} s | {old} |", flush=True)
    # one budget shared by every node, each node 1..A of its pods: partly used waves everywhere
    # (the case a per-wave rescan of partly used budgets made take 150-250 s)
    print("\n| one budget over 16,384 nodes | pools | waves | plan_waves() |\n|---|---:|---:|---:|")
    rng = random.Random(1)
    for pools, allow in ((16384, 5), (64, 50), (1, 3)):
        ch = [NodeChange(f"n{i}", f"p{i % pools}", "a", "b", {}) for i in range(16384)]
        pods = {c.node: {"ns/b": rng.randint(1, allow)} for c in ch}
        result = []
        t, _ = timed(lambda: result.append(plan_waves(ch, pods, {"ns/b": allow}, max_unavailable_per_pool=4)),
                     args.runs)
        print(f"| allowance {allow}, max 4 per pool | {pools:,} | {len(result[-1]):,} | {t:.3f} s |", flush=True)
    # reading and checking a re-plan file of 16,384 changes (what `rollout` does first)
    changes, _, _ = fleet(16384)
    data = {"changes": [{"node": c.node, "from": c.from_config, "to": c.to} for c in changes],
            "node_configs": {c.node: c.to for c in changes},
            "plan": {"pools": [{"name": f"pool-{p:03d}", "node_groups": [
                {"config": "mixed", "count": 256, "devices": [{"3g.40gb": 2, "1g.10gb": 1}] * 8}]}
                for p in range(64)], "mig_parted_config": None}}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "replan.json")
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
        t, _ = timed(lambda: load_replan(path), args.runs)
        print(f"\nload_replan: {len(changes):,} changes ({os.path.getsize(path) / 1e6:.1f} MB JSON) "
              f"read and checked in {t:.2f} s")


if __name__ == "__main__":
    main()
