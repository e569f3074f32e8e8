"""The GPU health remediation controller (`gpuvalues remediate`, run as a subprocess) on
the real control plane, with a real Prometheus (.tools/bin/prometheus) scraping a fake
DCGM exporter served by this test: the one fake, there are no GPUs. The exporter emits
the series dcgm-exporter emits (DCGM_FI_DEV_GPU_TEMP on every GPU, and
DCGM_EXP_XID_ERRORS_COUNT{xid} when the test injects a fault), labelled Hostname=<node>.
Evictions go through the real Eviction API and the chart's real PodDisruptionBudget;
kwok plays the kubelets (pods become Running/Ready), the real scheduler re-places pods.

Each test has its own node pool; the controller manages only that pool (nodeSelector),
and keeps its Lease in the test's namespace.
"""
from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from gpuvalues.operations.remediation import ANN_STATE, CONDITION_TYPE, TAINT_KEY
from tests.e2e import e2elib
from tests.e2e.conftest import POOL, harness
from tests.e2e.e2elib import CHART, ROOT
from tests.exposition import ExpositionHandler as _Handler

SYNC = 2.0          # controller sync period (s)
GPU = "nvidia.com/gpu"


class FakeDcgmExporter(http.server.ThreadingHTTPServer):
    """Serves DCGM exposition text for `nodes`; `xid[node] = code` injects a critical Xid
    on GPU 0 of that node (as dcgm-exporter's xid-count metric reports it)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.nodes: set[str] = set()
        self.xid: dict[str, int] = {}

    def exposition(self) -> str:
        out = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge", "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge"]
        with self.lock:
            for i, n in enumerate(sorted(self.nodes)):
                lab = f'gpu="0",UUID="GPU-e2e-{i:04d}",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="{n}"'
                out.append(f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} 40")
                if n in self.xid:
                    out.append(f'DCGM_EXP_XID_ERRORS_COUNT{{{lab},xid="{self.xid[n]}",window_size_in_ms="300000"}} 1')
        return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def dcgm(e2e_cluster, prometheus_bin, tmp_path_factory):
    """(exporter, Prometheus URL): a real Prometheus scraping the fake exporter every second."""
    exporter = FakeDcgmExporter()
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    d = tmp_path_factory.mktemp("prom")
    proc, url = e2elib.start_prometheus(e2e_cluster, prometheus_bin, d, "dcgm-exporter",
                                        exporter.server_address[1], name="prometheus-remediation")
    yield exporter, url
    e2e_cluster.terminate(proc)
    exporter.shutdown()
    exporter.server_close()


def prom_has_xid(url: str, node: str) -> bool:
    q = urllib.parse.urlencode({"query": f'DCGM_EXP_XID_ERRORS_COUNT{{Hostname="{node}"}}'})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as r:
        return bool(json.loads(r.read())["data"]["result"])


class Remediator:
    """`gpuvalues remediate` as a subprocess against the e2e cluster."""

    def __init__(self, kube, namespace: str, tmp_path, prom_url: str, pool: str, **config):
        self.kube, self.ns = kube, namespace
        self.cfg = {"prometheusUrl": prom_url, "syncPeriodSeconds": SYNC, "leaseDurationSeconds": 3 * SYNC,
                    "leaseNamespace": namespace, "leaseName": "remediation", "nodeSelector": f"{POOL}={pool}",
                    "suspectForSeconds": 0, "holdDownSeconds": 4, "window": "4s",
                    "breakerMaxNodes": 10, "breakerMaxPercent": 100, "maxNewQuarantinesPerSync": 10,
                    "evictionsPerMinute": 600, **config}
        self.path = tmp_path / f"remediation-{pool}.yaml"
        self.path.write_text(yaml.safe_dump(self.cfg))
        self.procs: dict[str, tuple] = {}

    def start(self, identity: str):
        port = harness.free_port()
        argv = [str(ROOT / ".venv" / "bin" / "gpuvalues"), "remediate", "--kubeconfig", str(self.kube.cluster.kubeconfig),
                "--config", str(self.path), "--identity", identity, "--metrics-address", f"127.0.0.1:{port}"]
        if not os.path.exists(argv[0]):
            argv[:1] = [sys.executable, "-m", "gpuvalues.cli"]
        popen = self.kube.cluster.spawn(f"remediate-{identity}", argv, ready_url=f"http://127.0.0.1:{port}/healthz")
        self.procs[identity] = (popen, port)
        return popen

    def metrics(self, identity: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.procs[identity][1]}/metrics", timeout=5) as r:
            return r.read().decode()

    def sample(self, identity: str, series: str) -> float:
        for line in self.metrics(identity).splitlines():
            name, _, value = line.rpartition(" ")
            if name == series:
                return float(value)
        return 0.0

    def kill(self, identity: str, sig=signal.SIGTERM):
        popen, _ = self.procs.pop(identity)
        if sig == signal.SIGKILL:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(10)
        self.kube.cluster.terminate(popen)

    def stop(self):
        for ident in list(self.procs):
            self.kill(ident)

    def log(self, identity: str) -> str:
        return self.kube.cluster.logs(f"remediate-{identity}", 60)


def node(kube, name) -> dict:
    return kube.json("get", "node", name)


def our_taint(n: dict) -> bool:
    return any(t["key"] == TAINT_KEY for t in n["spec"].get("taints") or [])


def state(n: dict) -> str:
    return (n["metadata"].get("annotations") or {}).get(ANN_STATE, "healthy")


def live_pods(kube, namespace, sel) -> list[dict]:
    return [p for p in kube.pods(namespace, sel) if not p["metadata"].get("deletionTimestamp")]


def ready_on(kube, namespace, sel) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in live_pods(kube, namespace, sel) if e2elib.pod_is_ready(p))


def controller_events(kube, reason: str, namespace: str | None = None) -> list[dict]:
    res = kube.json("get", "events", "-A", "--field-selector", f"reason={reason}")["items"]
    return [e for e in res if namespace is None or e["involvedObject"].get("namespace") == namespace]


def lease_holder(kube, namespace) -> str | None:
    res = kube.kubectl("get", "lease", "remediation", "-n", namespace, "-o", "json", check=False)
    return json.loads(res.stdout)["spec"].get("holderIdentity") if res.returncode == 0 else None


def install(kube, namespace, pool, replicas) -> tuple[str, str]:
    values = {"gpu": {"mode": "whole", "count": 1}, "nodeSelector": {POOL: pool}, "autoscaling": {"engine": "none"},
              "replicaCount": replicas, "podAntiAffinity": "none", "topologySpread": {"enabled": False},
              "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}}
    objects = e2elib.render("rem", namespace, [], values)
    dep = next(o for o in objects if o["kind"] == "Deployment" and e2elib.is_gpu_workload(o))
    pdb = next(o for o in objects if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    kube.helm("install", "rem", str(CHART), "-n", namespace, values=values)
    return e2elib.selector_string(dep["spec"]["selector"]["matchLabels"]), pdb["metadata"]["name"]


class ReadySampler(threading.Thread):
    """Follows the namespace's pods through a watch (every change the API server makes,
    no sampling gaps) and keeps the minimum number of Ready, non-terminating replicas."""

    def __init__(self, kube, namespace, sel):
        super().__init__(daemon=True)
        from kubernetes import config, watch

        self.api = config.new_client_from_config(config_file=str(kube.cluster.kubeconfig))
        self.watch = watch.Watch()
        self.ns, self.sel = namespace, sel
        self.min = None
        self.events = 0
        self.ready: dict[str, bool] = {}
        self.started = threading.Event()
        self.stopping = False
        self.error: BaseException | None = None

    def run(self):
        try:
            self._follow()
        except Exception as e:
            if not self.stopping:
                self.error = e

    def _follow(self):
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        lst = core.list_namespaced_pod(self.ns, label_selector=self.sel)
        for p in lst.items:
            self.ready[p.metadata.uid] = _ready(p)
        self.min = sum(self.ready.values())
        self.started.set()
        for ev in self.watch.stream(core.list_namespaced_pod, self.ns, label_selector=self.sel,
                                    resource_version=lst.metadata.resource_version, timeout_seconds=300):
            p = ev["object"]
            self.ready[p.metadata.uid] = ev["type"] != "DELETED" and _ready(p)
            self.events += 1
            self.min = min(self.min, sum(self.ready.values()))

    def stop(self):
        self.stopping = True
        self.watch.stop()
        self.join(10)


def _ready(p) -> bool:
    return (p.metadata.deletion_timestamp is None and p.status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []))


def test_xid_quarantines_drains_through_pdb_and_recovers_only_leader_acts(kube, namespace, pool, dcgm, tmp_path):
    exporter, prom = dcgm
    bad, good1, good2 = pool("rem-xid", [2, 1, 1])
    with exporter.lock:
        exporter.nodes |= {bad, good1, good2}
    # Both replicas on the node that will fail: the healthy nodes are cordoned meanwhile.
    kube.kubectl("cordon", good1, good2)
    sel, _pdb = install(kube, namespace, "rem-xid", 2)
    kube.wait("2 Ready pods on the node that will fail", lambda: ready_on(kube, namespace, sel) == [bad, bad])
    kube.kubectl("uncordon", good1, good2)
    before = {p["metadata"]["uid"] for p in live_pods(kube, namespace, sel)}

    rem = Remediator(kube, namespace, tmp_path, prom, "rem-xid")
    try:
        rem.start("a")
        kube.wait("replica a holds the Lease", lambda: lease_holder(kube, namespace) == "a", timeout=20)
        rem.start("b")
        time.sleep(2 * SYNC)
        assert not our_taint(node(kube, bad)), "quarantined without a fault"

        sampler = ReadySampler(kube, namespace, sel)
        sampler.start()
        assert sampler.started.wait(10) and sampler.min == 2
        with exporter.lock:
            exporter.xid[bad] = 79
        kube.wait("Prometheus has the Xid", lambda: prom_has_xid(prom, bad), timeout=20, interval=0.2)
        t_seen = time.monotonic()
        kube.wait("the node tainted", lambda: our_taint(node(kube, bad)), timeout=6 * SYNC, interval=0.2)
        took = time.monotonic() - t_seen
        print(f"quarantined {took:.2f}s after the Xid reached Prometheus (sync period {SYNC}s)")
        assert took <= 2 * SYNC + 1.0, f"quarantined {took:.1f}s after the Xid was in Prometheus (> 2 sync periods)"
        n = node(kube, bad)
        assert any(t["key"] == TAINT_KEY and t["effect"] == "NoSchedule" for t in n["spec"]["taints"])
        # the condition and the Event come after the taint in the same sync: waited for, not read at once
        kube.wait("our Node condition True", lambda: any(
            c["type"] == CONDITION_TYPE and c["status"] == "True"
            for c in node(kube, bad)["status"].get("conditions", [])), timeout=30)
        kube.wait("the GpuNodeQuarantined Event", lambda: any(
            e["involvedObject"]["name"] == bad for e in controller_events(kube, "GpuNodeQuarantined")), timeout=30)

        # Drained through the PDB: both pods evicted, replacements Ready on the healthy nodes,
        # never fewer Ready than minAvailable (2 replicas - maxUnavailable 1).
        kube.wait("replacements Ready on the healthy nodes",
                  lambda: ready_on(kube, namespace, sel) == sorted([good1, good2]), timeout=60)
        kube.wait("state drained", lambda: state(node(kube, bad)) == "drained", timeout=30)
        sampler.stop()
        assert sampler.error is None, sampler.error
        assert sampler.events >= 6 and sampler.min >= 1, f"Ready replicas fell to {sampler.min} ({sampler.events} events)"
        evicted = controller_events(kube, "GpuRemediationEvicted", namespace)
        assert sorted(e["involvedObject"]["uid"] for e in evicted) == sorted(before), "each pod evicted exactly once"
        t_ev = sorted(e["lastTimestamp"] for e in evicted)
        assert t_ev[0] != t_ev[1], "both pods evicted at once (one at a time, a sync apart, expected)"

        # Only the leader acted: every Event is reported by a; b never synced. Only this test's
        # Events: the cluster is the worker's, shared with other files' controllers (c, k, ...)
        mine = {bad, good1, good2}
        ours = [e for e in kube.json("get", "events", "-A")["items"]
                if e.get("reportingComponent") == "gpu-inference-remediation"
                and (e["metadata"]["namespace"] == namespace or e["involvedObject"].get("name") in mine)]
        assert ours and {e["reportingInstance"] for e in ours} == {"a"}
        assert rem.sample("a", "gpu_remediation_leader") == 1 and rem.sample("b", "gpu_remediation_leader") == 0
        assert rem.sample("b", 'gpu_remediation_syncs_total{result="ok"}') == 0
        # the gauge is set at the end of the sync that wrote the state: waited for
        kube.wait("a's gauge counts the drained node",
                  lambda: rem.sample("a", 'gpu_remediation_nodes{state="drained"}') == 1, timeout=30)
        # its /metrics is valid exposition text for the real promtool
        res = subprocess.run([str(e2elib.TOOLS / "promtool"), "check", "metrics"], input=rem.metrics("a"),
                                     capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr

        # Recovery: the Xid ages out of the window; after the hold-down our taint goes.
        with exporter.lock:
            exporter.xid.pop(bad)
        kube.wait("taint removed after recovery", lambda: not our_taint(node(kube, bad)), timeout=40)
        n = node(kube, bad)
        assert state(n) == "healthy"
        assert any(t["key"] == GPU for t in n["spec"]["taints"]), "the GPU presence taint is not ours to remove"
        # the condition is cleared after the taint in the same sync: waited for
        kube.wait("our Node condition removed", lambda: not any(
            c["type"] == CONDITION_TYPE for c in node(kube, bad)["status"].get("conditions", [])), timeout=30)
        # pods may return: scale up, a new replica lands on the recovered node
        kube.kubectl("scale", "deployment", "-n", namespace, "-l", sel, "--replicas=4")
        kube.wait("a replica back on the recovered node", lambda: bad in ready_on(kube, namespace, sel), timeout=60)
        kube.wait("all 4 Ready (the control below starts from 4)", lambda: len(ready_on(kube, namespace, sel)) == 4,
                  timeout=60)

        # Negative control: the watch-based sampler does see a drop (all pods deleted at
        # once, the pool cordoned so that no replacement becomes Ready).
        control = ReadySampler(kube, namespace, sel)
        control.start()
        assert control.started.wait(10) and control.min == 4
        kube.kubectl("cordon", bad, good1, good2)
        kube.kubectl("delete", "pods", "-n", namespace, "-l", sel, "--wait=false")
        kube.wait("no Ready replica", lambda: not ready_on(kube, namespace, sel), timeout=30)
        control.stop()
        assert control.min == 0, control.min
    finally:
        rem.stop()


def test_breaker_trips_at_its_limit(kube, namespace, pool, dcgm, tmp_path):
    exporter, prom = dcgm
    nodes = pool("rem-brk", [1, 1, 1, 1, 1])
    with exporter.lock:
        exporter.nodes |= set(nodes)
    rem = Remediator(kube, namespace, tmp_path, prom, "rem-brk", breakerMaxPercent=40)   # 40% of 5 = 2
    try:
        rem.start("a")
        kube.wait("a leads", lambda: lease_holder(kube, namespace) == "a", timeout=20)
        rem.start("b")
        failing = nodes[:3]
        with exporter.lock:
            for n in failing:
                exporter.xid[n] = 48
        kube.wait("2 nodes tainted", lambda: sum(our_taint(node(kube, n)) for n in failing) == 2, timeout=30)
        time.sleep(3 * SYNC)
        tainted = [n for n in nodes if our_taint(node(kube, n))]
        assert len(tainted) == 2 and set(tainted) <= set(failing), tainted
        [held_back] = [n for n in failing if n not in tainted]
        assert state(node(kube, held_back)) == "suspect"
        # the reports of the refusal (gauges at the sync's end, the Event after the writes): waited for
        kube.wait("a's breaker gauges", lambda: rem.sample("a", "gpu_remediation_breaker_trips_total") >= 1
                  and rem.sample("a", "gpu_remediation_breaker_open") == 1, timeout=20)
        kube.wait("the CircuitBreakerOpen Event on the held-back node", lambda: any(
            e["involvedObject"]["name"] == held_back for e in controller_events(kube, "CircuitBreakerOpen")), timeout=20)
        # Failover: the leader dies; the standby takes the Lease after its duration and
        # resumes from the annotations: the same 2 held, the breaker still closed to the third.
        rem.kill("a", signal.SIGKILL)
        kube.wait("b leads", lambda: lease_holder(kube, namespace) == "b", timeout=4 * 3 * SYNC)
        kube.wait("b counts the 2 held nodes", lambda: rem.sample("b", "gpu_remediation_breaker_open") == 1, timeout=20)
        time.sleep(2 * SYNC)
        assert sorted(n for n in nodes if our_taint(node(kube, n))) == sorted(tainted)
        assert state(node(kube, held_back)) == "suspect"
        assert rem.sample("b", "gpu_remediation_breaker_trips_total") >= 1
    finally:
        rem.stop()
        with exporter.lock:
            for n in nodes:
                exporter.xid.pop(n, None)


def test_killed_mid_drain_resumes_without_second_eviction(kube, namespace, pool, dcgm, tmp_path):
    exporter, prom = dcgm
    bad, good1, good2 = pool("rem-kill", [3, 1, 1])
    with exporter.lock:
        exporter.nodes |= {bad, good1, good2}
    kube.kubectl("cordon", good1, good2)
    sel, _ = install(kube, namespace, "rem-kill", 3)
    kube.wait("3 Ready pods on the failing node", lambda: ready_on(kube, namespace, sel) == [bad] * 3)
    # A finalizer keeps evicted pods Terminating (a slow shutdown): a controller that
    # re-evicted terminating pods after a restart would be seen evicting them twice.
    pods = [p["metadata"]["name"] for p in live_pods(kube, namespace, sel)]
    for p in pods:
        kube.kubectl("patch", "pod", p, "-n", namespace, "--type=merge",
                     "-p", json.dumps({"metadata": {"finalizers": ["e2e.gpu-inference/hold"]}}))
    kube.kubectl("uncordon", good1)      # room for one replacement only: the drain stalls
    rem = Remediator(kube, namespace, tmp_path, prom, "rem-kill")
    sampler = ReadySampler(kube, namespace, sel)
    sampler.start()
    assert sampler.started.wait(10) and sampler.min == 3
    try:
        rem.start("k")
        with exporter.lock:
            exporter.xid[bad] = 79
        kube.wait("two evictions (the PDB blocks the third)",
                  lambda: len(controller_events(kube, "GpuRemediationEvicted", namespace)) == 2, timeout=60)
        time.sleep(SYNC)
        assert state(node(kube, bad)) == "draining"
        rem.kill("k", signal.SIGKILL)                      # mid-drain, no clean shutdown
        rem.start("k")                                     # same identity: takes the Lease back
        time.sleep(3 * SYNC)
        assert len(controller_events(kube, "GpuRemediationEvicted", namespace)) == 2, "re-evicted after restart"
        kube.kubectl("uncordon", good2)                    # capacity returns: the drain completes
        for p in pods:                                     # and the slow shutdowns finish
            kube.kubectl("patch", "pod", p, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
        kube.wait("state drained", lambda: state(node(kube, bad)) == "drained", timeout=60)
        uids = [e["involvedObject"]["uid"] for e in controller_events(kube, "GpuRemediationEvicted", namespace)]
        assert len(uids) == 3 and len(set(uids)) == 3, uids
        kube.wait("2 Ready replacements (the pool has room for 2)",
                  lambda: ready_on(kube, namespace, sel) == sorted([good1, good2]), timeout=30)
        sampler.stop()
        assert sampler.error is None, sampler.error
        # the PDB (3 replicas, maxUnavailable 1) held: never fewer than 2 Ready
        assert sampler.min == 2, sampler.min
        assert rem.sample("k", 'gpu_remediation_evictions_total{outcome="blocked"}') >= 1, "the PDB never pushed back"
    finally:
        sampler.stop()
        rem.stop()
        with exporter.lock:
            exporter.xid.pop(bad, None)
        for p in kube.pods(namespace):
            if p["metadata"].get("finalizers"):
                kube.kubectl("patch", "pod", p["metadata"]["name"], "-n", namespace, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}', check=False)


def test_operator_cordon_is_never_undone(kube, namespace, pool, dcgm, tmp_path):
    exporter, prom = dcgm
    x, y = pool("rem-cordon", [1, 1])
    with exporter.lock:
        exporter.nodes |= {x, y}
    kube.kubectl("cordon", x)                              # an operator's cordon, before any fault
    rem = Remediator(kube, namespace, tmp_path, prom, "rem-cordon")
    try:
        rem.start("c")
        with exporter.lock:
            exporter.xid[x] = 79
            exporter.xid[y] = 79
        kube.wait("y quarantined", lambda: our_taint(node(kube, y)), timeout=30)
        kube.kubectl("cordon", y)                          # the operator also cordons our node
        time.sleep(2 * SYNC)
        assert not our_taint(node(kube, x)), "acted on a node someone else cordoned"
        kube.wait("the HeldByOther Event on x", lambda: any(
            e["involvedObject"]["name"] == x for e in controller_events(kube, "HeldByOther")), timeout=20)
        with exporter.lock:
            exporter.xid.clear()
        kube.wait("y released (our taint gone)", lambda: not our_taint(node(kube, y)), timeout=40)
        time.sleep(SYNC)
        for n in (x, y):
            assert node(kube, n)["spec"].get("unschedulable") is True, f"{n} was uncordoned"
    finally:
        rem.stop()


def test_dry_run_changes_nothing(kube, namespace, pool, dcgm, tmp_path):
    exporter, prom = dcgm
    [x] = pool("rem-dry", [1])
    with exporter.lock:
        exporter.nodes.add(x)
        exporter.xid[x] = 79
    before = node(kube, x)
    rem = Remediator(kube, namespace, tmp_path, prom, "rem-dry", dryRun=True)
    try:
        rem.start("d")
        # It walks the machine in memory: the metrics show the node past quarantine...
        kube.wait("the dry run reaching drained", lambda: rem.sample("d", 'gpu_remediation_nodes{state="drained"}') == 1,
                  timeout=30)
        assert "would add-taint" in rem.log("d")
        # ...while the node is untouched: no taint, no annotation, no condition, no Event.
        after = node(kube, x)
        assert after["spec"].get("taints") == before["spec"].get("taints")
        assert not any(k.startswith("remediation.gpu-inference.io/") for k in after["metadata"].get("annotations", {}))
        assert not any(c["type"] == CONDITION_TYPE for c in after["status"].get("conditions", []))
        assert not [e for e in kube.json("get", "events", "-A")["items"]
                    if e["involvedObject"].get("name") == x and e.get("reportingComponent") == "gpu-inference-remediation"]
    finally:
        rem.stop()
        with exporter.lock:
            exporter.xid.pop(x, None)


def _gpu_deployment(name: str, namespace: str, pool: str, min_available: int) -> list[dict]:
    """A bare Deployment (1 GPU) and a PDB that forbids every eviction when
    min_available equals the replicas (the case delete-after-timeout exists for)."""
    labels = {"app": name}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"nodeSelector": {POOL: pool},
                      "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                      "containers": [{"name": "c", "image": "registry.example/e2e:1",
                                      "resources": {"limits": {GPU: "1"}}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
         "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}}},
    ]


def test_namespace_drain_modes_skip_and_delete_after_timeout(kube, namespace, pool, dcgm, tmp_path):
    exporter, prom = dcgm
    [x] = pool("rem-modes", [3])
    with exporter.lock:
        exporter.nodes.add(x)
    skip_ns, del_ns = f"{namespace}-skip", f"{namespace}-del"
    try:
        for ns, mode in ((skip_ns, "Skip"), (del_ns, "DeleteAfterTimeout")):
            kube.kubectl("create", "namespace", ns)
            kube.kubectl("annotate", "namespace", ns, f"remediation.gpu-inference.io/drain-mode={mode}",
                         "remediation.gpu-inference.io/delete-after-seconds=4")
        objs = (_gpu_deployment("kept", skip_ns, "rem-modes", 1) + _gpu_deployment("stuck", del_ns, "rem-modes", 1)
                + _gpu_deployment("evicted", namespace, "rem-modes", 0))
        kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
        for ns, app in ((skip_ns, "kept"), (del_ns, "stuck"), (namespace, "evicted")):
            kube.wait(f"{app} Ready", lambda ns=ns, app=app: ready_on(kube, ns, f"app={app}") == [x])
        stuck = live_pods(kube, del_ns, "app=stuck")[0]["metadata"]["uid"]
        rem = Remediator(kube, namespace, tmp_path, prom, "rem-modes")
        try:
            rem.start("m")
            with exporter.lock:
                exporter.xid[x] = 79
            kube.wait("drained", lambda: state(node(kube, x)) == "drained", timeout=60)
            # default namespace: evicted; PDB minAvailable 1 of 1 blocked the eviction, so the
            # opted-in namespace's pod was deleted after its timeout; the opted-out pod stays.
            assert [e["involvedObject"]["uid"] for e in controller_events(kube, "GpuRemediationDeleted", del_ns)] == [stuck]
            assert rem.sample("m", 'gpu_remediation_evictions_total{outcome="blocked"}') >= 1
            assert len(controller_events(kube, "GpuRemediationEvicted", namespace)) == 1
            assert ready_on(kube, skip_ns, "app=kept") == [x]
            assert not controller_events(kube, "GpuRemediationEvicted", skip_ns)
        finally:
            rem.stop()
    finally:
        with exporter.lock:
            exporter.xid.pop(x, None)
        kube.kubectl("delete", "namespace", skip_ns, del_ns, "--wait=false", check=False)


def test_node_signals_allocatable_and_foreign_condition(kube, namespace, pool, dcgm, tmp_path):
    """Signals from the Node objects alone: the device plugin marking a GPU unhealthy
    (allocatable below capacity) and a condition set by another detector (as Node Problem
    Detector would); each quarantines its node, the untouched node stays healthy."""
    exporter, prom = dcgm
    lost, cond, fine = pool("rem-node", [2, 1, 1])
    with exporter.lock:
        exporter.nodes |= {lost, cond, fine}
    rem = Remediator(kube, namespace, tmp_path, prom, "rem-node", conditions=["GpuXidError"])
    try:
        rem.start("s")
        kube.kubectl("patch", "node", lost, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": {"allocatable": {GPU: "1"}}}))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        kube.kubectl("patch", "node", cond, "--subresource=status", "--type=strategic", "-p", json.dumps(
            {"status": {"conditions": [{"type": "GpuXidError", "status": "True", "reason": "NPDKernelLog",
                                        "message": "NVRM: Xid 79", "lastHeartbeatTime": now,
                                        "lastTransitionTime": now}]}}))
        kube.wait("both quarantined", lambda: our_taint(node(kube, lost)) and our_taint(node(kube, cond)), timeout=30)
        assert not our_taint(node(kube, fine)) and state(node(kube, fine)) == "healthy"
        # the other detector's condition is left as it was
        assert any(c["type"] == "GpuXidError" and c["status"] == "True" for c in node(kube, cond)["status"]["conditions"])
    finally:
        rem.stop()
