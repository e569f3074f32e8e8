"""Benchmark `gpuvalues.planners.autoscaling.simulate.simulate`: 7 days at a 15 s HPA sync (40,320 steps) with
3 metrics (queue, running, gpu_util) in under 1 s (issue 7).

The trace is the built-in diurnal day repeated 7 times. Each behaviour (legacy,
no-stabilization, recommended) is timed best of 3 (wall clock, and CPU time, which a busy
machine inflates less); prints a Markdown table.
Run: .venv/bin/python bench/bench_simulate.py
"""
from __future__ import annotations

import platform
import time

from gpuvalues.io.traces import load_trace
from gpuvalues.planners.autoscaling.capacity import recommended_behavior
from gpuvalues.planners.autoscaling.simulate import NO_STABILIZATION, SimConfig, SimMetric, Trace, simulate

DAY = 86_400
TARGET_S = 1.0


def week() -> Trace:
    day = load_trace("diurnal")
    times, rps = [], []
    for d in range(7):
        for t, r in zip(day.times_s, day.rps):
            if d and t == 0:
                continue  # the previous day's last point is this day's first
            times.append(t + d * DAY)
            rps.append(r)
    # end one sync before 7 x 24 h, so the replay has exactly 7 x 86,400 / 15 = 40,320 steps
    end = 7 * DAY - 15
    rps[-1] = rps[-2] + (rps[-1] - rps[-2]) * (end - times[-2]) / (times[-1] - times[-2])
    times[-1] = end
    return Trace(tuple(times), tuple(rps), "diurnal x 7")


def main() -> None:
    trace = week()
    config = SimConfig(replica_rps=10, min_replicas=2, max_replicas=30,
                       metrics=(SimMetric("queue", 10_000), SimMetric("running", 14_000),
                                SimMetric("gpu_util", 70_000)), initial_replicas=5)
    behaviors = {"legacy (no behavior)": None, "no-stabilization": NO_STABILIZATION,
                 "recommended": recommended_behavior(120)}
    print(f"7-day replay, {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}; target < {TARGET_S:g} s\n")
    print("| behavior | steps | metrics | wall, best of 3 (s) | CPU (s) | < 1 s | scale events | flaps |")
    print("|---|---:|---:|---:|---:|:---:|---:|---:|")
    for name, b in behaviors.items():
        best = cpu = float("inf")
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            r = simulate(trace, config, b, name)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        print(f"| {name} | {len(r.times_s):,} | {len(config.metrics)} | {best:.3f} | {cpu:.3f} | "
              f"{'yes' if best < TARGET_S else 'NO'} | {len(r.scale_events)} | {r.summary['flaps']} |")


if __name__ == "__main__":
    main()
