"""The remediation controller's Prometheus signals (gpuvalues.operations.signals) against a
real Prometheus (.tools/bin/prometheus on loopback) scraping a fixture DCGM exporter served
by this test (the one fake: no GPUs): every query runs on the real PromQL engine, with
counters that rise during the test (`increase()` must see it) and counters that are high
but flat (it must not). Expected faults per node are written by hand from the fixture.

A second job ("spoof") serves series that claim nodes' Hostname (one even claims the job
label, honour_labels on): with the exporter job configured they are never read. The
fault-injecting proxy (tests/faultproxy.py, test-owned) sits between the client and the
real Prometheus for the failure modes: slow, hang, huge, 5xx, empty, bad values."""
from __future__ import annotations

import http.server
import subprocess
import threading
import time

import pytest
import yaml

from gpuvalues.operations.signals import (Prometheus, PrometheusError, SignalConfig, evidence_from_results,
                                          faults_from_results)
from tests.faultproxy import FaultProxy
from tests.e2e.conftest import harness  # the harness's free_port (bind(0) races)
from tests.exposition import ExpositionHandler as _Handler

NODES = ["a", "b", "c", "d", "e", "f", "g", "h"]


class Fixture(http.server.ThreadingHTTPServer):
    """Per node one GPU (gpu="0", Hostname=<node>): GPU_TEMP on all but f; an Xid 79 count
    on a and an application Xid 13 on c; DBE counter rising on b (after `bump`), flat at 5
    on c; row-remap failure on d; NVLink recovery counter rising on e (after `bump`)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bumped = False

    def exposition(self) -> str:
        out = []
        for n in NODES:
            # h: a newer dcgm-exporter's lowercase label (NVIDIA/dcgm-exporter#655, d5e5f51)
            lab = f'gpu="0",UUID="GPU-{n}",{"hostname" if n == "h" else "Hostname"}="{n}"'
            if n != "f":
                out.append(f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} 40")
            out.append(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{lab}}} "
                       f"{(2 if self.bumped else 0) if n == 'b' else 5 if n == 'c' else 0}")
            out.append(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{lab}}} {1 if n == 'd' else 0}")
            out.append(f"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL{{{lab}}} "
                       f"{(3 if self.bumped else 1) if n == 'e' else 7 if n == 'g' else 0}")
        out.append('DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-a",Hostname="a",xid="79",window_size_in_ms="300000"} 1')
        out.append('DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-c",Hostname="c",xid="13",window_size_in_ms="300000"} 4')
        out.append('DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-h",hostname="h",xid="48",window_size_in_ms="300000"} 1')
        return "\n".join(out) + "\n"


class Spoof(http.server.ThreadingHTTPServer):
    """Another job's target: series that claim nodes g (plain) and e (with job="dcgm")."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)

    def exposition(self) -> str:
        return ('DCGM_EXP_XID_ERRORS_COUNT{gpu="0",Hostname="g",xid="79"} 1\n'
                'DCGM_EXP_XID_ERRORS_COUNT{gpu="1",Hostname="b",xid="79",job="dcgm"} 1\n'
                'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="f",job="dcgm"} 40\n')


@pytest.fixture(scope="module")
def prom(prometheus_bin, tmp_path_factory):
    fx = Fixture()
    spoof = Spoof()
    threading.Thread(target=fx.serve_forever, daemon=True).start()
    threading.Thread(target=spoof.serve_forever, daemon=True).start()
    d = tmp_path_factory.mktemp("prom")
    port = harness.free_port()
    (d / "p.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": "dcgm", "honor_labels": True, "static_configs": [
            {"targets": [f"127.0.0.1:{fx.server_address[1]}"], "labels": {"namespace": "gpu-ops"}}]},
        {"job_name": "spoof", "honor_labels": True, "static_configs": [
            {"targets": [f"127.0.0.1:{spoof.server_address[1]}"], "labels": {"namespace": "gpu-ops"}}]}]}))
    log = (d / "log").open("w")
    proc = subprocess.Popen([prometheus_bin, f"--config.file={d / 'p.yml'}", f"--storage.tsdb.path={d / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], stdout=log,
                            stderr=subprocess.STDOUT)
    client = Prometheus(f"http://127.0.0.1:{port}", timeout=5)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "prometheus exited"
            try:
                if len(client.query("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")) == len(NODES):
                    break
            except PrometheusError:
                pass
            assert time.monotonic() < deadline, "Prometheus never scraped the fixture"
            time.sleep(0.2)
        time.sleep(2.5)          # a few flat samples first
        fx.bumped = True         # then the counters of b and e rise
        time.sleep(2.5)
        yield client
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        fx.shutdown()
        fx.server_close()
        spoof.shutdown()
        spoof.server_close()


EXPECTED = {
    "a": [("xid", True)],                 # critical Xid 79
    "b": [("dbe", True)],                 # DBE counter rose 0 -> 2
    "d": [("row-remap", True)],
    "e": [("nvlink", True)],              # recovery counter rose 1 -> 3
    "f": [("exporter-missing", False)],   # no GPU_TEMP: warn only
    "h": [("xid", True)],                 # the lowercase hostname label
}


def test_every_signal_on_the_real_engine(prom):
    cfg = SignalConfig(window="1m", exporter_job="dcgm", exporter_namespace="gpu-ops")
    faults = faults_from_results(prom.collect(cfg), cfg, NODES)
    got = {n: sorted((f.kind, f.actionable) for f in fs) for n, fs in faults.items()}
    assert got == EXPECTED, got
    # c: application Xid 13 and a flat DBE counter of 5; g: a flat NVLink counter of 7: nothing.
    assert "Xid 79 on GPU 0" in faults["a"][0].detail


def test_another_jobs_series_are_never_read(prom):
    """The spoof job's Hostname="g" Xid, its job="dcgm" Xid on b and its GPU_TEMP for f are
    dropped with the job (and namespace) configured; without them they count (the control)."""
    cfg = SignalConfig(window="1m", exporter_job="dcgm", exporter_namespace="gpu-ops")
    assert evidence_from_results(prom.collect(cfg), cfg, NODES)["f"] is False
    loose = SignalConfig(window="1m")
    faults = faults_from_results(prom.collect(loose), loose, NODES)
    assert [f.kind for f in faults["g"]] == ["xid"] and "xid" in [f.kind for f in faults["b"]]
    assert "f" not in faults           # the spoofed GPU_TEMP passed for evidence
    other_ns = SignalConfig(window="1m", exporter_job="dcgm", exporter_namespace="elsewhere")
    assert faults_from_results(prom.collect(other_ns), other_ns, []) == {}


def test_label_values_are_escaped_on_the_real_parser(prom):
    evil = 'dcgm"} or vector(1) or up{job="'
    cfg = SignalConfig(window="1m", exporter_job=evil, exporter_namespace='x\\"\n')
    res = prom.collect(cfg)               # every query parses; none matches anything
    assert all(v == [] for v in res.values()), res


def test_signals_switch_off(prom):
    cfg = SignalConfig(enabled=frozenset({"row-remap"}), window="1m")
    assert set(prom.collect(cfg)) == {"row-remap", "presence"}
    assert {n: [f.kind for f in fs] for n, fs in faults_from_results(prom.collect(cfg), cfg, NODES).items()} == \
        {"d": ["row-remap"]}


def test_an_xid_list_of_application_codes_would_fire(prom):
    """Control: the Xid query does match c's series when 13 is (wrongly) listed."""
    cfg = SignalConfig(enabled=frozenset({"xid"}), critical_xids=(13,), window="1m")
    assert set(faults_from_results(prom.collect(cfg), cfg, NODES)) == {"c"}


def test_prometheus_errors_are_errors(prom):
    with pytest.raises(PrometheusError, match="bad_data"):
        prom.query("max by (")
    with pytest.raises(PrometheusError, match="query failed"):
        Prometheus(f"http://127.0.0.1:{harness.free_port()}", timeout=2).query("up")


@pytest.fixture
def proxy(prom):
    px = FaultProxy(prom.url).start()
    yield px
    px.stop()


def test_proxy_passes_unchanged(prom, proxy):
    cfg = SignalConfig(window="1m", exporter_job="dcgm")
    via = Prometheus(proxy.url, timeout=5)
    def kinds(client):     # increase() extrapolates with the query time: compare kinds, not values
        return {n: sorted(f.kind for f in fs) for n, fs in faults_from_results(client.collect(cfg), cfg, NODES).items()}

    assert kinds(via) == kinds(prom)
    assert proxy.requests == len(cfg.queries())


@pytest.mark.parametrize("mode,kw,match", [
    ("slow", {"slow_s": 0.5}, "deadline exceeded"),      # one byte every 0.5 s: cut at the 2 s deadline
    ("hang", {}, "deadline exceeded"),
    ("huge", {"huge_series": 250_000}, "larger than 8 MiB"),
    ("error", {}, "HTTP 503"),
])
def test_a_failing_prometheus_is_an_error_within_the_deadline(proxy, mode, kw, match):
    import time
    import tracemalloc

    proxy.set(mode, **kw)
    client = Prometheus(proxy.url, timeout=2)
    tracemalloc.start()
    t0 = time.monotonic()
    with pytest.raises(PrometheusError, match=match):
        client.query("up")
    took = time.monotonic() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert took < 4, f"{mode}: {took:.1f}s for a 2 s deadline"
    assert peak < 64 * 2**20, f"{mode}: {peak / 2**20:.0f} MiB"


def test_empty_or_dropped_answers_give_no_evidence(prom, proxy):
    cfg = SignalConfig(window="1m", exporter_job="dcgm")
    client = Prometheus(proxy.url, timeout=5)
    assert evidence_from_results(client.collect(cfg), cfg, ["a", "b"]) == {"a": True, "b": True}
    proxy.set("drop", drop_nodes={"a"})
    assert evidence_from_results(client.collect(cfg), cfg, ["a", "b"]) == {"a": False, "b": True}
    assert "a" not in faults_from_results(client.collect(cfg), cfg, ["b"])     # a's Xid gone with it
    proxy.set("empty")
    assert evidence_from_results(client.collect(cfg), cfg, ["a", "b"]) == {"a": False, "b": False}


@pytest.mark.parametrize("value", ["NaN", "0", "-1", "+Inf"])
def test_samples_without_metric_meaning_are_not_faults(prom, proxy, value):
    cfg = SignalConfig(window="1m", exporter_job="dcgm")
    proxy.set("values", value=value)
    assert faults_from_results(Prometheus(proxy.url, timeout=5).collect(cfg), cfg, []) == {}
