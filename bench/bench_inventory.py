"""Benchmark: `gpuvalues inventory` on 5,000 nodes x 8 GPUs (target: under 1 s), and on
hostile sizes (issue 25; target: 50 MB in under 10 s and 500 MB RSS).

Three inputs of the same cluster (bench_fit.py's: four pools, taints, 2% cordoned): our
inventory YAML, `kubectl get nodes -o json`, and the CLI end to end (`inventory
--inventory nodes.json -o out.yaml`, a subprocess, interpreter start included). Also the
YAML dump alone: the fast path and PyYAML's pure-Python emitter (the old path).
Prints a Markdown table with the median of --runs runs and the spread (max - min).

The second table: `kubectl get nodes -o json` of real-looking nodes (about 18 KB each:
70 labels, annotations, managedFields, 20 images, conditions) up to --big-mb, read by
the CLI in a fresh process (wall time and peak RSS of that process); a YAML inventory at
the 4 MiB limit; a 50 MB YAML one (refused); and 10,001 nodes (refused).

    .venv/bin/python bench/bench_inventory.py [--nodes 5000] [--runs 5] [--big-mb 50]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_fit import cluster  # noqa: E402

from benchlib import timed  # noqa: E402
from gpuvalues.yamlio.writer import dump  # noqa: E402
from gpuvalues.io.cluster import load_inventory  # noqa: E402

TARGET_S = 1.0


def kubectl_json(inv) -> dict:
    items = []
    for n in inv.nodes:
        items.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": n.name, "labels": dict(n.labels)},
                      "spec": {"unschedulable": True} if n.unschedulable else
                      {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints]},
                      "status": {"capacity": {k: str(v) for k, v in n.capacity.items()},
                                 "allocatable": {k: str(v) for k, v in n.allocatable.items()}}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def real_node(i: int) -> dict:
    """A Node as kubectl prints it on a GPU cluster with NFD: about 18 KB of JSON."""
    labels = {"kubernetes.io/hostname": f"gpu-node-{i}", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
              "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920", "nvidia.com/mig.capable": "true",
              "topology.kubernetes.io/zone": "us-east-1a", "node.kubernetes.io/instance-type": "p4d.24xlarge"}
    labels.update({f"feature.node.kubernetes.io/cpu-cpuid.F{j}": "true" for j in range(60)})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"gpu-node-{i}", "labels": labels,
                         "annotations": {f"a{j}": "x" * 40 for j in range(10)},
                         "managedFields": [{"manager": "kubelet", "operation": "Update",
                                            "fieldsV1": {f"f:{k}": {} for k in labels}} for _ in range(3)]},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "96", "memory": "1176Gi", "nvidia.com/gpu": "8", "pods": "110"},
                       "allocatable": {"cpu": "95", "memory": "1170Gi", "nvidia.com/gpu": "8", "pods": "110"},
                       "images": [{"names": [f"registry.example.com/img{j}@sha256:" + "a" * 64],
                                   "sizeBytes": 123456789} for j in range(20)],
                       "conditions": [{"type": t, "status": "False", "reason": "KubeletHasSufficient",
                                       "message": "x" * 60} for t in "ABCDE"]}}


_PEAK = ("import resource, subprocess, sys, time; t = time.monotonic(); "
         "p = subprocess.run(sys.argv[1:], capture_output=True); "
         "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")


def peak(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit code) of `argv` in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _PEAK, *argv], capture_output=True, text=True, check=True)
    secs, kb, rc = out.stdout.split()
    return float(secs), int(kb) / 1024, int(rc)


def hostile(gv: str, big_mb: int, tmp: Path) -> None:
    per = len(json.dumps(real_node(0)))
    n = big_mb * 10 ** 6 // per
    big = tmp / "big.json"
    big.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [real_node(i) for i in range(n)]}))
    limit = tmp / "limit.yaml"
    inv = cluster(8000)
    text = dump(inv.to_dict())
    while len(text) > 4 * 2 ** 20:
        inv = type(inv)(inv.nodes[: len(inv.nodes) * 9 // 10])
        text = dump(inv.to_dict())
    limit.write_text(text)
    huge_yaml = tmp / "huge.yaml"
    huge_yaml.write_text(text * (big_mb * 10 ** 6 // len(text) + 1))
    many = tmp / "many.json"
    many.write_text(json.dumps({"kind": "List", "items": [{"kind": "Node", "metadata": {"name": f"n{i}"}}
                                                            for i in range(10_001)]}))
    rows = [(f"kubectl JSON, {n:,} nodes, {big.stat().st_size / 1e6:.0f} MB", big),
            (f"our YAML at the 4 MiB limit, {len(inv.nodes):,} nodes", limit),
            (f"YAML of {huge_yaml.stat().st_size / 1e6:.0f} MB (refused)", huge_yaml),
            ("10,001 nodes (refused)", many)]
    print("\n| hostile inventory | exit | wall | peak RSS |")
    print("|---|---:|---:|---:|")
    worst = (0.0, 0.0)
    for name, path in rows:
        secs, mb, rc = peak([gv, "inventory", "--inventory", str(path), "-o", str(tmp / "out.json")])
        worst = max(worst, (secs, mb)) if "kubectl" in name else worst
        print(f"| {name} | {rc} | {secs:.2f} s | {mb:.0f} MB |")
    print(f"\ntarget: {big_mb} MB under 10 s and 500 MB: {'met' if worst[0] < 10 and worst[1] < 500 else 'MISSED'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--big-mb", type=int, default=50)
    ap.add_argument("--only-hostile", action="store_true", help="just the second table")
    args = ap.parse_args()
    if args.only_hostile:
        with tempfile.TemporaryDirectory() as tmp:
            hostile(str(ROOT / ".venv" / "bin" / "gpuvalues"), args.big_mb, Path(tmp))
        return 0
    inv = cluster(args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        ours = Path(tmp) / "inventory.yaml"
        ours.write_text(dump(inv.to_dict()))
        kubectl = Path(tmp) / "nodes.json"
        kubectl.write_text(json.dumps(kubectl_json(inv)))
        out = Path(tmp) / "out.yaml"
        data = inv.to_dict()
        assert dump(data) == dump(data, dumper=yaml.SafeDumper), "emitters differ"
        gv = str(ROOT / ".venv" / "bin" / "gpuvalues")
        rows = [
            ("dump, fast path (yaml_writer._fast_dump)", timed(lambda: dump(data), args.runs)),
            ("dump, pure-Python emitter (before)",
             timed(lambda: dump(data, dumper=yaml.SafeDumper), max(1, args.runs // 2))),
            ("load our YAML + dump", timed(lambda: dump(load_inventory(ours).to_dict()), args.runs)),
            ("load kubectl JSON + dump", timed(lambda: dump(load_inventory(kubectl).to_dict()), args.runs)),
            ("CLI `inventory --inventory nodes.json -o out.yaml`",
             timed(lambda: subprocess.run([gv, "inventory", "--inventory", str(kubectl), "-o", str(out)],
                                          check=True, capture_output=True), args.runs)),
        ]
    print(f"| {args.nodes:,} nodes | median | spread (max-min) |")
    print("|---|---:|---:|")
    for name, (med, spread) in rows:
        print(f"| {name} | {med * 1000:,.0f} ms | {spread * 1000:,.0f} ms |")
    worst = rows[-1][1][0]
    print(f"\ntarget: CLI under {TARGET_S:.0f} s: {'met' if worst < TARGET_S else 'MISSED'}")
    with tempfile.TemporaryDirectory() as tmp:
        hostile(gv, args.big_mb, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
