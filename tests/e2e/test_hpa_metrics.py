"""The whole autoscaling path with real parts: a fixture DCGM exporter (served by this test,
the one fake: there are no GPUs) -> a real Prometheus (.tools/bin/prometheus, honor_labels as
the chart's ServiceMonitor sets it) -> the real prometheus-adapter v0.12.0 with the rules the
chart renders -> the API server's aggregation layer (custom.metrics.k8s.io) -> the real HPA
controller in kube-controller-manager, which scales the chart's Deployment when the GPU
metric rises.

The adapter runs on the host, not as the chart's (kwok-faked) adapter pod: the chart's
adapter Service is turned into `ExternalName: 127.0.0.1` and its APIService pointed at the
host port, the one way the aggregator reaches a host process without a cluster network.
"""
from __future__ import annotations

import http.server
import json
import math
import threading

import pytest

from tests.e2e import e2elib
from tests.e2e.e2elib import CHART
from tests.exposition import ExpositionHandler as _Handler

METRIC = "DCGM_FI_DEV_GPU_UTIL"


class Exporter(http.server.ThreadingHTTPServer):
    """DCGM exposition text for the pods in `util` (pod name -> GPU utilisation %), with
    the pod attribution labels dcgm-exporter adds (DCGM_EXPORTER_KUBERNETES)."""

    def __init__(self, namespace: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.namespace = namespace
        self.util: dict[str, float] = {}
        self.lock = threading.Lock()

    def exposition(self) -> str:
        lines = [f"# HELP {METRIC} GPU utilization (in %).", f"# TYPE {METRIC} gauge"]
        with self.lock:
            for i, (pod, value) in enumerate(sorted(self.util.items())):
                lines.append(f'{METRIC}{{gpu="0",UUID="GPU-e2e-{i:04d}",device="nvidia0",'
                             f'modelName="NVIDIA A100-SXM4-80GB",Hostname="dcgm-exporter-e2e",'
                             f'container="server",namespace="{self.namespace}",pod="{pod}"}} {value}')
        return "\n".join(lines) + "\n"


def test_hpa_scales_on_gpu_metric_through_real_adapter(kube, namespace, prometheus_bin, tmp_path):
    cluster = kube.cluster
    if cluster.bin.adapter is None:
        pytest.fail("prometheus-adapter binary missing: run `bash ci/e2e/build.sh adapter`")
    release = "hpa"
    extra = {"platform": {"prometheusAdapter": {"enabled": True}},
             # react at once (the chart's default waits 60 s before a scale-up)
             "autoscaling": {"behavior": {"scaleUp": {"stabilizationWindowSeconds": 0}}}}
    objects = e2elib.render(release, namespace, [], extra)
    hpa = next(o for o in objects if o["kind"] == "HorizontalPodAutoscaler")
    [m] = [m for m in hpa["spec"]["metrics"] if m["type"] == "Pods" and m["pods"]["metric"]["name"] == METRIC]
    target = float(m["pods"]["target"]["averageValue"])
    lo = int(hpa["spec"]["minReplicas"])
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and "prometheus-adapter" in o["metadata"]["name"])
    svc = next(o for o in objects if o["kind"] == "Service" and "prometheus-adapter" in o["metadata"]["name"])
    api = next(o for o in objects if o["kind"] == "APIService")
    dep = next(o for o in objects if o["kind"] == "Deployment" and e2elib.is_gpu_workload(o))
    sel, name = e2elib.selector_string(dep["spec"]["selector"]["matchLabels"]), dep["metadata"]["name"]

    exporter = Exporter(namespace)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    procs = []
    try:
        # Prometheus scraping the exporter every second, honor_labels as the chart's ServiceMonitor
        prom, prom_url = e2elib.start_prometheus(cluster, prometheus_bin, tmp_path, "dcgm-exporter",
                                                 exporter.server_address[1])
        procs.append(prom)
        rules = tmp_path / "adapter-rules.yaml"
        rules.write_text(cm["data"]["config.yaml"])
        adapter_port, adapter = cluster.start_adapter(rules, f"{prom_url}/")
        procs.append(adapter)

        kube.helm("install", release, str(CHART), "-n", namespace, values=extra)
        cluster.expose_host_service(namespace, svc["metadata"]["name"], api["metadata"]["name"], adapter_port)
        kube.wait(f"APIService {api['metadata']['name']} Available", lambda: any(
            c["type"] == "Available" and c["status"] == "True"
            for c in kube.json("get", "apiservice", api["metadata"]["name"])["status"].get("conditions", [])),
            timeout=60)

        pods = kube.wait(f"{lo} Ready pods", lambda: (lambda ps: ps if len(ps) == lo else None)(
            [p["metadata"]["name"] for p in kube.pods(namespace, sel) if e2elib.pod_is_ready(p)]))
        with exporter.lock:
            exporter.util = {p: 30.0 for p in pods}  # below target: stay at minReplicas
        raw = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/*/{METRIC}"

        def served():
            res = kube.kubectl("get", "--raw", raw, check=False)
            if res.returncode:
                return None
            items = json.loads(res.stdout)["items"]
            got = {i["describedObject"]["name"]: i["value"] for i in items}
            return got if set(got) == set(pods) else None

        got = kube.wait("the custom metrics API serving every pod's GPU metric", served, timeout=90, interval=1)
        assert all(v == "30" for v in got.values()), got

        # The HPA reads it: current average 30 < target, replicas stay at the minimum.
        kube.wait("HPA reporting the metric", lambda: any(
            cm.get("pods", {}).get("current", {}).get("averageValue") == "30"
            for cm in kube.json("get", "hpa", hpa["metadata"]["name"], "-n", namespace)["status"].get("currentMetrics") or []),
            timeout=60)
        assert kube.json("get", "deployment", name, "-n", namespace)["spec"]["replicas"] == lo

        # The GPU metric rises to 100%: desired = ceil(lo * 100 / target) (autoscaling/v2 algorithm).
        with exporter.lock:
            exporter.util = {p: 100.0 for p in pods}
        want = math.ceil(lo * 100 / target)
        assert want > lo
        kube.wait(f"the HPA scaling {name} to {want}", lambda: kube.json(
            "get", "deployment", name, "-n", namespace)["spec"]["replicas"] >= want, timeout=90, interval=1)
        # the HPA controller records the Event after the scale update, through its
        # asynchronous event broadcaster: waited for, not read the moment the replicas change
        def rescaled():
            events = kube.kubectl("get", "events", "-n", namespace, "--field-selector",
                                  f"involvedObject.name={hpa['metadata']['name']},reason=SuccessfulRescale",
                                  "-o", "json").stdout
            return [e["message"] for e in json.loads(events)["items"] if METRIC in e["message"]]
        kube.wait(f"a SuccessfulRescale Event naming {METRIC}", rescaled, timeout=60)
    finally:
        for p in reversed(procs):
            cluster.terminate(p)
        exporter.shutdown()
        exporter.server_close()

