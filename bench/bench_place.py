"""Benchmark `gpuvalues.planners.mig.geometry.place`: target < 1 ms per call (issue 5).

Measures a cold call (placement search, cache cleared each time) and a warm call (cached),
for layouts of every size on A100-80GB, A30 and RTX PRO 6000; prints a Markdown table.
Run: .venv/bin/python bench/bench_place.py
"""
from __future__ import annotations

import time

from gpuvalues.planners.mig import geometry as mig

CASES = [
    ("A100-80GB", {"7g.80gb": 1}),
    ("A100-80GB", {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}),
    ("A100-80GB", {"2g.20gb": 3, "1g.10gb": 1}),
    ("A100-80GB", {"1g.10gb": 7}),
    ("A100-80GB", {"4g.40gb": 1, "2g.20gb": 2}),          # infeasible: error path
    ("A100-80GB", {"1g.20gb": 3, "1g.10gb": 2}),
    ("A30", {"2g.12gb": 1, "1g.6gb": 2}),
    ("RTX-PRO-6000", {"1g.24gb+gfx": 2, "2g.48gb-me": 1}),
]


def timed(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    rows = []
    for gpu, counts in CASES:
        def call(gpu=gpu, counts=counts):
            try:
                mig.place(gpu, counts)
            except Exception:
                pass

        def cold(gpu=gpu, counts=counts):
            mig._place_cached.cache_clear()
            call()

        call()  # load the catalog
        rows.append((gpu, "+".join(f"{v}x{k}" for k, v in counts.items()), timed(cold, 2000), timed(call, 20000)))
    print("| GPU | profiles | place() cold (us) | place() cached (us) |")
    print("|---|---|---:|---:|")
    for gpu, label, c, w in rows:
        print(f"| {gpu} | {label} | {c:.1f} | {w:.1f} |")
    worst = max(r[2] for r in rows)
    print(f"\nworst cold call: {worst:.1f} us (target < 1000 us): {'PASS' if worst < 1000 else 'FAIL'}")


if __name__ == "__main__":
    main()
