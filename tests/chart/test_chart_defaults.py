"""Chart defaults that work once installed (issue 12): the model download cannot be evicted
by the pod's ephemeral-storage limit; a NetworkPolicy admits the metrics scraper when the
ServiceMonitor is on; with the GPU Operator (honorLabels false on its exporter's
ServiceMonitor) the adapter and KEDA queries use exported_pod/exported_namespace, checked by
the real promtool evaluating the rendered queries over series labelled as that scrape
leaves them."""
from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.chart.chartlib import by_kind, k8s_errors, render, rendered, template
from tests.integration.test_platform_prometheus import expand

UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def size(q) -> int:
    """Bytes of a Kubernetes quantity (written here, not taken from the chart)."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    return int(float(m.group(1)) * UNITS[m.group(2)])


def pod(objs) -> dict:
    (dep,) = by_kind(objs, "Deployment")
    return dep["spec"]["template"]["spec"]


def disk_emptydirs(spec) -> int:
    return sum(size(v["emptyDir"]["sizeLimit"]) for v in spec["volumes"]
               if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory")


# --- ephemeral storage ----------------------------------------------------------------------

@pytest.mark.parametrize("values", [
    {},                                                             # default: download into 64Gi emptyDir
    {"model": {"emptyDir": {"sizeLimit": "200Gi"}}},                # a 70B model
    {"model": {"emptyDir": {"sizeLimit": "150G"}}},                 # decimal units
    {"model": {"source": "init", "init": {"command": ["fetch"]}}},
    {"model": {"source": "download", "sizeGB": 140}},                # sized from the model (serving)
    {"model": {"source": "streamer", "streamer": {"uri": "s3://models/m"}}},
    {"resources": {"limits": {"ephemeral-storage": "5Gi"}}},
    {"extraVolumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "20Gi"}},
                      {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]},
])
def test_ephemeral_limit_covers_every_disk_backed_emptydir(helm, values):
    objs = render(helm, values=values)
    spec = pod(objs)
    (server,) = [c for c in spec["containers"] if c["name"] == "server"]
    user = size((values.get("resources", {}).get("limits", {}) or {}).get("ephemeral-storage", "2Gi"))
    limit = size(server["resources"]["limits"]["ephemeral-storage"])
    # The kubelet evicts a pod whose emptyDirs + writable layers + logs exceed the sum of its
    # containers' limits: the server's limit alone must hold every disk-backed emptyDir plus
    # the container's own budget (the value the user set).
    assert limit >= disk_emptydirs(spec) + user, (limit, disk_emptydirs(spec), user)
    assert k8s_errors(objs, "1.34") == []


def test_default_ephemeral_limit_is_the_download_plus_the_containers_own(helm):
    (server,) = pod(render(helm))["containers"]
    # 64Gi model + 1Gi /tmp + 8Gi /cache + 2Gi of its own = 75Gi
    assert server["resources"]["limits"]["ephemeral-storage"] == "75Gi"
    assert server["resources"]["requests"]["ephemeral-storage"] == "1Gi"


def test_pvc_models_add_no_model_volume(helm4):
    (server,) = pod(render(helm4, values={"model": {"source": "pvc", "pvc": {"claimName": "weights"}}}))["containers"]
    assert size(server["resources"]["limits"]["ephemeral-storage"]) == 11 * 2**30


def test_without_a_limit_none_is_added(helm4):
    proc = template(helm4, set_values={"resources.limits.ephemeral-storage": "null"})
    assert proc.returncode == 0, proc.stderr
    (server,) = pod([d for d in yaml.safe_load_all(proc.stdout) if d])["containers"]
    assert "ephemeral-storage" not in server["resources"]["limits"]


# --- NetworkPolicy admits the scraper -------------------------------------------------------

def netpol(objs) -> dict:
    (np,) = by_kind(objs, "NetworkPolicy")
    return np["spec"]


@pytest.mark.parametrize("stype, port, extra", [
    ("vllm", "http", {}),
    ("triton", "metrics", {"model": {"source": "pvc", "pvc": {"claimName": "repo"}}}),
])
def test_network_policy_admits_the_monitoring_namespace_to_the_metrics_port(helm, stype, port, extra):
    objs = render(helm, values={"server": {"type": stype}, "networkPolicy": {"enabled": True},
                                "serviceMonitor": {"enabled": True}, **extra},
                  api_versions=("monitoring.coreos.com/v1",))
    rules = netpol(objs)["ingress"]
    scrape = [r for r in rules if r["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]]
    assert scrape and scrape[0]["ports"] == [{"port": port, "protocol": "TCP"}], rules
    # the inference peers are unchanged (the release namespace's pods)
    assert rules[0]["from"] == [{"podSelector": {}}]
    assert k8s_errors(objs, "1.34") == []


def test_network_policy_scraper_peers_are_a_value(helm4):
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
    objs = render(helm4, values={"networkPolicy": {"enabled": True, "metricsFrom": peers},
                                 "serviceMonitor": {"enabled": True}})
    assert [r["from"] for r in netpol(objs)["ingress"]][1] == peers


def test_no_scraper_rule_without_a_service_monitor(helm4):
    objs = render(helm4, values={"networkPolicy": {"enabled": True}})
    assert len(netpol(objs)["ingress"]) == 1


# --- GPU Operator: exported_* labels --------------------------------------------------------

def adapter_rules(objs) -> list[dict]:
    (cm,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].endswith("prometheus-adapter")]
    return yaml.safe_load(cm["data"]["config.yaml"])["rules"]


def test_gpu_operator_switches_adapter_rules_to_exported_labels(helm):
    rules = adapter_rules(list(rendered("helm" if helm.endswith("/helm") else "helm3", "platform-gpuoperator")))
    (util,) = [r for r in rules if r["name"]["matches"] == "^DCGM_FI_DEV_GPU_UTIL$"]
    assert set(util["resources"]["overrides"]) == {"exported_namespace", "exported_pod"}
    assert 'exported_pod!=""' in util["seriesQuery"]


@pytest.mark.parametrize("values, style", [
    ({"platform": {"gpuOperator": True}}, "exported"),
    ({"platform": {"dcgmExporter": {"enabled": True, "serviceMonitor": {"honorLabels": False}}}}, "exported"),
    ({"platform": {"dcgmExporter": {"enabled": True}}}, "direct"),
    ({"platform": {"gpuOperator": True, "prometheusAdapter": {"exporterLabels": "direct"}}}, "direct"),
])
def test_label_style_is_derived_unless_set(helm4, values, style):
    values = {**values}
    values["platform"] = {**values["platform"], "prometheusAdapter": {
        "enabled": True, **values["platform"].get("prometheusAdapter", {})}}
    (util,) = adapter_rules(render(helm4, values=values))
    want = {"exported": {"exported_namespace", "exported_pod"}, "direct": {"namespace", "pod"}}[style]
    assert set(util["resources"]["overrides"]) == want


# Series as the GPU Operator's scrape (honorLabels false) leaves them: the exporter pod in
# pod/namespace, the workload's pod in exported_pod/exported_namespace.
OPERATOR_SERIES = [
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",exported_pod="gi-gpu-inference-7d9f8-abcde",'
     'exported_namespace="inference",pod="nvidia-dcgm-exporter-x7k2p",namespace="gpu-operator"}', "60"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",exported_pod="gi-gpu-inference-7d9f8-fghij",'
     'exported_namespace="inference",pod="nvidia-dcgm-exporter-x7k2p",namespace="gpu-operator"}', "80"),
    # an idle GPU: no workload labels
    ('DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-2",pod="nvidia-dcgm-exporter-x7k2p",namespace="gpu-operator"}', "0"),
]


def _run_promtool(promtool, tmp_path, queries: dict[str, str], expected: dict[str, list[tuple[str, float]]]):
    """Evaluate each query (as a recording rule q:<name>) at 5m over OPERATOR_SERIES with
    promtool test rules; promtool fails when a sample differs from `expected`."""
    rules = {"groups": [{"name": "q", "rules": [{"record": f"q:{k}", "expr": v} for k, v in queries.items()]}]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v}x10"} for s, v in OPERATOR_SERIES],
        "promql_expr_test": [{"expr": f"q:{k}", "eval_time": "5m",
                              "exp_samples": [{"labels": f"q:{k}{labels}", "value": val} for labels, val in expected[k]]}
                             for k in queries]}]}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(test))
    return subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True)


def test_operator_queries_find_the_workload_pods_in_prometheus(helm4, promtool, tmp_path):
    objs = render(helm4, values={"platform": {"gpuOperator": True, "prometheusAdapter": {"enabled": True}}})
    (util,) = adapter_rules(objs)
    adapter_q = expand(util, "inference", ["gi-gpu-inference-7d9f8-abcde", "gi-gpu-inference-7d9f8-fghij"])
    keda = render(helm4, values={"platform": {"gpuOperator": True}, "autoscaling": {"engine": "keda"}})
    (so,) = by_kind(keda, "ScaledObject")
    keda_q = so["spec"]["triggers"][0]["metadata"]["query"]
    assert "exported_pod" in keda_q and "exported_namespace" in keda_q
    proc = _run_promtool(promtool, tmp_path, {"adapter": adapter_q, "keda": keda_q}, {
        "adapter": [('{exported_pod="gi-gpu-inference-7d9f8-abcde"}', 60), ('{exported_pod="gi-gpu-inference-7d9f8-fghij"}', 80)],
        "keda": [("", 140)]})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_negative_control_direct_labels_find_nothing(helm4, promtool, tmp_path):
    keda = render(helm4, values={"autoscaling": {"engine": "keda"}})
    (so,) = by_kind(keda, "ScaledObject")
    keda_q = so["spec"]["triggers"][0]["metadata"]["query"]
    proc = _run_promtool(promtool, tmp_path, {"keda": keda_q}, {"keda": [("", 140)]})
    assert proc.returncode != 0 and "q:keda" in proc.stdout + proc.stderr
