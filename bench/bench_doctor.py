"""Benchmark: `gpuvalues doctor` on a 5,000-node dump (target: under 5 s; issue 27).

The dump is the e2e cluster's (tests/unit/data/doctor/healthy, written by `doctor
--dump-to` from tests/e2e/test_doctor.py) grown to N nodes: each GPU node of the fixture is
copied, with its node agents' pods (NFD worker, GFD, device plugin, DCGM exporter), to
N - 1 nodes split between the pools as the fixture's are, the spec's node pools resized to
match, and each workload's pods and HPA scaled to fill its pool's GPUs. One node in 50 gets
a broken device-plugin config label, so the report has findings to build. Timed: reading
the dump folder (`load_dump`, 100+ MB of JSON) and `diagnose`, in-process, and the whole
command (`gpuvalues doctor SPEC --dump DIR`: Python start-up, the fleet, the reading and the
checks), each as wall and CPU time (the shared cores make the wall time mostly waiting).
Also timed: CPython's json.loads of the dump with the cyclic collector on and paused
(`operations.doctor.paused_gc`, the fix of the 4x slow decoding). Prints a Markdown table;
`--write-readme` writes it into README (between `<!-- bench:doctor -->` and `<!-- /bench -->`).

    .venv/bin/python bench/bench_doctor.py [--nodes 5000] [--runs 3] [--write-readme]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


FIXTURE = ROOT / "tests" / "unit" / "data" / "doctor" / "healthy"
SPEC = ROOT / "examples" / "time-slicing-renamed-and-not.yaml"
TARGET_S = 5.0
GROUP = "gpu-inference.io/node-group"
POOL = "gpu-inference.io/node-pool"


def grow(n: int, out: Path) -> tuple[Path, Path, int, int]:
    """Write a spec and a dump of about `n` nodes into `out`; returns (spec, dump, nodes, pods)."""
    items = json.loads((FIXTURE / "cluster.json").read_text())["items"]
    nodes = [o for o in items if o["kind"] == "Node" and GROUP in o["metadata"]["labels"]]
    others = [o for o in items if not (o["kind"] == "Node" and GROUP in o["metadata"]["labels"])]
    agent_pods = {}      # node -> its DaemonSet pods
    for o in items:
        if o["kind"] == "Pod" and any(r.get("kind") == "DaemonSet" for r in o["metadata"].get("ownerReferences") or ()):
            agent_pods.setdefault(o["spec"].get("nodeName"), []).append(o)
    per_pool = {}
    for node in nodes:
        per_pool.setdefault(node["metadata"]["labels"][POOL], []).append(node)
    gpu_nodes = n - (len([o for o in items if o["kind"] == "Node"]) - len(nodes))
    share = {p: max(1, gpu_nodes * len(v) // len(nodes)) for p, v in per_pool.items()}
    new = []
    k = 0
    for pool, templates in per_pool.items():
        for i in range(share[pool]):
            t = templates[i % len(templates)]
            node = copy.deepcopy(t)
            name = f"{pool}-{i}"
            node["metadata"]["name"] = name
            node["metadata"]["labels"]["kubernetes.io/hostname"] = name
            if k % 50 == 49:
                node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "wrong"
            k += 1
            new.append(node)
            for p in agent_pods.get(t["metadata"]["name"], ()):
                pod = copy.deepcopy(p)
                pod["metadata"]["name"] = f"{p['metadata']['name'].rsplit('-', 1)[0]}-{name}"
                pod["spec"]["nodeName"] = name
                new.append(pod)
    others = [o for o in others if not (o["kind"] == "Pod" and o["spec"].get("nodeName") in agent_pods
                                        and any(r.get("kind") == "DaemonSet" for r in o["metadata"].get("ownerReferences") or ()))]
    # workload pods: copies of each workload's Running pods, up to its pool's GPUs
    spec_doc = yaml.safe_load(SPEC.read_text())
    for p in spec_doc["cluster"]["nodePools"]:
        p["nodes"] = share[p["name"]]
    workload_pods = [o for o in others if o["kind"] == "Pod" and o["status"].get("phase") == "Running"
                     and "nvidia.com/" in json.dumps(o["spec"].get("containers"))]
    for w in workload_pods:
        for j in range(20):
            pod = copy.deepcopy(w)
            pod["metadata"]["name"] += f"-x{j}"
            others.append(pod)
    spec_path = out / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec_doc))
    dump = out / "dump"
    dump.mkdir()
    all_items = others + new
    (dump / "cluster.json").write_text(json.dumps({"kind": "List", "items": all_items}))
    (dump / "prometheus-series.json").write_text((FIXTURE / "prometheus-series.json").read_text())
    pods = sum(o["kind"] == "Pod" for o in all_items)
    return spec_path, dump, sum(o["kind"] == "Node" for o in all_items), pods


def _cpu_timed(fn, runs: int) -> tuple[float, float]:
    """(median wall, median CPU of this process) of `fn()` over `runs` runs, in seconds: on
    the shared cores the wall time is mostly waiting for a core, the CPU time is the work."""
    walls, cpus = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write-readme", action="store_true", help="write README's doctor table from this run")
    args = ap.parse_args()
    import gpuvalues
    from gpuvalues.io.snapshot import load_dump
    from gpuvalues.operations.doctor import diagnose, paused_gc

    with tempfile.TemporaryDirectory() as tmp:
        spec, dump, n_nodes, n_pods = grow(args.nodes, Path(tmp))
        size = (dump / "cluster.json").stat().st_size / 2**20
        fleet = gpuvalues.build_fleet(gpuvalues.load_spec(spec))
        read_s, read_cpu = _cpu_timed(lambda: load_dump(dump), args.runs)
        held = [load_dump(dump)]
        diag_s, diag_cpu = _cpu_timed(lambda: diagnose(fleet, held[0]), args.runs)
        report = diagnose(fleet, held[0])
        held.clear()            # the decodings below start from the same small heap as load_dump
        text = [(dump / "cluster.json").read_text()]
        json_s, json_cpu = _cpu_timed(lambda: json.loads(text[0]), args.runs)   # the collector on: before the fix

        def quiet():
            with paused_gc():
                json.loads(text[0])
        json_paused_s, json_paused_cpu = _cpu_timed(quiet, args.runs)
        text.clear()
        walls, cpus = [], []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "gpuvalues.cli", "--output", "json", "doctor", str(spec),
                                  "--dump", str(dump)], capture_output=True, text=True)
            walls.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            assert res.returncode == 1, res.stderr[-500:]
        cmd_s, cmd_cpu = statistics.median(walls), statistics.median(cpus)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    load = os.getloadavg()[0]
    lines = ["| nodes | pods | dump | findings | load_dump | json.loads, collector on / paused | diagnose "
             "| command | peak RSS | target |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| {n_nodes:,} | {n_pods:,} | {size:.0f} MB | {len(report.findings)} | {read_s:.2f} s ({read_cpu:.2f} s CPU) "
             f"| {json_cpu:.2f} s / {json_paused_cpu:.2f} s CPU | {diag_s:.2f} s ({diag_cpu:.2f} s CPU) "
             f"| {cmd_s:.2f} s ({cmd_cpu:.2f} s CPU) | {rss:.0f} MB | < {TARGET_S:g} s |",
             "",
             f"Median of {args.runs} runs, wall (CPU) seconds, {time.strftime('%Y-%m-%d')}, load average {load:.1f} "
             "on the 2 shared cores (`bench/bench_doctor.py`)."]
    print("\n".join(lines))
    if args.write_readme:
        from bench.benchlib import readme_section
        readme_section("doctor", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
