"""Benchmark: `gpuvalues inventory` on 5,000 nodes x 8 GPUs (target: under 1 s).

Three inputs of the same cluster (bench_fit.py's: four pools, taints, 2% cordoned): our
inventory YAML, `kubectl get nodes -o json`, and the CLI end to end (`inventory
--inventory nodes.json -o out.yaml`, a subprocess, interpreter start included). Also the
YAML dump alone: the fast path and PyYAML's pure-Python emitter (the old path).
Prints a Markdown table with the median of --runs runs and the spread (max - min).

    .venv/bin/python bench/bench_inventory.py [--nodes 5000] [--runs 5]
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
from gpuvalues import yamlio  # noqa: E402
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    inv = cluster(args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        ours = Path(tmp) / "inventory.yaml"
        ours.write_text(yamlio.dump(inv.to_dict()))
        kubectl = Path(tmp) / "nodes.json"
        kubectl.write_text(json.dumps(kubectl_json(inv)))
        out = Path(tmp) / "out.yaml"
        data = inv.to_dict()
        assert yamlio.dump(data) == yamlio.dump(data, dumper=yaml.SafeDumper), "emitters differ"
        gv = str(ROOT / ".venv" / "bin" / "gpuvalues")
        rows = [
            ("dump, fast path (yamlio._fast_dump)", timed(lambda: yamlio.dump(data), args.runs)),
            ("dump, pure-Python emitter (before)",
             timed(lambda: yamlio.dump(data, dumper=yaml.SafeDumper), max(1, args.runs // 2))),
            ("load our YAML + dump", timed(lambda: yamlio.dump(load_inventory(ours).to_dict()), args.runs)),
            ("load kubectl JSON + dump", timed(lambda: yamlio.dump(load_inventory(kubectl).to_dict()), args.runs)),
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
