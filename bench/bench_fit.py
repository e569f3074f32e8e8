"""Benchmark: `gpuvalues fit` on 5,000 nodes x 8 GPUs and 20,000 pods (target: under 5 s).

The cluster: 5,000 nodes of 8 GPUs in four pools (NV8 / PCIe topology labels, half of
them tainted nvidia.com/gpu:NoSchedule, 2% cordoned). The release: 40 Deployments with
HPAs (min 100, max 500 replicas each -> 20,000 pods at max) asking for 1, 2, 4 or 8 GPUs,
with tolerations, nodeSelectors, required node affinity and (every fifth) one-per-node
pod anti-affinity. Both scenarios (min and max)
are simulated, as `fit` always does. Prints a Markdown table for the README.

    .venv/bin/python bench/bench_fit.py [--nodes 5000] [--pods 20000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuvalues.planners.scheduling.fit import fit  # noqa: E402
from gpuvalues.planners.scheduling.inventory import Inventory, Node, Taint  # noqa: E402

TARGET_S = 5.0
GPU = "nvidia.com/gpu"


def cluster(n: int) -> Inventory:
    nodes = []
    for i in range(n):
        pool = i % 4
        nodes.append(Node(
            name=f"gpu-{i:05d}",
            labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
                    "nvidia.com/gpu.topology": "NV8" if pool < 2 else "PCIe", "pool": f"p{pool}",
                    "topology.gpu-inference.io/nvlink-clique-size": "8" if pool < 2 else "0"},
            taints=(Taint(GPU, "NoSchedule", "present"),) if pool % 2 == 0 else (),
            capacity={GPU: 8, "cpu": 192_000, "memory": 2 * 2**40, "pods": 110},
            allocatable={GPU: 8, "cpu": 190_000, "memory": 2 * 2**40 - 2**34, "pods": 110},
            unschedulable=i % 50 == 49))
    return Inventory(tuple(nodes))


def release(pods: int, workloads: int = 40) -> list[dict]:
    objs = []
    per = pods // workloads
    for w in range(workloads):
        gpus = (1, 2, 4, 8)[w % 4]
        spec = {"containers": [{"name": "server", "image": "vllm",
                                "resources": {"limits": {GPU: gpus, "cpu": "8", "memory": "64Gi"}}}],
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
        if w % 3 == 0:
            spec["nodeSelector"] = {"pool": f"p{w % 4}"}
        if w % 3 == 1:
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.gpu-inference.io/nvlink-clique-size", "operator": "Gt", "values": ["3"]}]}]}}}
        name = f"model-{w:02d}"
        if w % 5 == 4:  # one replica per node
            spec["affinity"] = dict(spec.get("affinity") or {}, podAntiAffinity={
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}]})
        objs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ai"},
                     "spec": {"selector": {}, "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
        objs.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                     "metadata": {"name": name, "namespace": "ai"},
                     "spec": {"scaleTargetRef": {"kind": "Deployment", "name": name},
                              "minReplicas": per // 5, "maxReplicas": per}})
    return objs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    inv, objs = cluster(args.nodes), release(args.pods)
    runs = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        report = fit(objs, inv)
        runs.append(time.perf_counter() - start)
    median = statistics.median(runs)
    mx = report.max
    scheduled = sum(w.scheduled for w in mx.workloads)
    ok = median < TARGET_S
    print("| benchmark | cluster | pods (max / min) | scheduled at max | Pending at max | median of %d | target | result |"
          % args.repeat)
    print("|---|---|---|---|---|---|---|---|")
    print(f"| fit (min + max scenarios) | {args.nodes} nodes x 8 GPUs | "
          f"{sum(w.replicas for w in mx.workloads)} / {sum(w.replicas for w in report.min.workloads)} | "
          f"{scheduled} | {mx.pending} | {median:.2f} s | < {TARGET_S:.0f} s | {'pass' if ok else 'FAIL'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
