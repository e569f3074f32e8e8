"""`gpuvalues remediate` options and the controller's pure helpers (no cluster): bad
config is one line naming file:line:col and field with exit 2 and no traceback; metrics
text; the eviction rate limit."""
from __future__ import annotations

import argparse

import pytest

from gpuvalues import cli
from gpuvalues.operations import config, controller, drain, kubeapi, metrics


def run_cli(capsys, *args) -> tuple[int, str]:
    rc = cli.main(["remediate", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("text,where", [
    ("syncPeriodSeconds: 5\nbogus: 1\n", ":2:1: bogus: unknown key"),
    ("breakerMaxPercent: 150\n", ":1:20: breakerMaxPercent: 150 is greater than the maximum of 100"),
    ("signals:\n  exporterMissing: page\n", ":2:20: signals.exporterMissing: \"page\" is not one of"),
    ("signals:\n  gpuFire: true\n", ":2:3: signals.gpuFire: unknown key"),
    ("criticalXids: [79, x]\n", ":1:20: criticalXids[1]: expected integer"),
    ("criticalXids: [0]\n", "criticalXids[0]: 0 is less than the minimum of 1"),
    ("drain: maybe\n", ":1:8: drain: expected boolean"),
    ("breakerMaxNodes: true\n", "breakerMaxNodes: expected integer, got boolean"),
    # PromQL pieces are checked, never pasted: a label name and a duration only
    ('nodeLabel: "a\\"b"\n', ":1:12: nodeLabel: "),
    ('window: "5m] or vector(1)"\n', ":1:9: window: "),
    ("drainTimeoutSeconds: -1\n", "drainTimeoutSeconds: -1 is less than the minimum of 0"),
    ("syncPeriodSeconds: 10\nleaseDurationSeconds: 15\n", "leaseDurationSeconds: must be at least twice"),
    ("prometheusUrl: prom:9090\n", ":1:16: prometheusUrl: 'prom:9090' does not match"),
    ("a: [1\n", ":2:1: "),
    ("- 1\n", "the remediation config must be a YAML mapping"),
])
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, text, where):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    rc, err = run_cli(capsys, "--config", str(f))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpuvalues: error: {f}"), err
    assert where in lines[0], lines[0]
    assert "Traceback" not in err


def test_missing_config_file(tmp_path, capsys):
    rc, err = run_cli(capsys, "--config", str(tmp_path / "nope.yaml"))
    assert rc == 2 and "nope.yaml" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--config", "--kubeconfig"])
def test_fifo_config_or_kubeconfig_is_refused_not_waited_on(tmp_path, capsys, flag):
    import os

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)          # nobody writes: a plain open() would block forever
    rc, err = run_cli(capsys, flag, str(fifo), "--once")
    assert rc == 2 and "FIFO" in err and len(err.strip().splitlines()) == 1, err


def test_config_schema_is_the_values_schema_definition():
    """One definition of the keys: every key the chart's platform.remediation shares with the
    config refers to $defs/remediationConfig (no copy in the controller)."""
    from gpuvalues.schemas import VALUES_SCHEMA, load_schema

    values = load_schema(VALUES_SCHEMA)
    cfg = values["$defs"]["remediationConfig"]["properties"]
    rem = values["$defs"]["platform"]["properties"]["remediation"]["properties"]
    shared = {k for k in rem if k in cfg}
    assert shared and all(rem[k] == {"$ref": f"#/$defs/remediationConfig/properties/{k}"} for k in shared)
    assert not hasattr(config, "_KEYS") and not hasattr(controller, "_KEYS")
    # the one mapping left (schema name -> the signal's internal name) covers the schema's signals
    assert set(config._SIGNAL_KEYS) == set(cfg["signals"]["properties"])


def _args(**kw):
    base = dict(config=None, kubeconfig=None, context=None, prometheus_url=None, sync_period=None, dry_run=None,
                once=None, metrics_address=None, lease_namespace=None, lease_name=None, identity=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_flags_win_over_the_config(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("syncPeriodSeconds: 10\nprometheusUrl: http://a:9090\nsignals: {nvlink: false, exporterMissing: ignore}\n"
                 "nodeSelector: pool=a\n")
    o = config.options_from_args(_args(config=str(f), sync_period=4.0))
    assert o.sync_period_s == 4.0 and o.prometheus_url == "http://a:9090"
    assert o.lease_duration_s == 15.0          # default: max(15, 3 sync periods)
    assert "nvlink" not in o.signals.enabled and "exporter" not in o.signals.enabled
    assert o.node_selector == "pool=a"
    o = config.options_from_args(_args(config=str(f), sync_period=20.0))
    assert o.lease_duration_s == 60.0


def test_metrics_text():
    m = metrics.Metrics()
    m.nodes["drained"] = 2
    m.evictions = {"evicted": 3, "blocked": 1}
    m.breaker_trips = 4
    text = m.render()
    assert 'gpu_remediation_nodes{state="drained"} 2' in text
    assert 'gpu_remediation_evictions_total{outcome="blocked"} 1' in text
    assert "gpu_remediation_breaker_trips_total 4" in text
    assert text.endswith("\n")
    # every sample follows its TYPE line (the exposition format's grouping rule)
    seen = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            seen.add(line.split()[2])
        elif not line.startswith("#"):
            assert line.split("{")[0].split(" ")[0] in seen, line


def test_token_bucket():
    t = [0.0]
    b = drain.TokenBucket(60, burst=2, clock=lambda: t[0])   # 1 per second
    assert b.take_up_to(5) == 2
    assert b.take_up_to(5) == 0
    t[0] = 1.5
    assert b.take_up_to(5) == 1
    b.give_back(1)
    assert b.take_up_to(5) == 1


def test_repeated_reports_are_rate_limited():
    c = controller.Controller.__new__(controller.Controller)
    c._said = {}
    assert not c._repeated("n", "HeldByOther", False)
    assert c._repeated("n", "HeldByOther", False)          # same report next sync: suppressed
    assert not c._repeated("n", "GpuNodeQuarantined", True)  # a transition is always reported
    assert not c._repeated("m", "HeldByOther", False)


def test_healthz_reflects_the_loop_progress():
    t = [100.0]
    m = metrics.Metrics(clock=lambda: t[0])
    m.stale_after = 30.0
    assert m.healthy()
    t[0] = 129.0
    assert m.healthy()
    t[0] = 131.0                     # no heartbeat for longer than a sync period plus a lease
    assert not m.healthy()
    m.beat()
    assert m.healthy()


class _Elector:
    def __init__(self, leader):
        self.leader = leader

    def is_leader(self):
        return self.leader


@pytest.mark.parametrize("why,setup", [
    ("stopping", lambda c: c.stopping.set()),
    ("deadline", lambda c: setattr(c, "deadline", 0.0)),
    ("leader", lambda c: setattr(c, "elector", _Elector(False))),
])
def test_every_write_is_guarded(why, setup):
    import threading
    import time

    c = controller.Controller.__new__(controller.Controller)
    c.stopping, c.deadline, c.elector = threading.Event(), time.monotonic() + 60, _Elector(True)
    c._guard()                      # leader, inside the deadline: allowed
    setup(c)
    with pytest.raises(controller.SyncAborted, match=why):
        c._guard()


def test_api_requests_get_a_timeout():
    seen = []

    class Rest:
        def request(self, *args, **kw):
            seen.append(kw.get("_request_timeout"))

    class Api:
        rest_client = Rest()

    api = kubeapi.with_deadlines(Api(), 7.0)
    api.rest_client.request("GET", "u")
    api.rest_client.request("GET", "u", _request_timeout=1)
    assert seen == [(5.0, 7.0), 1]


# --- external answers: size caps and deadlines (issue 24) ------------------------------------

class _ApiServer:
    """A loopback HTTP server answering every GET with `body`, written `chunk` bytes at a time
    every `drip` seconds: the shapes of answer a size cap and a read deadline must stop (the
    one stand-in for an API server here, as no real one runs in unit tests)."""

    def __init__(self, body: bytes, chunk: int = 1 << 20, drip: float = 0.0):
        import http.server
        import threading

        outer = self
        self.stop = threading.Event()

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for i in range(0, len(body), chunk):
                        self.wfile.write(body[i:i + chunk])
                        self.wfile.flush()
                        if drip and outer.stop.wait(drip):
                            return
                except OSError:
                    pass

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def core(self):
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{self.srv.server_address[1]}"
        return client.CoreV1Api(kubeapi.with_deadlines(client.ApiClient(cfg), 5.0))

    def close(self):
        self.stop.set()
        self.srv.shutdown()
        self.srv.server_close()


def _pod_list(n: int) -> bytes:
    import json

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"x": "y" * 200}},
           "spec": {"nodeName": "n", "containers": [{"name": "c"}]}}
    return json.dumps({"kind": "PodList", "items": [pod] * n}).encode()


def test_the_drains_pod_list_has_a_size_cap(monkeypatch):
    """`Drainer.pods_to_drain` read the pod list whole (resp.data), whatever its size."""
    monkeypatch.setattr(drain, "MAX_LIST_BYTES", 1 << 16)    # the cap scaled down with the answer
    srv = _ApiServer(_pod_list(1_000))                        # ~300 KiB
    try:
        with pytest.raises(kubeapi.AnswerTooLarge, match="larger than 0.0625 MiB") as e:
            drain.Drainer(srv.core()).pods_to_drain("n")
        assert e.value.exit_code == 3 and e.value.code == "GV070"
        small = _ApiServer(_pod_list(10))                     # control: a normal answer is read
        try:
            assert drain.Drainer(small.core()).pods_to_drain("n")[2] == [("ns", "p", "no GPU")] * 10
        finally:
            small.close()
    finally:
        srv.close()


def test_the_drains_pod_list_has_a_deadline():
    """A server dripping its answer (64 bytes every 0.2 s: each read well inside the read
    timeout) is cut off at the caller's deadline, not after the whole answer (~60 s)."""
    import time

    srv = _ApiServer(_pod_list(60), chunk=64, drip=0.2)
    try:
        d = drain.Drainer(srv.core(), read_timeout=lambda: 1.0)
        t0 = time.monotonic()
        with pytest.raises(kubeapi.TransientError, match="deadline"):
            d.pods_to_drain("n")
        assert time.monotonic() - t0 < 3.0
    finally:
        srv.close()


def test_once_with_an_unreachable_api_server_exits_3(tmp_path, capsys):
    """`remediate --once` whose one sync cannot reach the API server: one line, exit 3 (it
    logged a traceback and exited 0)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                             # closed once the block ends
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
users: [{{name: u, user: {{token: t}}}}]
""")
    rc, err = run_cli(capsys, "--once", "--kubeconfig", str(kc), "--metrics-address", "")
    lines = [x for x in err.splitlines() if x.startswith("gpuvalues: error:")]
    assert rc == 3, err
    assert len(lines) == 1 and "API server cannot be reached" in lines[0] and lines[0].endswith("[GV036]"), err
    assert "Traceback" not in err


# --- evidence of health needs fresh samples ---------------------------------------------------

def test_stale_samples_are_no_evidence_of_health():
    from gpuvalues.operations import signals

    cfg = signals.SignalConfig(max_sample_age_s=60)
    at = 1_000_000.0
    res = {"presence": [{"metric": {"Hostname": "fresh"}, "value": [at, str(at - 15)]},
                        {"metric": {"Hostname": "edge"}, "value": [at, str(at - 60)]},
                        {"metric": {"Hostname": "old"}, "value": [at, str(at - 61)]},      # exporter stopped
                        {"metric": {"Hostname": "ancient"}, "value": [at, "1"]},
                        {"metric": {"Hostname": "nan"}, "value": [at, "NaN"]}]}
    ev = signals.evidence_from_results(res, cfg, ["fresh", "edge", "old", "ancient", "nan", "absent"])
    assert ev == {"fresh": True, "edge": True, "old": False, "ancient": False, "nan": False, "absent": False}
    assert "timestamp(DCGM_FI_DEV_GPU_TEMP" in cfg.queries()["presence"]
    assert "up == 1" in cfg.queries()["presence"]             # an exporter that is scraped, even without a job
    # a whole answer evaluated long ago (a replayed or cached answer) is refused
    signals.check_fresh(res, 60, now=at + 30)
    with pytest.raises(signals.PrometheusError, match="evaluated 3600 s from our clock"):
        signals.check_fresh(res, 60, now=at + 3600)
    with pytest.raises(ValueError):
        signals.SignalConfig(max_sample_age_s=float("nan"))


def test_max_sample_age_from_the_config(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("maxSampleAgeSeconds: 45\n")
    assert config.options_from_args(_args(config=str(f))).signals.max_sample_age_s == 45
    f.write_text("maxSampleAgeSeconds: 0\n")                   # 0: the default, 4 x 15 s
    assert config.options_from_args(_args(config=str(f))).signals.max_sample_age_s == 60
