"""Shared by the benchmarks in bench/: timing a call over several runs."""
from __future__ import annotations

import statistics
import time


def timed(fn, runs: int) -> tuple[float, float]:
    """(median, spread max - min) of `fn()`'s wall time over `runs` runs, in seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times) - min(times)
