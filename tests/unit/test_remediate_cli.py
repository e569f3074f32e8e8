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
