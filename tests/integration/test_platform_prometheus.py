"""The Prometheus adapter rules the chart renders, run against a real Prometheus.

A fixture exporter (http.server on loopback) serves DCGM exposition text like
dcgm-exporter's with pod attribution on: whole GPUs, MIG instances (GPU_I_ID,
GPU_I_PROFILE), a pod holding two GPUs, a pod of the same name in another namespace and
an idle GPU with no pod labels, and a GPU whose series already carry
exported_pod/exported_namespace (as re-exported by a Prometheus that scraped with
honorLabels false, e.g. through federation). A real Prometheus (Debian's 2.42, on 127.0.0.1, temp
storage) scrapes it with a scrape config built from the rendered ServiceMonitor (its
honorLabels and relabelings, after the target labels prometheus-operator generates).

Each rendered adapter rule is expanded exactly as prometheus-adapter does for "this
metric for these pods in this namespace" (pkg/naming/metrics_query.go: Series = the
series name; LabelMatchers = `<namespace label>="<ns>"` then `<pod label>=~"a|b"` (or `="a"`
for one pod), joined by ","; GroupBy = the pod label) and the query is sent to Prometheus.
Expected values are the hand-computed means of the fixture's numbers.
"""
from __future__ import annotations

import contextlib
import http.server
import json
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import render
from tests.e2e.conftest import harness  # the harness's free_port: bind(0) races

NS = "inference"
EXPORTER_NS = "gpu-system"
EXPORTER_POD = "gi-gpu-inference-dcgm-exporter-x7k2p"
NODE = "gpu-node-1"
PODS = ["infer-a", "infer-b", "infer-c", "infer-m1", "infer-m2"]

# (gpu, MIG instance or None, namespace, pod, GPU_UTIL %, GR_ENGINE_ACTIVE ratio).
# GPU_UTIL is not reported for MIG instances (NVIDIA/DCGM#80), so those rows have None.
GPUS = [
    ("0", None, NS, "infer-a", 40, 0.40),
    ("1", None, NS, "infer-b", 80, 0.80),
    ("2", None, NS, "infer-c", 30, 0.30),       # infer-c holds two GPUs ...
    ("3", None, NS, "infer-c", 70, 0.70),       # ... its value is the mean, 50 / 0.5
    ("4", ("1", "1g.10gb"), NS, "infer-m1", None, 0.25),
    ("4", ("2", "1g.10gb"), NS, "infer-m2", None, 0.75),
    ("5", None, None, None, 0, 0.0),             # idle: no pod attribution at all
    ("6", None, "other", "infer-a", 10, 0.10),   # same pod name, other namespace
    ("7", None, NS, "infer-x", 20, 0.20),        # only exported_* labels (see EXPORTED_ONLY)
]
EXPORTED_ONLY = {"7"}
EXPECTED = {
    "DCGM_FI_DEV_GPU_UTIL": {"infer-a": 40, "infer-b": 80, "infer-c": 50},
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": {"infer-a": 0.4, "infer-b": 0.8, "infer-c": 0.5,
                                      "infer-m1": 0.25, "infer-m2": 0.75},
}
# With honorLabels false every series is the exporter pod's: mean over all its GPUs.
EXPORTER_MEAN_UTIL = (40 + 80 + 30 + 70 + 0 + 10 + 20) / 7

VALUES = {
    "autoscaling": {"metrics": [
        {"name": "DCGM_FI_DEV_GPU_UTIL", "target": "60"},
        {"name": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "target": "700m"},
    ]},
    "platform": {
        "dcgmExporter": {"enabled": True, "serviceMonitor": {"force": True}},
        "prometheusAdapter": {"enabled": True},
    },
}


def exposition() -> str:
    """DCGM exposition text in dcgm-exporter's label layout (render_metrics.go)."""
    lines = []
    for field, col in (("DCGM_FI_DEV_GPU_UTIL", 4), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 5)):
        lines += [f"# HELP {field} fixture", f"# TYPE {field} gauge"]
        for row in GPUS:
            if row[col] is None:
                continue
            gpu, mig, ns, pod = row[:4]
            labels = [f'gpu="{gpu}"', f'UUID="GPU-0000000{gpu}"', f'pci_bus_id="00000000:0{gpu}:00.0"',
                      f'device="nvidia{gpu}"', 'modelName="NVIDIA A100-SXM4-80GB"']
            if mig:
                labels += [f'GPU_I_PROFILE="{mig[1]}"', f'GPU_I_ID="{mig[0]}"']
            labels.append(f'Hostname="{NODE}"')
            if pod and gpu in EXPORTED_ONLY:
                labels += [f'exported_namespace="{ns}"', f'exported_pod="{pod}"']
            elif pod:
                labels += ['container="server"', f'namespace="{ns}"', f'pod="{pod}"']
            lines.append(f"{field}{{{','.join(labels)}}} {row[col]}")
    return "\n".join(lines) + "\n"


class _Exporter(http.server.BaseHTTPRequestHandler):
    body = exposition().encode()

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def exporter():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def scrape_config(servicemonitor: dict, target: str, *, chart_relabelings: bool = True) -> dict:
    """The scrape job prometheus-operator generates for the ServiceMonitor's endpoint
    (namespace/service/pod/container/job/endpoint target labels from Kubernetes SD, as in
    prometheus-operator pkg/prometheus/testdata/HonorLabelsOverriding.golden, then the
    endpoint's own relabelings), with Kubernetes SD replaced by a static target carrying
    the same __meta_* labels."""
    ep = servicemonitor["spec"]["endpoints"][0]
    service = servicemonitor["metadata"]["name"]
    relabel = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "$1"},
        {"target_label": "endpoint", "replacement": ep["port"]},
    ]
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    if chart_relabelings:
        for r in ep.get("relabelings", []):
            relabel.append({keys.get(k, k): (v.lower() if k == "action" else v) for k, v in r.items()})
    return {
        "job_name": f"serviceMonitor/{EXPORTER_NS}/{service}/0",
        "honor_labels": ep["honorLabels"],
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "metrics_path": ep["path"],
        "static_configs": [{"targets": [target], "labels": {
            "__meta_kubernetes_namespace": EXPORTER_NS,
            "__meta_kubernetes_service_name": service,
            "__meta_kubernetes_pod_name": EXPORTER_POD,
            "__meta_kubernetes_pod_container_name": "dcgm-exporter",
            "__meta_kubernetes_pod_node_name": NODE,
        }}],
        "relabel_configs": relabel,
    }


class Prometheus:
    """A real Prometheus on loopback; stopped (and waited for) on exit."""

    def __init__(self, binary: str, tmp: Path, job: dict):
        self.port = harness.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp / "prometheus.yml"
        cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}))
        self.log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        return self.api("query", query=promql)["result"]

    def wait_scraped(self, timeout: float = 30.0) -> None:
        """Until the target is up and the newest samples are in (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "prometheus exited; see its log"
            with contextlib.suppress(OSError, ValueError):
                if self.query("up == 1") and self.query("count(DCGM_FI_PROF_GR_ENGINE_ACTIVE)"):
                    return
            time.sleep(0.2)
        raise AssertionError(f"no successful scrape within {timeout}s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def running_prometheus(binary: str, tmp: Path, job: dict):
    prom = Prometheus(binary, tmp, job)
    try:
        prom.wait_scraped()
        yield prom
    finally:
        prom.stop()


def rendered(helm: str, tmp: Path, values: dict) -> tuple[list[dict], dict]:
    """(adapter rules, ServiceMonitor) from the chart."""
    vf = tmp / "values.yaml"
    vf.write_text(yaml.safe_dump(values))
    objs = render(helm, vf, namespace=NS)
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-prometheus-adapter"))
    sm = next(o for o in objs if o["kind"] == "ServiceMonitor")
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert set(config) == {"rules"}, "only per-metric rules, no default rules"
    return config["rules"], sm


def expand(rule: dict, namespace: str, pods: list[str]) -> str:
    """prometheus-adapter's expansion of metricsQuery for a pod list in a namespace."""
    overrides = rule["resources"]["overrides"]
    ns_label = next(label for label, r in overrides.items() if r["resource"] == "namespace")
    pod_label = next(label for label, r in overrides.items() if r["resource"] == "pod")
    series = rule["name"]["matches"].strip("^$")
    template = rule["metricsQuery"]
    assert set(re.findall(r"<<.*?>>", template)) <= {"<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"}
    pod_matcher = f'{pod_label}={json.dumps(pods[0])}' if len(pods) == 1 else \
        f'{pod_label}=~{json.dumps("|".join(pods))}'
    matchers = f'{ns_label}={json.dumps(namespace)},{pod_matcher}'
    return (template.replace("<<.Series>>", series)
            .replace("<<.LabelMatchers>>", matchers)
            .replace("<<.GroupBy>>", pod_label))


def per_pod(prom: Prometheus, rule: dict, namespace: str, pods: list[str]) -> dict[str, list[float]]:
    """What the adapter would return: value(s) per pod label value."""
    pod_label = next(label for label, r in rule["resources"]["overrides"].items() if r["resource"] == "pod")
    out: dict[str, list[float]] = {}
    for sample in prom.query(expand(rule, namespace, pods)):
        out.setdefault(sample["metric"].get(pod_label, ""), []).append(float(sample["value"][1]))
    return out


def rule_for(rules: list[dict], series: str) -> dict:
    matches = [r for r in rules if r["name"]["matches"] == f"^{series}$"]
    assert len(matches) == 1, f"expected one rule for {series}, got {len(matches)}"
    return matches[0]


def test_expand_matches_adapter_test_cases():
    """Our expansion reproduces prometheus-adapter's own TestBuildSelector expectations
    (pkg/naming/metrics_query_test.go): `resource=~"bar|baz"` and `resource="bar"`."""
    rule = {"resources": {"overrides": {"namespaces": {"resource": "namespace"}, "resource": {"resource": "pod"}}},
            "name": {"matches": "^foo$"}, "metricsQuery": "<<.LabelMatchers>> <<.GroupBy>> <<.Series>>"}
    assert expand(rule, "default", ["bar", "baz"]) == 'namespaces="default",resource=~"bar|baz" resource foo'
    assert expand(rule, "default", ["bar"]) == 'namespaces="default",resource="bar" resource foo'


def test_direct_labels_one_value_per_pod(helm4, prometheus_bin, exporter, tmp_path):
    rules, sm = rendered(helm4, tmp_path, VALUES)
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    with running_prometheus(prometheus_bin, tmp_path, scrape_config(sm, exporter)) as prom:
        for series, expected in EXPECTED.items():
            rule = rule_for(rules, series)
            # Discovery (the adapter's /api/v1/series call) finds only attributed series.
            found = prom.api("series", **{"match[]": rule["seriesQuery"]})
            assert {s.get("pod") for s in found} == set(expected) | {"infer-a"}
            assert all(s.get("pod") for s in found)
            # infer-x's series carry only exported_* labels: the direct rule ignores them.
            got = per_pod(prom, rule, NS, PODS + ["infer-x"])
            assert set(got) == set(expected), (series, got)
            for pod, want in expected.items():
                assert len(got[pod]) == 1, (series, pod, got[pod])
                assert got[pod][0] == pytest.approx(want), (series, pod)
            # A single pod is queried with `pod="x"`: same value.
            assert per_pod(prom, rule, NS, ["infer-c"]) == {"infer-c": [pytest.approx(expected["infer-c"])]}
            # The exporter's own pod gets no value (idle GPUs are nobody's).
            assert per_pod(prom, rule, EXPORTER_NS, [EXPORTER_POD]) == {}
        # sum would have reported 100 % for the pod with two GPUs: avg is what the rule uses.
        util = rule_for(rules, "DCGM_FI_DEV_GPU_UTIL")
        summed = prom.query(expand({**util, "metricsQuery": util["metricsQuery"].replace("avg(", "sum(")}, NS, ["infer-c"]))
        assert float(summed[0]["value"][1]) == pytest.approx(100)


def test_honor_labels_without_chart_relabelings_gives_idle_gpus_to_the_exporter(
        helm4, prometheus_bin, exporter, tmp_path):
    """Why the ServiceMonitor drops the target's pod label: under honorLabels an idle GPU
    (no pod label from the exporter) inherits the exporter pod's."""
    rules, sm = rendered(helm4, tmp_path, VALUES)
    job = scrape_config(sm, exporter, chart_relabelings=False)
    with running_prometheus(prometheus_bin, tmp_path, job) as prom:
        rule = rule_for(rules, "DCGM_FI_DEV_GPU_UTIL")
        # GPU 5 (idle, 0) and GPU 7 (no pod label, 20) both land on the exporter pod.
        assert per_pod(prom, rule, EXPORTER_NS, [EXPORTER_POD]) == {EXPORTER_POD: [pytest.approx(10.0)]}
        # The workload's pods are still right.
        got = per_pod(prom, rule, NS, PODS)
        assert {p: v[0] for p, v in got.items()} == pytest.approx(EXPECTED["DCGM_FI_DEV_GPU_UTIL"])


def test_honor_labels_false_breaks_direct_rules_and_exported_mode_fixes_it(
        helm4, prometheus_bin, exporter, tmp_path):
    values = json.loads(json.dumps(VALUES))
    values["platform"]["dcgmExporter"]["serviceMonitor"]["honorLabels"] = False
    # `auto` (the default) would already pick the exported labels here: force the direct
    # rules to show what goes wrong with them.
    values["platform"]["prometheusAdapter"]["exporterLabels"] = "direct"
    direct_rules, sm = rendered(helm4, tmp_path, values)
    assert sm["spec"]["endpoints"][0]["honorLabels"] is False
    values["platform"]["prometheusAdapter"]["exporterLabels"] = "auto"
    exported_rules, _ = rendered(helm4, tmp_path, values)
    with running_prometheus(prometheus_bin, tmp_path, scrape_config(sm, exporter)) as prom:
        util = rule_for(direct_rules, "DCGM_FI_DEV_GPU_UTIL")
        # What goes wrong: the workload's pods get nothing (their labels became
        # exported_pod/exported_namespace) ...
        assert per_pod(prom, util, NS, PODS) == {}
        # ... and the exporter pod "owns" every GPU on the node: one blended value.
        got = per_pod(prom, util, EXPORTER_NS, [EXPORTER_POD])
        assert got == {EXPORTER_POD: [pytest.approx(EXPORTER_MEAN_UTIL)]}
        # The exported mode maps exported_namespace/exported_pod and is right again.
        for series, expected in EXPECTED.items():
            rule = rule_for(exported_rules, series)
            assert set(rule["resources"]["overrides"]) == {"exported_namespace", "exported_pod"}
            got = per_pod(prom, rule, NS, PODS)
            assert {p: len(v) for p, v in got.items()} == {p: 1 for p in expected}
            assert {p: v[0] for p, v in got.items()} == pytest.approx(expected)
            assert per_pod(prom, rule, EXPORTER_NS, [EXPORTER_POD]) == {}
            # Series that arrived with exported_* labels already count for their pod.
            want_x = {"DCGM_FI_DEV_GPU_UTIL": 20, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.2}[series]
            assert per_pod(prom, rule, NS, ["infer-x"]) == {"infer-x": [pytest.approx(want_x)]}
