"""Benchmark `replan.replan` (issue 17): re-plan after a load change with the fewest node changes.

Fleet and mix: bench_planner's 10-model mix on 4,096 GPUs (half A100-80GB, half H100-80GB-SXM,
8 per node). The current layout is the optimal plan at the base demand, put on named nodes.
For each model, its demand rises 5% (replicas: ceil(1.05 r); throughput x 1.05) and the
fleet is re-planned. Columns: GPUs after (fewest possible), nodes changed by `replan` (its
LP bound, and whether HiGHS proved the minimum: the exact minimum under the first
objective), and nodes whose config a plan from scratch would change (the issue's 2-151 GPU /
2-19 node re-layouts).

Targets: every replan < 2 s; changes equal to the proven minimum on all ten.
With `--write-readme` the README's re-plan table (between `<!-- bench:replan -->` and
`<!-- /bench -->`) is written from this run. Run: .venv/bin/python bench/bench_replan.py [--write-readme]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace

from bench_planner import fleet, mix
from benchlib import readme_section
from gpuvalues.planners.mig.milp.plan import plan
from gpuvalues.planners.mig.replan import replan
from gpuvalues.planners.mig.replan import CurrentLayout, CurrentNode


def current_from(p, pools) -> CurrentLayout:
    """The plan's node groups on named nodes (pool-node-<i>), as a running fleet would have them."""
    nodes = []
    for pp in p.pools:
        i = 0
        for ng in pp.node_groups:
            for _ in range(ng.count):
                i += 1
                gpus = tuple(dict(d) if d is not None else {} for d in ng.devices)
                nodes.append(CurrentNode(f"{pp.pool.name}-node-{i}", pp.pool.name, ng.config_name, gpus,
                                         pods=sum(sum(d.values()) for d in gpus)))
    return CurrentLayout(tuple(nodes))


def changed_from_scratch(before, after) -> int:
    """Nodes whose devices differ when a from-scratch plan is laid on the same nodes in order."""
    def per_node(p):
        out = []
        for pp in p.pools:
            for ng in pp.node_groups:
                out += [(pp.pool.name, ng.devices)] * ng.count
        return out
    a, b = per_node(before), per_node(after)
    b += [None] * (len(a) - len(b))
    return sum(1 for x, y in zip(a, b) if x != y) + max(0, len(b) - len(a))


def main() -> str:
    """Print the re-plan table; return README's version of it."""
    readme = []
    n = 4096
    pools = fleet(n)
    base = mix(n / 16)
    before = plan(base, pools, baselines=False)
    cur = current_from(before, pools)
    print(f"current: {before.gpus_used} GPUs on {len(cur.nodes)} configured nodes of {n // 8}")
    print("| +5% on | GPUs after (fewest) | nodes changed | of them drained | LP bound | proven minimum | "
          "replan (ms) | plan from scratch: nodes changed |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    ok = True
    for i, d in enumerate(base):
        bumped = replace(d, replicas=math.ceil(d.replicas * 1.05)) if d.replicas is not None \
            else replace(d, throughput=d.throughput * 1.05)
        demands = base[:i] + [bumped] + base[i + 1:]
        t0 = time.perf_counter()
        r = replan(demands, pools, cur)
        ms = (time.perf_counter() - t0) * 1000
        scratch = changed_from_scratch(before, plan(demands, pools, baselines=False))
        ok &= r.optimal and ms < 2000
        print(f"| {d.name} | {r.gpus_used} ({r.gpus_optimum}) | {r.changes_count} | {len(r.nodes_drained)} | "
              f"{r.changes_lp_bound:.1f} | "
              f"{'yes' if r.optimal else 'no'} | {ms:.0f} | {scratch} |")
        readme.append(f"| {d.name} | {r.gpus_used:,} | {r.changes_count} | {len(r.nodes_drained)} | "
                      f"{r.changes_lp_bound:.1f} | {ms / 1000:.2f} s{'' if r.optimal else ' (not proven)'} | {scratch} |")
    print(f"\nreplan < 2 s and changes proven minimal on all ten: {'PASS' if ok else 'FAIL'}")
    return ("| +5% on | GPUs (fewest) | nodes changed | drained | LP bound | replan() | plan from scratch: nodes changed |\n"
            "|---|---:|---:|---:|---:|---:|---:|\n" + "\n".join(readme))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-readme", action="store_true", help="write README's re-plan table from this run")
    args = ap.parse_args()
    table = main()
    if args.write_readme:
        readme_section("replan", table)
        print("README: re-plan table written", file=sys.stderr)
