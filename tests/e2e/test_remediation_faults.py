"""The remediation controller under the faults real clusters have, on the real control
plane: a real Prometheus scrapes a test-served DCGM exporter (the one fake: there are no
GPUs) with one target per node, as the chart's DaemonSet gives, and a fault-injecting
proxy (tests/faultproxy.py, test-owned) sits between the controller and that Prometheus.
A second job ("spoof") serves a series claiming a node's Hostname.

Each scenario is one issue-24 failure of the earlier controller: no data taken for health
(an empty answer, a node's series dropped, its exporter gone), a slow / huge / hanging /
failing Prometheus (lease kept, /healthz, SIGTERM within a second, memory bounded, one
replica acting), `drain: false` with no way out, an operator's taint removal undone, a
PDB that never allows eviction, a flapping fault, the breaker's rounding / scope / latch,
and untrusted node annotations (malformed records, a huge condition message).
"""
from __future__ import annotations

import http.server
import json
import os
import signal
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from gpuvalues.operations.lease import BREAKER_ANNOTATION
from gpuvalues.operations.remediation import ANN_RECORD, ANN_STATE, TAINT_KEY
from tests.e2e.conftest import POOL
from tests.e2e.test_remediation import (SYNC, Remediator, _gpu_deployment, controller_events, lease_holder,
                                        live_pods, node, our_taint, ready_on, state)
from tests.exposition import ExpositionHandler
from tests.faultproxy import FaultProxy

JOB = "dcgm-exporter"


class PerNodeExporter(http.server.ThreadingHTTPServer):
    """DCGM exposition per node (`/metrics?node=N`, one Prometheus target each); a node in
    `down` answers 503 (its exporter is gone: up == 0); `xid[node] = code` injects an Xid.
    A node in `stamped` gets its reading with an explicit timestamp (the time it was
    collected, as relays and exporters that timestamp their readings expose it), and
    `frozen[node] = t` then keeps serving that reading stamped t: an exporter stuck on one
    reading. The target stays up and Prometheus returns the sample for its whole lookback
    window (an explicitly stamped series gets no staleness marker); only its timestamp
    tells it is old."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _NodeHandler)
        self.lock = threading.Lock()
        self.xid: dict[str, int] = {}
        self.down: set[str] = set()
        self.stamped: set[str] = set()
        self.lowercase: set[str] = set()     # label `hostname` (dcgm-exporter after d5e5f51)
        self.frozen: dict[str, float] = {}

    def body(self, n: str) -> str | None:
        with self.lock:
            if n in self.down:
                return None
            host = "hostname" if n in self.lowercase else "Hostname"
            lab = f'gpu="0",UUID="GPU-{n}",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",{host}="{n}"'
            ts = f" {int(self.frozen.get(n, time.time()) * 1000)}" if n in self.stamped else ""
            out = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge", f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} 40{ts}"]
            if n in self.xid:
                out.append(f'DCGM_EXP_XID_ERRORS_COUNT{{{lab},xid="{self.xid[n]}",window_size_in_ms="300000"}} 1')
        return "\n".join(out) + "\n"


class _NodeHandler(ExpositionHandler):
    """One target per node (`?node=`): the node's series, or 503 once its exporter is gone."""

    def text(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        return self.server.body((q.get("node") or [""])[0])


class Spoof(http.server.ThreadingHTTPServer):
    """Another job's target claiming `victims` have a critical Xid."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), ExpositionHandler)
        self.victims: set[str] = set()

    def exposition(self) -> str:
        return "".join(f'DCGM_EXP_XID_ERRORS_COUNT{{gpu="0",Hostname="{v}",xid="79"}} 1\n'
                       f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="{v}"}} 40\n' for v in sorted(self.victims))


class Signals:
    """The module's exporter, spoof and Prometheus; `watch(nodes)` adds per-node targets
    (Prometheus reloads its config on SIGHUP)."""

    def __init__(self, cluster, prometheus_bin, workdir):
        self.cluster, self.dir = cluster, workdir
        self.exporter, self.spoof = PerNodeExporter(), Spoof()
        for srv in (self.exporter, self.spoof):
            threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.nodes: list[str] = []
        self.namespace = "gpu-ops"
        from tests.e2e.conftest import harness
        port = harness.free_port()
        self.write_config()
        self.proc = cluster.spawn("prometheus-remediation-faults", [
            prometheus_bin, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], ready_url=f"http://127.0.0.1:{port}/-/ready")
        self.url = f"http://127.0.0.1:{port}"

    def write_config(self):
        addr = f"127.0.0.1:{self.exporter.server_address[1]}"
        targets = [{"targets": [addr], "labels": {"__param_node": n, "instance": n, "node": n,
                                                  "namespace": self.namespace}} for n in self.nodes]
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [
            {"job_name": JOB, "honor_labels": True, "static_configs": targets},
            {"job_name": "spoof", "honor_labels": True, "static_configs": [
                {"targets": [f"127.0.0.1:{self.spoof.server_address[1]}"], "labels": {"namespace": self.namespace}}]}]}
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(cfg))

    def watch(self, nodes):
        self.nodes += [n for n in nodes if n not in self.nodes]
        self.write_config()
        os.kill(self.proc.pid, signal.SIGHUP)
        e2e_wait(f"Prometheus scrapes {nodes}", lambda: set(nodes) <= self.present(), timeout=30)

    def query(self, q: str) -> list[dict]:
        u = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': q})}"
        with urllib.request.urlopen(u, timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    def present(self) -> set[str]:
        return {s["metric"].get("Hostname") or s["metric"].get("hostname")
                for s in self.query(f'DCGM_FI_DEV_GPU_TEMP{{job="{JOB}"}}')}

    def has_xid(self, n: str) -> bool:
        return bool(self.query(f'DCGM_EXP_XID_ERRORS_COUNT{{job="{JOB}",Hostname="{n}"}}'))

    def stop(self):
        self.cluster.terminate(self.proc)
        for srv in (self.exporter, self.spoof):
            srv.shutdown()
            srv.server_close()


def e2e_wait(what, pred, timeout=60, interval=0.3):
    from tests.e2e import e2elib
    return e2elib.wait(what, pred, timeout, interval)


@pytest.fixture(scope="module")
def sig(e2e_cluster, prometheus_bin, tmp_path_factory):
    s = Signals(e2e_cluster, prometheus_bin, tmp_path_factory.mktemp("prom-faults"))
    yield s
    s.stop()


@pytest.fixture
def proxy(sig):
    px = FaultProxy(sig.url).start()
    yield px
    px.stop()


def remediator(kube, namespace, tmp_path, proxy, pool: str, **cfg) -> Remediator:
    """The controller through the proxy, reading only the exporter job's series; scenario
    timings in seconds (the chart's defaults are minutes)."""
    base = {"exporterJob": JOB, "exporterNamespace": "gpu-ops", "holdDownSeconds": 3, "window": "2s",
            "drainTimeoutSeconds": 0, "flapMaxQuarantines": 0}
    return Remediator(kube, namespace, tmp_path, proxy.url, pool, **{**base, **cfg})


def held(kube, n) -> bool:
    return our_taint(node(kube, n))


def events_on(kube, reason, name) -> list[dict]:
    return [e for e in controller_events(kube, reason) if e["involvedObject"]["name"] == name]


def test_no_data_is_not_health_and_a_spoofed_series_is_not_read(kube, namespace, pool, sig, proxy, tmp_path):
    a, b, c = pool("rem-nodata", [1, 1, 1])
    sig.watch([a, b, c])
    with sig.exporter.lock:
        sig.exporter.xid.update({a: 79, b: 79})
    sig.spoof.victims.add(c)                       # another job claims c has Xid 79
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-nodata")
    try:
        rem.start("n")
        e2e_wait("a and b drained", lambda: state(node(kube, a)) == state(node(kube, b)) == "drained", timeout=30)
        # a's series vanish from the answers; b's exporter is gone (its target fails)
        proxy.set("drop", drop_nodes={a})
        with sig.exporter.lock:
            sig.exporter.xid.clear()
            sig.exporter.down.add(b)
        e2e_wait("b's target down", lambda: b not in sig.present(), timeout=15)
        time.sleep(3 + 3 * SYNC)                   # window + hold-down + syncs: the old code released here
        for n in (a, b):
            assert held(kube, n), f"{n} released without evidence of health"
            assert state(node(kube, n)) in ("drained", "recovering")
            # the report (an Event after the sync's writes, the gauge at its end): waited for
            e2e_wait(f"{n}: the report of the missing data", lambda n=n: events_on(kube, "NoHealthEvidence", n),
                     timeout=20)
        e2e_wait("the no-evidence gauge", lambda: rem.sample("n", "gpu_remediation_nodes_without_evidence") >= 2,
                 timeout=20)
        # 200 with empty results for everything: still nothing released, nothing new held
        proxy.set("empty")
        time.sleep(2 * SYNC)
        assert held(kube, a) and held(kube, b) and not held(kube, c)
        assert state(node(kube, c)) == "healthy", "the spoofed series (job spoof) was read"
        # the data returns, clean: both are released after the hold-down
        proxy.set("pass")
        with sig.exporter.lock:
            sig.exporter.down.discard(b)
        e2e_wait("a and b released on evidence", lambda: not held(kube, a) and not held(kube, b), timeout=30)
        assert not held(kube, c)
    finally:
        rem.stop()
        sig.spoof.victims.discard(c)


def _rss_peak_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _lease(kube, namespace) -> dict:
    return kube.json("get", "lease", "remediation", "-n", namespace)


def test_slow_huge_hanging_prometheus_keeps_one_leader_healthz_and_sigterm(kube, namespace, pool, sig, proxy,
                                                                          tmp_path):
    [x] = pool("rem-slow", [1])
    sig.watch([x])
    # the Lease (6 s) is shorter than a slow answer (one byte every 5 s): only the sync
    # deadline keeps the leader renewing and the standby out
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-slow")
    try:
        rem.start("a")
        e2e_wait("a leads", lambda: lease_holder(kube, namespace) == "a", timeout=20)
        rem.start("b")
        with sig.exporter.lock:
            sig.exporter.xid[x] = 79
        e2e_wait("x quarantined", lambda: held(kube, x), timeout=20)
        transitions = _lease(kube, namespace)["spec"].get("leaseTransitions", 0)
        with sig.exporter.lock:
            sig.exporter.xid.pop(x)
        for mode, kw in (("slow", {"slow_s": 5.0}), ("hang", {}), ("huge", {"huge_series": 250_000}), ("error", {})):
            proxy.set(mode, **kw)
            skipped = rem.sample("a", 'gpu_remediation_syncs_total{result="source-down"}')
            renew = _lease(kube, namespace)["spec"]["renewTime"]
            e2e_wait(f"{mode}: a sync ends (source-down) within its deadline",
                     lambda: rem.sample("a", 'gpu_remediation_syncs_total{result="source-down"}') > skipped, timeout=15)
            e2e_wait(f"{mode}: the Lease renewed", lambda: _lease(kube, namespace)["spec"]["renewTime"] != renew,
                     timeout=10)
            with urllib.request.urlopen(f"http://127.0.0.1:{rem.procs['a'][1]}/healthz", timeout=5) as r:
                assert r.status == 200
            assert held(kube, x), f"{mode}: released on no data"
        lease = _lease(kube, namespace)["spec"]
        assert lease["holderIdentity"] == "a" and lease.get("leaseTransitions", 0) == transitions
        ours = [e for e in kube.json("get", "events", "-A")["items"]
                if e.get("reportingComponent") == "gpu-inference-remediation"
                and (e["involvedObject"].get("name") == x or (e["involvedObject"].get("name") == "remediation"
                                                               and e["metadata"]["namespace"] == namespace))]
        assert ours and {e["reportingInstance"] for e in ours} == {"a"}, "the standby acted"
        assert any(e["reason"] == "SignalSourceUnavailable" for e in ours)
        popen_a = rem.procs["a"][0]
        peak = _rss_peak_kib(popen_a.pid)
        assert peak < 256 * 1024, f"peak RSS {peak} KiB with 250k series (chart limit 256Mi)"
        # SIGTERM while a sync waits on the slow proxy: gone within a second, Lease released
        proxy.set("slow", slow_s=5.0)
        time.sleep(SYNC)
        t0 = time.monotonic()
        os.kill(popen_a.pid, signal.SIGTERM)
        popen_a.wait(10)
        took = time.monotonic() - t0
        print(f"SIGTERM to exit: {took:.2f}s")
        assert took < 1.0, f"SIGTERM took {took:.2f}s"
        rem.procs.pop("a")
        e2e_wait("b takes over at once (the Lease was released)", lambda: lease_holder(kube, namespace) == "b",
                 timeout=2 * SYNC + 2)
    finally:
        rem.stop()
        with sig.exporter.lock:
            sig.exporter.xid.pop(x, None)


def test_drain_off_releases_and_an_operator_cancel_is_honoured(kube, namespace, pool, sig, proxy, tmp_path):
    x, y = pool("rem-cancel", [1, 1])
    sig.watch([x, y])
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-cancel", drain=False)
    try:
        rem.start("c")
        with sig.exporter.lock:
            sig.exporter.xid.update({x: 79, y: 79})
        e2e_wait("both quarantined", lambda: held(kube, x) and held(kube, y), timeout=20)
        # y: an operator removes our taint while the fault lasts
        kube.kubectl("taint", "node", y, f"{TAINT_KEY}-")
        e2e_wait("y cancelled", lambda: state(node(kube, y)) == "cancelled", timeout=10)
        time.sleep(2 * SYNC + 1)                   # the old code re-quarantined within one sync
        assert not held(kube, y), "re-quarantined after the operator's cancel"
        e2e_wait("the QuarantineCancelled Event", lambda: events_on(kube, "QuarantineCancelled", y), timeout=20)
        # x (drain off): the fault clears, the taint goes after the hold-down
        with sig.exporter.lock:
            sig.exporter.xid.clear()
        e2e_wait("x released (drain: false has a way out)", lambda: not held(kube, x), timeout=30)
        e2e_wait("y's episode over", lambda: state(node(kube, y)) == "healthy", timeout=20)
        # a new fault on y is a new episode: quarantined again
        with sig.exporter.lock:
            sig.exporter.xid[y] = 48
        e2e_wait("y quarantined for the new fault", lambda: held(kube, y), timeout=20)
    finally:
        rem.stop()
        with sig.exporter.lock:
            sig.exporter.xid.clear()


def test_a_pdb_that_never_allows_eviction_times_out_and_recovery_ends_it(kube, namespace, pool, sig, proxy, tmp_path):
    [x] = pool("rem-pdb", [1])
    sig.watch([x])
    objs = _gpu_deployment("stuck", namespace, "rem-pdb", 1)      # 1 replica, minAvailable 1
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    e2e_wait("stuck Ready", lambda: ready_on(kube, namespace, "app=stuck") == [x])
    uid = live_pods(kube, namespace, "app=stuck")[0]["metadata"]["uid"]
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-pdb", drainTimeoutSeconds=6)
    try:
        rem.start("p")
        with sig.exporter.lock:
            sig.exporter.xid[x] = 79
        e2e_wait("draining", lambda: state(node(kube, x)) == "draining", timeout=20)
        e2e_wait("the drain gives up", lambda: state(node(kube, x)) == "drain-timed-out", timeout=20)
        e2e_wait("the timeout's Event", lambda: events_on(kube, "GpuNodeDrainTimedOut", x), timeout=10)
        blocked = rem.sample("p", 'gpu_remediation_evictions_total{outcome="blocked"}')
        assert blocked >= 1, "the PDB never pushed back"
        time.sleep(2 * SYNC + 1)
        assert rem.sample("p", 'gpu_remediation_evictions_total{outcome="blocked"}') == blocked, "still evicting"
        assert held(kube, x)
        # recovery ends it: released, the pod was never evicted
        with sig.exporter.lock:
            sig.exporter.xid.pop(x)
        e2e_wait("released after recovery", lambda: not held(kube, x), timeout=30)
        assert [p["metadata"]["uid"] for p in live_pods(kube, namespace, "app=stuck")] == [uid]
    finally:
        rem.stop()
        with sig.exporter.lock:
            sig.exporter.xid.pop(x, None)


def test_a_flapping_fault_is_held_for_a_person(kube, namespace, pool, sig, proxy, tmp_path):
    [x] = pool("rem-flap", [1])
    sig.watch([x])
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-flap", holdDownSeconds=2, flapMaxQuarantines=2,
                     flapWindowSeconds=600)
    try:
        rem.start("f")
        for cycle in range(2):
            with sig.exporter.lock:
                sig.exporter.xid[x] = 79
            e2e_wait(f"cycle {cycle}: the Xid in Prometheus", lambda: sig.has_xid(x), timeout=10)
            time.sleep(3)                                   # fault on 3 s (at least until quarantined)
            e2e_wait(f"cycle {cycle}: quarantined", lambda: held(kube, x), timeout=20)
            with sig.exporter.lock:
                sig.exporter.xid.pop(x)
            e2e_wait(f"cycle {cycle}: released, or held for a person",
                     lambda: not held(kube, x) or state(node(kube, x)) == "needs-attention", timeout=30)
        time.sleep(2 * SYNC)
        assert state(node(kube, x)) == "needs-attention" and held(kube, x)
        # the needs-attention Event follows the record write in the same sync: waited for
        e2e_wait("the GpuNodeNeedsAttention Event", lambda: events_on(kube, "GpuNodeNeedsAttention", x), timeout=20)
        assert len(events_on(kube, "GpuNodeQuarantined", x)) == 2
        assert len(events_on(kube, "GpuNodeHealthy", x)) == 1
    finally:
        rem.stop()
        with sig.exporter.lock:
            sig.exporter.xid.pop(x, None)


def test_breaker_per_pool_rounds_up_latches_and_bad_records_skip_one_node(kube, namespace, pool, sig, proxy,
                                                                         tmp_path):
    [solo] = pool("rem-p1", [1])
    p2 = pool("rem-p2", [1, 1])
    p3 = pool("rem-p3", [1] * 7)
    sig.watch([solo, *p2, *p3])
    bad1, bad2, fault3, cond3 = p3[:4]
    kube.kubectl("annotate", "node", bad1, f"{ANN_STATE}=drained", f'{ANN_RECORD}={{"owned":null}}')
    kube.kubectl("annotate", "node", bad2, f"{ANN_STATE}=drained", f'{ANN_RECORD}={{"since":{"9" * 400}}}')
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-p1", breakerMaxNodes=10, breakerMaxPercent=50,
                     breakerPoolLabel=POOL, conditions=["GpuXidError"],
                     nodeSelector=f"{POOL} in (rem-p1,rem-p2,rem-p3)")
    try:
        rem.start("k")
        with sig.exporter.lock:
            sig.exporter.xid.update({solo: 79, p2[0]: 79, p2[1]: 79, fault3: 79})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = tmp_path / "condition.json"
        patch.write_text(json.dumps({"status": {"conditions": [{"type": "GpuXidError", "status": "True", "reason": "NPD",
                                                               "message": "x" * (256 * 1024), "lastHeartbeatTime": now,
                                                               "lastTransitionTime": now}]}}))
        kube.kubectl("patch", "node", cond3, "--subresource=status", "--type=strategic", f"--patch-file={patch}")
        # a 1-node pool at 50% is remediated (ceil); p2 (2 nodes) holds 1; p3 (7 nodes: 4) holds the two
        # bad records plus fault3 and cond3 (whose 256 KiB message must not make the update fail)
        e2e_wait("solo, one of p2, fault3 and cond3 quarantined", lambda: held(kube, solo) and held(kube, fault3)
                 and held(kube, cond3) and sum(held(kube, n) for n in p2) == 1, timeout=30)
        [first] = [n for n in p2 if held(kube, n)]
        [second] = [n for n in p2 if n != first]
        # the hold's Event is written in the same sync as the first node's taint, after it: wait for it
        e2e_wait("the breaker's Event on the second", lambda: events_on(kube, "CircuitBreakerOpen", second), timeout=10)
        assert state(node(kube, second)) == "suspect"
        assert json.loads(_lease(kube, namespace)["metadata"]["annotations"][BREAKER_ANNOTATION]) == ["rem-p2"]
        for b in (bad1, bad2):
            assert events_on(kube, "InvalidRemediationRecord", b) and not held(kube, b)
        assert rem.sample("k", "gpu_remediation_invalid_records") == 2
        # latched: the first recovers and is released; the second still waits
        with sig.exporter.lock:
            sig.exporter.xid.pop(first)
        e2e_wait("the first released", lambda: not held(kube, first), timeout=30)
        time.sleep(2 * SYNC)
        assert state(node(kube, second)) == "suspect", "the breaker closed by itself"
        # the explicit reset: the second is quarantined
        kube.kubectl("annotate", "lease", "remediation", "-n", namespace, f"{BREAKER_ANNOTATION}-")
        e2e_wait("the second quarantined after the reset", lambda: held(kube, second), timeout=20)
    finally:
        rem.stop()
        with sig.exporter.lock:
            sig.exporter.xid.clear()


def test_forged_draining_records_do_not_drain_past_the_breaker(kube, namespace, pool, sig, proxy, tmp_path):
    """Someone who may edit nodes writes `draining` records on 10 faulty nodes (with our taint
    on 5 of them): at most breakerMaxNodes (2) nodes are drained, oldest first; the 5 without
    our taint are recorded as cancelled and never drained. The earlier controller drained all."""
    nodes = pool("rem-forge", [1] * 10)
    sig.watch(nodes)
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"gpu-{i}", "namespace": namespace},
             "spec": {"nodeName": n, "tolerations": [{"operator": "Exists"}],
                      "containers": [{"name": "c", "image": "registry.example/e2e:1",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
            for i, n in enumerate(nodes)]
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    e2e_wait("10 pods Running", lambda: sum(p["status"].get("phase") == "Running"
                                            for p in kube.pods(namespace)) == 10, timeout=60)
    now = time.time()
    for i, n in enumerate(nodes):
        rec = json.dumps({"since": now - 100 + i, "reason": "forged", "owned": ["taint", "condition"], "evicted": []})
        kube.kubectl("annotate", "node", n, f"{ANN_STATE}=draining", f"{ANN_RECORD}={rec}")
        if i < 5:
            kube.kubectl("taint", "node", n, f"{TAINT_KEY}=true:NoSchedule")
    with sig.exporter.lock:       # every node faulty, so a forged record is not simply released
        sig.exporter.xid.update({n: 79 for n in nodes})
    e2e_wait("the Xids in Prometheus", lambda: all(sig.has_xid(n) for n in nodes), timeout=15)
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-forge", breakerMaxNodes=2, breakerMaxPercent=100)
    try:
        rem.start("g")
        try:
            e2e_wait("the untainted five recorded as cancelled",
                     lambda: all(state(node(kube, n)) == "cancelled" for n in nodes[5:]), timeout=20)
        except AssertionError:
            print(rem.log("g"))
            print({n: state(node(kube, n)) for n in nodes})
            raise
        time.sleep(3 * SYNC)
        evicted = {e["involvedObject"]["name"] for e in controller_events(kube, "GpuRemediationEvicted", namespace)}
        assert evicted == {"gpu-0", "gpu-1"}, f"drained past the breaker: {sorted(evicted)}"
        assert all(events_on(kube, "CircuitBreakerOpen", n) for n in nodes[2:5])
    finally:
        rem.stop()
        with sig.exporter.lock:
            for n in nodes:
                sig.exporter.xid.pop(n, None)


def test_stale_samples_and_a_replayed_answer_are_not_health(kube, namespace, pool, sig, proxy, tmp_path):
    """x's exporter freezes on its last reading (target up, sample timestamp fixed): Prometheus
    returns that sample for 5 minutes and the earlier controller took it for health. Then
    every answer arrives an hour old (replayed): not used either. Fresh data releases x.
    Meanwhile y's record is rewritten into something that does not parse, between two
    syncs: y alone is skipped (an Event), the rest of the fleet goes on."""
    x, y = pool("rem-stale", [1, 1])
    with sig.exporter.lock:
        sig.exporter.stamped.add(x)
    sig.watch([x, y])
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-stale", maxSampleAgeSeconds=4)
    try:
        rem.start("s")
        with sig.exporter.lock:
            sig.exporter.xid[x] = 79
        e2e_wait("x quarantined", lambda: held(kube, x), timeout=20)
        kube.kubectl("annotate", "node", y, f"{ANN_STATE}=drained", f'{ANN_RECORD}={{"since":"later"}}')
        with sig.exporter.lock:
            sig.exporter.xid.pop(x)                       # the Xid goes, the last reading stays
            sig.exporter.frozen[x] = time.time()
        e2e_wait("the Xid gone from Prometheus", lambda: not sig.has_xid(x), timeout=15)
        time.sleep(4 + 3 + 3 * SYNC)                   # past the age limit, window + hold-down + syncs
        assert x in sig.present(), "Prometheus no longer returns the frozen sample: the scenario is void"
        assert held(kube, x), "released on a stale sample"
        assert not held(kube, y)
        # the reports (Events after the sync's writes, gauges at its end): waited for
        e2e_wait("x's NoHealthEvidence Event", lambda: events_on(kube, "NoHealthEvidence", x), timeout=20)
        e2e_wait("y's InvalidRemediationRecord Event", lambda: events_on(kube, "InvalidRemediationRecord", y), timeout=20)
        e2e_wait("the gauges: x without evidence, y's record invalid",
                 lambda: rem.sample("s", "gpu_remediation_nodes_without_evidence") >= 1
                 and rem.sample("s", "gpu_remediation_invalid_records") == 1, timeout=20)
        # the exporter recovers but every answer is an hour old: Prometheus counts as down
        with sig.exporter.lock:
            sig.exporter.frozen.pop(x)
        proxy.set("age", age_s=3600.0)
        down = rem.sample("s", 'gpu_remediation_syncs_total{result="source-down"}')
        e2e_wait("a replayed answer is source-down",
                 lambda: rem.sample("s", 'gpu_remediation_syncs_total{result="source-down"}') >= down + 2, timeout=15)
        assert held(kube, x), "released on a replayed answer"
        proxy.set("pass")
        e2e_wait("x released on fresh evidence", lambda: not held(kube, x), timeout=30)
    finally:
        rem.stop()
        with sig.exporter.lock:
            sig.exporter.xid.pop(x, None)
            sig.exporter.frozen.pop(x, None)
            sig.exporter.stamped.discard(x)


def test_once_with_prometheus_unreachable_exits_3(kube, capsys):
    """`remediate --once` against an unreachable Prometheus (a closed loopback port): one
    line, exit 3 (TransientError), where it exited 0 with the sync counted as "skipped"."""
    import socket

    from gpuvalues import cli

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    capsys.readouterr()
    rc = cli.main(["remediate", "--once", "--dry-run", "--kubeconfig", str(kube.cluster.kubeconfig),
                   "--prometheus-url", f"http://127.0.0.1:{port}", "--metrics-address", ""])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("gpuvalues: error:")]
    assert rc == 3, err
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and lines[0].endswith("[GV036]"), err
    assert "Traceback" not in err


def test_nan_and_zero_are_no_fault_and_the_new_label_spelling_is_read(kube, namespace, pool, sig, proxy, tmp_path):
    """x has Xid 79 in the exporter, but every value Prometheus answers is NaN, then 0: no
    quarantine (the earlier controller counted any sample as a fault). y's exporter names
    its node with `hostname` (dcgm-exporter after d5e5f51): its Xid is read."""
    x, y = pool("rem-values", [1, 1])
    with sig.exporter.lock:
        sig.exporter.lowercase.add(y)
    sig.watch([x, y])
    rem = remediator(kube, namespace, tmp_path, proxy, "rem-values")
    try:
        with sig.exporter.lock:
            sig.exporter.xid[x] = 79
        e2e_wait("the Xid in Prometheus", lambda: sig.has_xid(x), timeout=15)
        for value in ("NaN", "0"):
            proxy.set("values", value=value)
            rem.start(f"v{value}")
            # three syncs that read the answers (healthy -> suspect -> quarantined takes two): the
            # negative below then means something even when the machine is slow
            e2e_wait(f"{value}: three syncs done", lambda v=value: rem.sample(
                f"v{v}", 'gpu_remediation_syncs_total{result="ok"}') >= 3, timeout=30)
            assert not held(kube, x) and state(node(kube, x)) == "healthy", f"quarantined on {value}"
            rem.stop()
        proxy.set("pass")
        with sig.exporter.lock:
            sig.exporter.xid[y] = 79
        rem.start("vpass")
        e2e_wait("x and y quarantined on real values", lambda: held(kube, x) and held(kube, y), timeout=30)
    finally:
        rem.stop()
        with sig.exporter.lock:
            sig.exporter.xid.pop(x, None)
            sig.exporter.xid.pop(y, None)
            sig.exporter.lowercase.discard(y)
