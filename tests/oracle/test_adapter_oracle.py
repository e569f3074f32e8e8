"""Every prometheus-adapter config the project emits, run through the adapter's own
discovery (ci/oracle/adapter: config.FromFile, NamersFromConfig, its Prometheus client,
series registry) against a real Prometheus on loopback that scrapes exporter fixtures;
every HPA metric of the same fleet must be a name the adapter then serves.

The fixtures carry the real exporters' series names and label layout: dcgm-exporter's
(the integration tests' exposition, scraped with the job the rendered ServiceMonitor
gives), vLLM's (`vllm:` names, as vllm/engine/metrics.py exports them) and Triton's, with the
namespace/pod target labels prometheus-operator adds."""
from __future__ import annotations

import contextlib
import http.server
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import harness  # the harness's free_port: bind(0) races
from tests.integration import test_platform_prometheus as dcgm
from tests.oracle import oraclelib as ol

NS = "inference"
SERVER_PODS = ("gi-gpu-inference-5d9c7-abcde", "gi-gpu-inference-5d9c7-fghij")
VLLM_SERIES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:gpu_cache_usage_perc")
# Triton's per-model counters and gauge (triton-inference-server docs/user_guide/metrics.md).
TRITON_SERIES = (("nv_inference_queue_duration_us", "counter"), ("nv_inference_request_success", "counter"),
                 ("nv_inference_compute_infer_duration_us", "counter"),
                 ("nv_inference_pending_request_count", "gauge"))


def _server_exposition() -> str:
    lines = []
    for name in VLLM_SERIES:
        lines += [f"# TYPE {name} gauge"]
        for i, pod in enumerate(SERVER_PODS):
            lines.append(f'{name}{{model_name="m",namespace="{NS}",pod="{pod}"}} {i + 1}')
    for name, kind in TRITON_SERIES:
        lines += [f"# TYPE {name} {kind}"]
        for i, pod in enumerate(SERVER_PODS):
            lines.append(f'{name}{{model="m",version="1",namespace="{NS}",pod="{pod}"}} {100 * (i + 1)}')
    return "\n".join(lines) + "\n"


def _handler(body: bytes):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    return H


@contextlib.contextmanager
def _exporters():
    servers = []
    try:
        for body in (dcgm.exposition(), _server_exposition()):
            s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(body.encode()))
            threading.Thread(target=s.serve_forever, daemon=True).start()
            servers.append(s)
        yield [f"127.0.0.1:{s.server_address[1]}" for s in servers]
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


@contextlib.contextmanager
def _prometheus(jobs: list[dict]):
    tmp = Path(tempfile.mkdtemp(prefix="oracle-prom-"))
    port = harness.free_port()
    (tmp / "prometheus.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"},
                                                        "scrape_configs": jobs}))
    log = (tmp / "log").open("w")
    proc = subprocess.Popen([str(ol.ROOT / ".tools" / "bin" / "prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp / "log").read_text()
            with contextlib.suppress(OSError, ValueError):
                q = urllib.request.urlopen(f"{url}/api/v1/query?query=count(up%3D%3D1)", timeout=2).read()
                if '"value":[' in q.decode() and q.decode().rstrip("}]").endswith(f'"{len(jobs)}"'):
                    break
            time.sleep(0.2)
        else:
            raise AssertionError("Prometheus did not scrape every job within 30 s")
        time.sleep(1.5)   # one more scrape, so every series has a sample
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _jobs(objs, targets) -> list[dict]:
    """The DCGM job as the rendered ServiceMonitor makes it (or honoring the exporter's
    labels when the release has none), and the inference servers' job."""
    sms = [o for o in objs if o["kind"] == "ServiceMonitor" and "dcgm" in o["metadata"]["name"]]
    if sms:
        dcgm_job = dcgm.scrape_config(sms[0], targets[0])
    else:
        dcgm_job = {"job_name": "dcgm", "honor_labels": True, "static_configs": [{"targets": [targets[0]]}]}
    return [dcgm_job, {"job_name": "servers", "honor_labels": True, "scrape_interval": "1s",
                       "static_configs": [{"targets": [targets[1]]}]}]


def _adapter_config(objs) -> str | None:
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-prometheus-adapter"):
            return o["data"]["config.yaml"]
    return None


def _hpa_metrics(objs) -> list[tuple[str, str]]:
    out = []
    for o in objs:
        if o["kind"] == "HorizontalPodAutoscaler":
            for m in o["spec"].get("metrics", []):
                if m["type"] in ("Pods", "Object", "External"):
                    spec = m[m["type"].lower()]
                    out.append((m["type"], spec["metric"]["name"]))
    return out


class _Prometheuses:
    """One exporter pair and one Prometheus per distinct scrape setup, for the module
    (each Prometheus start costs seconds on a shared machine)."""

    def __init__(self, stack: contextlib.ExitStack):
        self.stack = stack
        self.targets = stack.enter_context(_exporters())
        self.running: dict[str, str] = {}

    def url(self, platform_objs) -> str:
        jobs = _jobs(platform_objs, self.targets)
        key = yaml.safe_dump(jobs)
        if key not in self.running:
            self.running[key] = self.stack.enter_context(_prometheus(jobs))
        return self.running[key]


@pytest.fixture(scope="module")
def proms():
    with contextlib.ExitStack() as stack:
        yield _Prometheuses(stack)


def _check(proms, where: str, platform_objs, hpa_objs):
    config = _adapter_config(platform_objs)
    assert config, f"{where}: no prometheus-adapter ConfigMap"
    served = ol.adapter_served(config, proms.url(platform_objs))
    assert "error" not in served, f"{where}: prometheus-adapter rejects its config: {served['error']}"
    pods = {s["metric"] for s in served["custom"] if s["resource"] == "pods"}
    external = {s["metric"] for s in served["external"]}
    wanted = _hpa_metrics(hpa_objs)
    assert wanted, f"{where}: no HPA metric to check"
    for kind, name in wanted:
        have = pods if kind == "Pods" else external if kind == "External" else \
            {s["metric"] for s in served["custom"]}
        assert name in have, (f"{where}: an HPA reads {kind} metric {name!r}; prometheus-adapter serves "
                              f"{sorted(have) or 'nothing'} for it")


# Scenarios whose release has both the adapter and HPAs (platform-only serves other
# releases' HPAs: the example fleets below check it against them).
_PLATFORM_SCENARIOS = [s for s in ol.chart_scenarios()
                       if _adapter_config(ol.rendered(s)) and _hpa_metrics(ol.rendered(s))]


@pytest.mark.parametrize("scenario", _PLATFORM_SCENARIOS)
def test_chart_scenario_adapter_serves_its_hpa_metrics(proms, scenario):
    objs = ol.rendered(scenario)
    _check(proms, f"chart scenario {scenario}", objs, objs)


def _example_fleet(example: str):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "v"
        proc = subprocess.run([str(ol.GPUVALUES), "-q", "values", str(ol.EXAMPLES / example), "-o", str(out)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        files = [out] if out.is_file() else sorted(out.glob("*.values.yaml"))
        rendered = []
        for f in files:
            p = subprocess.run([str(ol.HELM), "template", "gi", str(ol.CHART), "--namespace", NS,
                                "--kube-version", "1.34.0", "--values", str(f)], capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            rendered.append([d for d in yaml.safe_load_all(p.stdout) if d])
    return rendered


def _hpa_examples():
    out = []
    for ex in sorted(p.name for p in ol.EXAMPLES.glob("*.yaml")):
        if (ol.spec(ex).get("autoscaling") or {}).get("engine", "hpa") == "hpa":
            # (mixed-a100-h100-mig was xfail here until the platform got every workload's rules.)
            marks = []
            out.append(pytest.param(ex, marks=marks, id=ex))
    return out


@pytest.mark.parametrize("example", _hpa_examples())
def test_example_fleet_adapter_serves_every_hpa_metric(proms, example):
    """The platform release's adapter config against every workload release's HPAs."""
    releases = _example_fleet(example)
    platform = [objs for objs in releases if _adapter_config(objs)]
    assert len(platform) == 1, f"{example}: {len(platform)} releases render an adapter config"
    _check(proms, f"example {example}", platform[0], [o for objs in releases for o in objs])


# --- negative controls -----------------------------------------------------------------------

_RULE = {"seriesQuery": '{__name__="vllm:num_requests_waiting",namespace!="",pod!=""}',
         "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
         "name": {"matches": "^vllm:num_requests_waiting$", "as": "vllm_num_requests_waiting"},
         "metricsQuery": "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}


def _served_for(proms, rules: list) -> dict:
    return ol.adapter_served(yaml.safe_dump({"rules": rules}), proms.url([]))


def test_negative_control_metric_no_rule_serves_fails_the_check(proms):
    served = _served_for(proms, [_RULE])
    names = {s["metric"] for s in served["custom"] if s["resource"] == "pods"}
    assert "vllm_num_requests_waiting" in names          # the control rule works ...
    assert "vllm_num_requests_running" not in names      # ... and an HPA on this one would fail
    assert "DCGM_FI_DEV_GPU_UTIL" not in names


def test_negative_control_unknown_field_rejected_by_adapter(proms):
    bad = dict(_RULE, seriesQueryy="x")
    served = _served_for(proms, [bad])
    assert "error" in served and "seriesQueryy" in served["error"], served


def test_negative_control_bad_name_regex_rejected_by_adapter(proms):
    bad = dict(_RULE, name={"matches": "^vllm:(", "as": "x"})
    served = _served_for(proms, [bad])
    assert "error" in served and "naming scheme" in served["error"], served
