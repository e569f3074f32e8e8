"""Faults, as the seed's self-healing section expects, on isolated node pools:
- `kubectl drain` evicts through the chart's PodDisruptionBudget: never below the allowed
  availability, the drain waits while the budget is exhausted, and pods come back on other
  matching GPU nodes;
- a GPU node whose allocatable GPUs drop (the device plugin reports a failed GPU) gets no
  new GPU pods;
- a deleted node's pods are recreated elsewhere, or stay Pending with a clear reason.
"""
from __future__ import annotations

import json
import subprocess
import time

from tests.e2e import e2elib
from tests.e2e.conftest import POOL
from tests.e2e.e2elib import CHART


def pool_values(pool: str, replicas: int, anti: str = "hard") -> dict:
    return {"gpu": {"mode": "whole", "count": 1}, "nodeSelector": {POOL: pool},
            "autoscaling": {"engine": "none"}, "replicaCount": replicas, "podAntiAffinity": anti,
            "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}}


def _install(kube, namespace, release, values) -> str:
    objects = e2elib.render(release, namespace, [], values)
    dep = next(o for o in objects if o["kind"] == "Deployment" and e2elib.is_gpu_workload(o))
    kube.helm("install", release, str(CHART), "-n", namespace, values=values)
    return e2elib.selector_string(dep["spec"]["selector"]["matchLabels"]), dep["metadata"]["name"]


def _state(kube, namespace, sel):
    pods = [p for p in kube.pods(namespace, sel) if not p["metadata"].get("deletionTimestamp")]
    ready = sorted(p["spec"]["nodeName"] for p in pods if e2elib.pod_is_ready(p))
    pending = [p for p in pods if e2elib.unschedulable_message(p) is not None]
    return ready, pending


def _drain(kube, node, timeout="60s"):
    return [str(e2elib.ROOT / ".tools" / "bin" / "kubectl"), f"--kubeconfig={kube.cluster.kubeconfig}",
            "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={timeout}"]


def test_drain_evicts_through_pdb_and_pods_return(kube, namespace, pool):
    nodes = pool("drain", [1, 1, 1])
    sel, _ = _install(kube, namespace, "drain", pool_values("drain", 2))
    ready = kube.wait("2 Ready pods", lambda: _state(kube, namespace, sel)[0] if len(
        _state(kube, namespace, sel)[0]) == 2 else None)
    busy = list(ready)
    [free] = [n for n in nodes if n not in busy]

    # 1. Drain a node holding a pod: the eviction passes the PDB, the pod comes back on the
    #    free GPU node of the pool.
    res = subprocess.run(_drain(kube, busy[0]), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    kube.wait("pods back on matching nodes", lambda: _state(kube, namespace, sel)[0] == sorted([busy[1], free]))

    # 2. Drain the second: evicted; the replacement has nowhere to go (1 GPU per node, one
    #    replica per node, the first node cordoned) and stays Pending.
    res = subprocess.run(_drain(kube, busy[1]), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    kube.wait("1 Ready + 1 Pending", lambda: (lambda r, p: len(r) == 1 and len(p) == 1)(*_state(kube, namespace, sel)))
    pdb = next(p for p in kube.json("get", "pdb", "-n", namespace)["items"])
    kube.wait("PDB allows no disruption", lambda: kube.json("get", "pdb", pdb["metadata"]["name"], "-n", namespace)
              ["status"].get("disruptionsAllowed") == 0)

    # 3. Drain the last Ready pod's node: the PDB refuses the eviction and the drain waits.
    drain = subprocess.Popen(_drain(kube, free, "90s"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        min_ready = 2
        t_end = time.monotonic() + 8
        while time.monotonic() < t_end:
            min_ready = min(min_ready, len(_state(kube, namespace, sel)[0]))
            time.sleep(0.5)
        assert drain.poll() is None, f"drain did not wait for the PDB:\n{drain.stdout.read()}"
        assert _state(kube, namespace, sel)[0] == [free], "the last Ready pod was evicted despite the PDB"
        # Capacity returns (the first node is uncordoned): the Pending pod becomes Ready,
        # the budget allows one disruption again, and the waiting drain completes.
        kube.kubectl("uncordon", busy[0])
        while drain.poll() is None:
            min_ready = min(min_ready, len(_state(kube, namespace, sel)[0]))
            time.sleep(0.3)
        out = drain.stdout.read()
        assert drain.returncode == 0, f"drain failed after capacity returned:\n{out}"
        assert "disruption budget" in out, f"the drain never hit the PDB:\n{out}"
        assert min_ready >= 1, f"Ready pods dropped to {min_ready}, below the PDB's minimum of 1"
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.wait()


def test_node_losing_a_gpu_gets_no_new_gpu_pod(kube, namespace, pool):
    [node] = pool("degraded", [2])
    sel, name = _install(kube, namespace, "degraded", pool_values("degraded", 1, anti="none"))
    kube.wait("1 Ready pod", lambda: _state(kube, namespace, sel)[0] == [node])

    # The device plugin reports one of the 2 GPUs unhealthy: allocatable drops to 1.
    kube.kubectl("patch", "node", node, "--subresource=status", "--type=merge",
                 "-p", json.dumps({"status": {"allocatable": {"nvidia.com/gpu": "1"}}}))
    live = kube.json("get", "node", node)["status"]
    assert (live["capacity"]["nvidia.com/gpu"], live["allocatable"]["nvidia.com/gpu"]) == ("2", "1")

    kube.kubectl("scale", "deployment", name, "-n", namespace, "--replicas=2")
    ready, pending = kube.wait("the new pod Unschedulable", lambda: (lambda r, p: (r, p) if p else None)(
        *_state(kube, namespace, sel)))
    assert ready == [node], "the running pod must stay"
    assert "Insufficient nvidia.com/gpu" in e2elib.unschedulable_message(pending[0])
    time.sleep(2)  # it stays Pending (the node's capacity still says 2)
    assert len(_state(kube, namespace, sel)[1]) == 1

    # Control: the GPU comes back, the same pod schedules onto the node.
    kube.kubectl("patch", "node", node, "--subresource=status", "--type=merge",
                 "-p", json.dumps({"status": {"allocatable": {"nvidia.com/gpu": "2"}}}))
    kube.wait("both pods Ready on the node", lambda: _state(kube, namespace, sel)[0] == [node, node])


def test_deleted_node_pods_recreated_elsewhere_or_pending(kube, namespace, pool):
    a_nodes = pool("lost-a", [1, 1])
    [b_node] = pool("lost-b", [1])
    sel_a, _ = _install(kube, namespace, "lost-a", pool_values("lost-a", 1))
    sel_b, _ = _install(kube, namespace, "lost-b", pool_values("lost-b", 1))
    [a_first] = kube.wait("lost-a Ready", lambda: _state(kube, namespace, sel_a)[0] or None)
    kube.wait("lost-b Ready", lambda: _state(kube, namespace, sel_b)[0] == [b_node])
    [a_other] = [n for n in a_nodes if n != a_first]

    # Both nodes vanish at once. kube-controller-manager's pod GC deletes their orphaned
    # pods (after its fixed 40 s quarantine); the ReplicaSets recreate them.
    kube.kubectl("delete", "node", a_first, b_node)
    kube.wait("lost-a's pod recreated on the other node of its pool",
              lambda: _state(kube, namespace, sel_a)[0] == [a_other], timeout=150, interval=2)

    def b_pending():
        ready, pending = _state(kube, namespace, sel_b)
        return pending if not ready and pending else None

    [pod] = kube.wait("lost-b's pod recreated and Pending", b_pending, timeout=60, interval=2)
    msg = e2elib.unschedulable_message(pod)
    assert "didn't match Pod's node affinity/selector" in msg, msg
