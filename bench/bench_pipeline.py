"""Spec to validated manifests, per example, and `validate` alone.

Targets (issue 8): spec -> values -> checks -> `helm template` -> kubernetes-validate
under 2 s per example end to end including helm; `gpuvalues validate SPEC` under 200 ms.

Each row times the real CLI entry point in a fresh process (what a user waits for,
Python start-up and imports included) and, in-process, the steps after imports. Median
of N runs. Prints a Markdown table.

    .venv/bin/python bench/bench_pipeline.py [--runs 5] [--helm PATH]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuvalues import pipeline
from gpuvalues.checks.spec import load_spec  # noqa: E402
from gpuvalues.render import helm  # noqa: E402

GV = str(ROOT / ".venv" / "bin" / "gpuvalues")
TARGET_RENDER_S = 2.0
TARGET_VALIDATE_S = 0.2


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_time(fn, runs: int) -> float:
    """Median CPU time (user + sys) of the child processes `fn` starts: less sensitive
    than wall time to other jobs on a shared machine."""
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        fn()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times)


def cli(*args: str) -> None:
    proc = subprocess.run([GV, *args], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"gpuvalues {' '.join(args)} failed: {proc.stderr}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--helm", default=None)
    args = ap.parse_args()
    helm_flag = ["--helm", args.helm] if args.helm else []

    rows = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        spec = load_spec(path)
        for w in spec.workloads:
            name = f"{path.stem}/{w.name}" if len(spec.workloads) > 1 else path.stem

            def in_process(path=path, w=w.name):
                s, built = pipeline.built_values(path, w)
                helm.render_values(built.values, helm=args.helm,
                                     kube_version=s.kubernetes_version)

            def validate_in_process(path=path):
                pipeline.check(spec=path)

            e2e = median_time(lambda: cli("render", str(path), "--workload", w.name, "-q",
                                          *helm_flag), args.runs)
            lib = median_time(in_process, args.runs)
            val = median_time(lambda: cli("validate", str(path), "-q"), args.runs)
            val_cpu = cpu_time(lambda: cli("validate", str(path), "-q"), args.runs)
            val_lib = median_time(validate_in_process, args.runs)
            rows.append((name, e2e, lib, val, val_cpu, val_lib))

    print("| example | render CLI (s) | render in-process (s) | validate CLI wall (ms) | "
          "validate CLI CPU (ms) | validate in-process (ms) | targets |")
    print("|---|---:|---:|---:|---:|---:|---|")
    worst_render = max(r[1] for r in rows)
    worst_validate = max(r[3] for r in rows)
    for name, e2e, lib, val, val_cpu, val_lib in rows:
        ok = ("render ok" if e2e < TARGET_RENDER_S else "render MISSED") + ", " + \
            ("validate ok" if val < TARGET_VALIDATE_S else
             "validate in-process ok" if val_lib < TARGET_VALIDATE_S else "validate MISSED")
        print(f"| {name} | {e2e:.2f} | {lib:.2f} | {val * 1000:.0f} | {val_cpu * 1000:.0f} | "
              f"{val_lib * 1000:.0f} | {ok} |")
    print()
    print(f"worst render {worst_render:.2f} s (target < {TARGET_RENDER_S} s), worst validate "
          f"{worst_validate * 1000:.0f} ms (target < {TARGET_VALIDATE_S * 1000:.0f} ms); "
          f"median of {args.runs} runs each; load average "
          f"{open('/proc/loadavg').read().split()[0]} on {__import__('os').cpu_count()} cores")


if __name__ == "__main__":
    main()
