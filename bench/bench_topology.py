"""Benchmark: parse 10,000 `nvidia-smi topo -m` matrices (target: under 2 s).

Cycles through the real fixtures in tests/unit/data/topo (2 to 8 GPUs, with and without
NIC columns, tabs and spaces). Prints a Markdown table for the README.

    .venv/bin/python bench/bench_topology.py [--count 10000]
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuvalues.planners.scheduling.topology import parse_topo_matrix  # noqa: E402

TARGET_S = 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    args = ap.parse_args()
    texts = [p.read_text() for p in sorted((ROOT / "tests/unit/data/topo").glob("*.txt"))]
    inputs = list(itertools.islice(itertools.cycle(texts), args.count))
    runs = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        for text in inputs:
            parse_topo_matrix(text)
        runs.append(time.perf_counter() - start)
    median = statistics.median(runs)
    labels_start = time.perf_counter()
    for text in texts * 100:
        parse_topo_matrix(text).labels()
    labels_s = (time.perf_counter() - labels_start) / (len(texts) * 100)
    ok = median < TARGET_S
    print("| benchmark | inputs | median of %d runs | per matrix | target | result |" % args.repeat)
    print("|---|---|---|---|---|---|")
    print(f"| parse `topo -m` | {args.count} matrices ({len(texts)} real fixtures) | {median:.2f} s | "
          f"{median / args.count * 1e6:.0f} µs | < {TARGET_S:.0f} s | {'pass' if ok else 'FAIL'} |")
    print(f"| parse + labels | {len(texts) * 100} matrices | {labels_s * len(texts) * 100:.2f} s | "
          f"{labels_s * 1e6:.0f} µs | - | - |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
