"""The remediation controller's Prometheus signals (gpuvalues.operations.signals) against a
real Prometheus (.tools/bin/prometheus on loopback) scraping a fixture DCGM exporter served
by this test (the one fake: no GPUs): every query runs on the real PromQL engine, with
counters that rise during the test (`increase()` must see it) and counters that are high
but flat (it must not). Expected faults per node are written by hand from the fixture."""
from __future__ import annotations

import http.server
import subprocess
import threading
import time

import pytest
import yaml

from gpuvalues.operations.signals import Prometheus, PrometheusError, SignalConfig, faults_from_results
from tests.e2e.conftest import harness  # the harness's free_port (bind(0) races)
from tests.exposition import ExpositionHandler as _Handler

NODES = ["a", "b", "c", "d", "e", "f", "g"]


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
            lab = f'gpu="0",UUID="GPU-{n}",Hostname="{n}"'
            if n != "f":
                out.append(f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} 40")
            out.append(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{lab}}} "
                       f"{(2 if self.bumped else 0) if n == 'b' else 5 if n == 'c' else 0}")
            out.append(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{lab}}} {1 if n == 'd' else 0}")
            out.append(f"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL{{{lab}}} "
                       f"{(3 if self.bumped else 1) if n == 'e' else 7 if n == 'g' else 0}")
        out.append('DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-a",Hostname="a",xid="79",window_size_in_ms="300000"} 1')
        out.append('DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-c",Hostname="c",xid="13",window_size_in_ms="300000"} 4')
        return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def prom(prometheus_bin, tmp_path_factory):
    fx = Fixture()
    threading.Thread(target=fx.serve_forever, daemon=True).start()
    d = tmp_path_factory.mktemp("prom")
    port = harness.free_port()
    (d / "p.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": "dcgm", "honor_labels": True, "static_configs": [{"targets": [f"127.0.0.1:{fx.server_address[1]}"]}]}]}))
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


def test_every_signal_on_the_real_engine(prom):
    cfg = SignalConfig(window="1m")
    faults = faults_from_results(prom.collect(cfg), cfg, NODES)
    got = {n: sorted((f.kind, f.actionable) for f in fs) for n, fs in faults.items()}
    assert got == {
        "a": [("xid", True)],                 # critical Xid 79
        "b": [("dbe", True)],                 # DBE counter rose 0 -> 2
        "d": [("row-remap", True)],
        "e": [("nvlink", True)],              # recovery counter rose 1 -> 3
        "f": [("exporter-missing", False)],   # no GPU_TEMP: warn only
    }, got
    # c: application Xid 13 and a flat DBE counter of 5; g: a flat NVLink counter of 7: nothing.
    assert "Xid 79 on GPU 0" in faults["a"][0].detail


def test_signals_switch_off(prom):
    cfg = SignalConfig(enabled=frozenset({"row-remap"}), window="1m")
    assert set(prom.collect(cfg)) == {"row-remap"}
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
