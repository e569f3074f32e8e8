"""Capacity: with too few GPUs the extra pods stay Pending with the scheduler's
"Insufficient nvidia.com/..." reason, and `gpuvalues fit` predicted exactly that.

Expected numbers are hand-computed from tests/e2e/hardware.yaml (the generated fleet):
- 8-GPU pods restricted to A100 + NV8: only dgx-a100-0 and dgx-a100-1 qualify, 8 GPUs each,
  so 3 replicas -> 2 Running (one per node), 1 Pending on nvidia.com/gpu.
- 1g.10gb MIG pods: only mig-a100-0 advertises nvidia.com/mig-1g.10gb (14 of them), so
  16 replicas -> 14 Running there, 2 Pending on nvidia.com/mig-1g.10gb.
"""
from __future__ import annotations

import collections

import pytest

from gpuvalues.planners.scheduling.fit import fit
from tests.e2e import e2elib
from tests.e2e.e2elib import CHART

CASES = {
    "whole-8gpu-nv8": dict(
        values={"gpu": {"mode": "whole", "count": 8}, "gpuProducts": ["NVIDIA-A100-SXM4-80GB"],
                "topology": {"values": ["NV8"]}, "autoscaling": {"engine": "none"}, "replicaCount": 3},
        resource="nvidia.com/gpu", running={"dgx-a100-0": 1, "dgx-a100-1": 1}, pending=1),
    "mig-1g.10gb": dict(
        values={"gpu": {"mode": "mig", "count": 1, "mig": {"strategy": "mixed", "profile": "1g.10gb"}},
                "resources": {"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "16Gi"}},
                "autoscaling": {"engine": "none"}, "replicaCount": 16},
        resource="nvidia.com/mig-1g.10gb", running={"mig-a100-0": 14}, pending=2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_extra_pods_pending_as_fit_predicts(kube, namespace, inventory, case):
    c = CASES[case]
    release = "cap"
    objects = e2elib.render(release, namespace, [], c["values"])
    dep = next(o for o in objects if o["kind"] == "Deployment" and e2elib.is_gpu_workload(o))
    sel = e2elib.selector_string(dep["spec"]["selector"]["matchLabels"])
    total = sum(c["running"].values()) + c["pending"]

    # The fleet is the session's: an earlier module's pods may still be terminating on these
    # nodes (a namespace deleted with --wait=false), holding the GPUs counted above. Wait
    # until none holds this resource there, so the counts below are this test's alone.
    def others_on_nodes():
        return [f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                for p in kube.json("get", "pods", "-A")["items"]
                if p["spec"].get("nodeName") in c["running"] and p["status"].get("phase") in ("Pending", "Running")
                and any(c["resource"] in (x.get("resources", {}).get("limits") or {})
                        for x in p["spec"].get("containers", []))]
    kube.wait(f"no other pod holding {c['resource']} on {sorted(c['running'])}", lambda: not others_on_nodes(),
              timeout=120)
    kube.helm("install", release, str(CHART), "-n", namespace, values=c["values"])

    def settled():
        pods = kube.pods(namespace, sel)
        ready = [p for p in pods if e2elib.pod_is_ready(p)]
        pending = [p for p in pods if e2elib.unschedulable_message(p) is not None]
        return (ready, pending) if len(pods) == total and len(ready) + len(pending) == total else None

    ready, pending = kube.wait(f"{total} pods Running or Unschedulable", settled, timeout=90)
    on_nodes = collections.Counter(p["spec"]["nodeName"] for p in ready)
    assert dict(on_nodes) == c["running"], f"Running pods per node: {dict(on_nodes)}"
    assert len(pending) == c["pending"]
    for p in pending:
        msg = e2elib.unschedulable_message(p)
        assert f"Insufficient {c['resource']}" in msg, f"{p['metadata']['name']}: {msg}"

    # gpuvalues fit on the same rendered objects and the same inventory
    report = fit(objects, inventory)
    [wl] = [w for w in report.min.workloads if w.workload.endswith("/" + dep["metadata"]["name"])]
    assert (wl.replicas, wl.scheduled, wl.pending) == (total, sum(c["running"].values()), c["pending"]), wl
    assert dict(wl.nodes) == c["running"], f"fit placed {dict(wl.nodes)}"
    assert wl.reason and f"Insufficient {c['resource']}" in wl.reason, wl.reason


def test_multi_gpu_pods_never_use_a_node_without_nvlink(kube, namespace):
    """hgx-h100-nvlink-down has the right product and 8 free GPUs but topology PCIe: the
    multi-GPU scenario's third replica (one per node, `podAntiAffinity: hard`) must stay
    Pending rather than land there. (`gpuvalues fit` does not model pod anti-affinity, so
    it is not compared here.)"""
    scenario = CHART / "ci" / "multigpu-nvlink-values.yaml"
    extra = {"autoscaling": {"engine": "none"}, "replicaCount": 3, "model": {"source": "emptyDir"}}
    values = e2elib.effective_values(scenario, extra)
    assert values["gpu"]["count"] > 1 and values["podAntiAffinity"] == "hard"
    objects = e2elib.render("nvl", namespace, [scenario], extra)
    dep = next(o for o in objects if o["kind"] == "Deployment" and e2elib.is_gpu_workload(o))
    sel = e2elib.selector_string(dep["spec"]["selector"]["matchLabels"])
    kube.helm("install", "nvl", str(CHART), "-n", namespace, "-f", str(scenario), values=extra)

    def settled():
        pods = kube.pods(namespace, sel)
        ready = [p for p in pods if e2elib.pod_is_ready(p)]
        pending = [p for p in pods if e2elib.unschedulable_message(p) is not None]
        return (ready, pending) if len(ready) + len(pending) == 3 == len(pods) else None

    ready, pending = kube.wait("3 pods Running or Unschedulable", settled, timeout=90)
    assert sorted(p["spec"]["nodeName"] for p in ready) == ["hgx-h100-0", "hgx-h100-1"]
    assert len(pending) == 1
    msg = e2elib.unschedulable_message(pending[0])
    assert "didn't match Pod's node affinity/selector" in msg, msg  # the NVLink-down node is filtered
