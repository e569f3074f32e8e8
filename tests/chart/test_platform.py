"""The GPU platform part of charts/gpu-inference (device plugin, GFD, DCGM exporter,
Prometheus adapter, alerts), rendered by the real Helm 4.1.4 and Helm 3.17.2.

Every ci/platform-*-values.yaml scenario is linted (--strict), rendered and validated
strictly for each supported Kubernetes minor; custom resources are checked against the
prometheus-operator CRD schemas. Device plugin configs in the rendered ConfigMap are
checked by gpuvalues.planners.deviceplugin.validate_device_plugin_config (the device plugin's rules).
"""
from __future__ import annotations

import copy
import re

import pytest
import yaml

from gpuvalues.errors import DevicePluginConfigError
from gpuvalues.planners.deviceplugin import build_device_plugin_config, validate_device_plugin_config
from tests.chart.chartlib import (
    HELMS,
    KUBE_MINORS,
    SCENARIO_DIR,
    by_kind,
    crd_errors,
    k8s_errors,
    render,
    rendered,
    rendered_text,
    scenario_file,
    template,
)
from tests.conftest import CHART, run

PLATFORM_SCENARIOS = sorted(p.name[: -len("-values.yaml")] for p in SCENARIO_DIR.glob("platform-*-values.yaml"))
NS = "inference"
COMPONENTS = {"device-plugin", "mps-control-daemon", "gpu-feature-discovery", "dcgm-exporter", "prometheus-adapter",
              "nfd-master", "nfd-worker", "mig-manager",
              "gpu-alerts"}
SM_API = "monitoring.coreos.com/v1/ServiceMonitor"
RULE_API = "monitoring.coreos.com/v1/PrometheusRule"


def objs(helm_name: str, name: str, api_versions: tuple[str, ...] = ()) -> list[dict]:
    """A deep copy of the scenario's cached render (chartlib.rendered, Kubernetes 1.34.0)."""
    return copy.deepcopy(list(rendered(helm_name, name, api_versions=api_versions)))


def component(obj: dict) -> str | None:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def platform_objs(objects: list[dict]) -> list[dict]:
    return [o for o in objects if component(o) in COMPONENTS]


def one(objects: list[dict], kind: str, comp: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and component(o) == comp]
    assert len(found) == 1, f"{kind}/{comp}: {len(found)}"
    return found[0]


def containers(ds: dict) -> dict[str, dict]:
    spec = ds["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


# --- every scenario: lint, render, strict validation -------------------------------------

def test_platform_scenarios_exist():
    assert {"platform-on", "platform-off", "platform-gpuoperator", "platform-mig-sharing",
            "platform-exported-labels"} <= set(PLATFORM_SCENARIOS)


@pytest.mark.parametrize("name", PLATFORM_SCENARIOS)
def test_lint_strict(helm, name):
    proc = run([helm, "lint", "--strict", "--namespace", NS, str(CHART), "--values", str(scenario_file(name))])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("helm_name", sorted(HELMS))
@pytest.mark.parametrize("name", PLATFORM_SCENARIOS)
def test_strict_kubernetes_validation_all_minors(helm_name, name):
    objects = objs(helm_name, name)
    errors = [e for minor in KUBE_MINORS for e in k8s_errors(platform_objs(objects), minor)]
    assert errors == []


@pytest.mark.parametrize("helm_name", sorted(HELMS))
@pytest.mark.parametrize("name", PLATFORM_SCENARIOS)
def test_custom_resources_match_crd_schemas(helm_name, name):
    crs = [o for o in platform_objs(objs(helm_name, name)) if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert [e for o in crs for e in crd_errors(o)] == []


def test_helm3_and_helm4_render_the_same_platform():
    for name in PLATFORM_SCENARIOS:
        assert platform_objs(objs("helm", name)) == platform_objs(objs("helm3", name)), name


# --- which parts render ---------------------------------------------------------------

def kinds_by_component(objects) -> set[tuple[str, str]]:
    return {(o["kind"], component(o)) for o in platform_objs(objects)}


def test_platform_off_renders_nothing_of_the_platform():
    assert platform_objs(objs("helm", "platform-off", (SM_API, RULE_API))) == []


def test_platform_on_renders_every_part():
    got = kinds_by_component(objs("helm", "platform-on"))
    assert {("DaemonSet", "device-plugin"), ("ConfigMap", "device-plugin"),
            ("DaemonSet", "gpu-feature-discovery"), ("DaemonSet", "dcgm-exporter"),
            ("Service", "dcgm-exporter"), ("ConfigMap", "dcgm-exporter"),
            ("ServiceMonitor", "dcgm-exporter"), ("Deployment", "prometheus-adapter"),
            ("APIService", "prometheus-adapter"), ("Service", "prometheus-adapter"),
            ("ConfigMap", "prometheus-adapter"), ("PrometheusRule", "gpu-alerts")} <= got


def test_gpu_operator_turns_off_the_parts_it_runs():
    got = kinds_by_component(objs("helm", "platform-gpuoperator", (SM_API, RULE_API)))
    assert not any(c in {"device-plugin", "mps-control-daemon", "gpu-feature-discovery", "dcgm-exporter",
                         "nfd-master", "nfd-worker", "mig-manager"}
                   for _, c in got), got
    assert ("Deployment", "prometheus-adapter") in got and ("PrometheusRule", "gpu-alerts") in got


def test_one_resource_per_template_file_named_by_kind():
    # Judged on the render (the DaemonSets' `kind:` comes from a shared header helper).
    seen = {}
    for scenario in ("platform-on", "platform-mig-sharing"):
        for doc in rendered_text("helm", scenario).split("\n---\n"):
            m = re.search(r"^# Source: gpu-inference/templates/(\S+)$", doc, re.M)
            obj = yaml.safe_load(doc)
            if not m or not obj:
                continue
            seen.setdefault(m.group(1), set()).add((obj["kind"], obj["metadata"]["name"]))
    platform = {f: objs for f, objs in seen.items() if f.startswith(
        ("device-plugin-", "gpu-feature-discovery-", "dcgm-exporter-", "prometheus-adapter-", "prometheusrule",
         "nfd-", "mig-manager-"))}
    assert len(platform) >= 36, sorted(platform)
    for f, objs in platform.items():
        assert len(objs) == 1, (f, objs)
        ((kind, _),) = objs
        assert kind.lower() in f.replace("-", ""), (f, kind)


def test_default_namespace_is_refused(helm):
    values = {"platform": {"dcgmExporter": {"enabled": True}}}
    proc = template(helm, values=values, namespace="default")
    assert proc.returncode != 0
    assert "must not run in the `default` namespace" in proc.stderr
    values["platform"]["allowDefaultNamespace"] = True
    assert template(helm, values=values, namespace="default").returncode == 0
    # The workload alone may live in default.
    assert template(helm, values={}, namespace="default").returncode == 0


def test_workload_selectors_never_select_platform_pods():
    objects = objs("helm", "platform-on")
    pod_labels = [o["spec"]["template"]["metadata"]["labels"] for o in platform_objs(objects)
                  if o["kind"] in ("DaemonSet", "Deployment")]
    assert len(pod_labels) == 6
    for o in objects:
        if component(o) in COMPONENTS:
            continue
        sel = (o["spec"].get("selector") if o["kind"] == "Service" else
               (o["spec"].get("selector") or {}).get("matchLabels") if o["kind"] in ("PodDisruptionBudget", "Deployment", "ServiceMonitor") else None)
        if not sel:
            continue
        for labels in pod_labels:
            assert not all(labels.get(k) == v for k, v in sel.items()), (o["kind"], sel, labels)


# --- device plugin --------------------------------------------------------------------

def test_device_plugin_daemonset():
    ds = one(objs("helm", "platform-on"), "DaemonSet", "device-plugin")
    spec = ds["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert {"feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present"} <= keys
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["device-plugins"]["hostPath"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    ctrs = containers(ds)
    plugin = ctrs["nvidia-device-plugin"]
    image, tag = plugin["image"].rsplit(":", 1)
    assert image == "nvcr.io/nvidia/k8s-device-plugin" and re.fullmatch(r"v\d+\.\d+\.\d+", tag)
    assert {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"} in plugin["volumeMounts"]
    assert env(plugin)["CONFIG_FILE"] == "/config/config.yaml"
    # config-manager as upstream: an init container (oneshot) and a sidecar that SIGHUPs the plugin.
    assert spec["shareProcessNamespace"] is True
    init = env(ctrs["config-manager-init"])
    side = env(ctrs["config-manager"])
    for e in (init, side):
        assert e["NODE_LABEL"] == "nvidia.com/device-plugin.config"
        assert e["CONFIG_FILE_SRCDIR"] == "/available-configs"
        assert e["CONFIG_FILE_DST"] == "/config/config.yaml"
        assert e["DEFAULT_CONFIG"] == "default"
        assert e["FALLBACK_STRATEGIES"] == "named,single"
    assert (init["ONESHOT"], init["SEND_SIGNAL"]) == ("true", "false")
    assert (side["ONESHOT"], side["SEND_SIGNAL"], side["SIGNAL"], side["PROCESS_TO_SIGNAL"]) == \
        ("false", "true", "1", "nvidia-device-plugin")
    assert ctrs["config-manager-init"]["command"] == ["config-manager"]
    # Without MIG configs the plugin needs no capability.
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_config_manager_can_read_its_node():
    objects = objs("helm", "platform-on")
    role = one(objects, "ClusterRole", "device-plugin")
    assert role["rules"][0] == {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    binding = one(objects, "ClusterRoleBinding", "device-plugin")
    ds = one(objects, "DaemonSet", "device-plugin")
    assert binding["subjects"][0]["name"] == ds["spec"]["template"]["spec"]["serviceAccountName"]


def test_mig_configs_give_the_plugin_sys_admin_and_mig_monitoring():
    ds = one(objs("helm", "platform-mig-sharing"), "DaemonSet", "device-plugin")
    plugin = containers(ds)["nvidia-device-plugin"]
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert env(plugin)["NVIDIA_MIG_MONITOR_DEVICES"] == "all"


@pytest.mark.parametrize("name", ["platform-on", "platform-mig-sharing"])
def test_configmap_configs_pass_the_device_plugin_rules(name):
    values = yaml.safe_load(scenario_file(name).read_text())
    cm = one(objs("helm", name), "ConfigMap", "device-plugin")
    configs = {k: yaml.safe_load(v) for k, v in cm["data"].items()}
    # Helm merges the scenario's map into the chart's default one: its `default` keeps the
    # chart default's flags (the container features off) unless the scenario sets them
    expected = copy.deepcopy(yaml.safe_load((CHART / "values.yaml").read_text())["platform"]
                             ["devicePlugin"]["config"]["map"])
    for key, cfg in (values["platform"]["devicePlugin"].get("config", {}).get("map") or {}).items():
        expected[key] = {**expected.get(key, {}), **cfg,
                         "flags": {**expected.get(key, {}).get("flags", {}), **cfg.get("flags", {})}}
    assert configs == expected
    assert configs["default"]["flags"]["gdsEnabled"] is False
    for key, cfg in configs.items():
        validate_device_plugin_config(cfg, source=f"{cm['metadata']['name']}:{key}")
    ds = one(objs("helm", name), "DaemonSet", "device-plugin")
    assert env(containers(ds)["config-manager"])["DEFAULT_CONFIG"] in configs


def test_mps_control_daemon_only_with_an_mps_config():
    assert not [o for o in objs("helm", "platform-on") if component(o) == "mps-control-daemon"]
    ds = one(objs("helm", "platform-mig-sharing"), "DaemonSet", "mps-control-daemon")
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/mps.capable": "true"}
    ctrs = containers(ds)
    assert ctrs["mps-control-daemon"]["command"] == ["mps-control-daemon"]
    assert env(ctrs["config-manager"])["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon"
    plugin = containers(one(objs("helm", "platform-mig-sharing"), "DaemonSet", "device-plugin"))["nvidia-device-plugin"]
    mps_root = env(plugin)["MPS_ROOT"]
    assert {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v} == \
        {"mps-root": mps_root, "mps-shm": f"{mps_root}/shm"}


def test_gfd_shares_the_configs_and_signals_itself():
    objects = objs("helm", "platform-on")
    gfd = one(objects, "DaemonSet", "gpu-feature-discovery")
    ctrs = containers(gfd)
    assert env(ctrs["config-manager"])["PROCESS_TO_SIGNAL"] == "gpu-feature-discovery"
    assert ctrs["gpu-feature-discovery"]["command"] == ["gpu-feature-discovery"]
    cm = one(objects, "ConfigMap", "device-plugin")
    vols = {v["name"]: v for v in gfd["spec"]["template"]["spec"]["volumes"]}
    assert vols["available-configs"]["configMap"]["name"] == cm["metadata"]["name"]
    assert vols["output-dir"]["hostPath"]["path"] == "/etc/kubernetes/node-feature-discovery/features.d"


@pytest.mark.parametrize("api", [True, False])
def test_gfd_node_feature_api_is_explicit_with_its_rbac(helm4, api):
    """GFD's default output moved from the features.d file to NodeFeature objects in
    v0.19 (cmd/gpu-feature-discovery/main.go use-node-feature-api): the chart says which,
    and grants the NodeFeature and pod rules of upstream role.yml only for the API."""
    objects = render(helm4, values={"platform": {"devicePlugin": {"enabled": True},
                                                 "gfd": {"enabled": True, "useNodeFeatureAPI": api}}})
    gfd = containers(one(objects, "DaemonSet", "gpu-feature-discovery"))["gpu-feature-discovery"]
    assert env(gfd)["GFD_USE_NODE_FEATURE_API"] == str(api).lower()
    rules = one(objects, "ClusterRole", "device-plugin")["rules"]
    nodefeatures = [r for r in rules if "nfd.k8s-sigs.io" in r["apiGroups"]]
    assert bool(nodefeatures) == api
    if api:
        assert set(nodefeatures[0]["verbs"]) >= {"create", "update"}


GENERATED = [
    dict(mig_strategy="none"),
    dict(mig_strategy="mixed"),
    dict(mig_strategy="single"),
    dict(sharing="time-slicing", replicas=4, rename_by_default=True),
    dict(sharing="time-slicing", replicas=2, mig_strategy="mixed", resources=("nvidia.com/mig-1g.10gb",)),
    dict(sharing="mps", replicas=8, gpu="H100-SXM5-80GB"),
]


def test_values_accept_configs_gpuvalues_generates(helm4):
    cfgs = {f"cfg-{i}": build_device_plugin_config(**kw) for i, kw in enumerate(GENERATED)}
    cfgs["default"] = cfgs["cfg-0"]
    objects = render(helm4, values={"platform": {"devicePlugin": {"enabled": True, "config": {"map": cfgs}}}})
    cm = one(objects, "ConfigMap", "device-plugin")
    assert {k: yaml.safe_load(v) for k, v in cm["data"].items()} == cfgs


# Configs the device plugin refuses (gpu-sharing.md §1, NVIDIA/k8s-device-plugin
# api/config/v1 replicas_test.go / validateFlags): the chart must refuse them too.
BAD_CONFIGS = {
    "replicas-1": {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}},
    "no-resources": {"version": "v1", "sharing": {"timeSlicing": {"resources": []}}},
    "mps-mixed": {"version": "v1", "flags": {"migStrategy": "mixed"},
                  "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}},
    "bad-strategy": {"version": "v1", "flags": {"migStrategy": "dual"}},
    "bad-name": {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "$invalid$", "replicas": 2}]}}},
    "bad-version": {"version": "v2"},
    "bad-devices": {"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 2, "devices": "not-all"}]}}},
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_configs_the_device_plugin_refuses_fail_the_render(helm, case):
    cfg = BAD_CONFIGS[case]
    with pytest.raises(DevicePluginConfigError):
        validate_device_plugin_config(cfg)
    values = {"platform": {"devicePlugin": {"enabled": True, "config": {"map": {"default": cfg}}}}}
    proc = template(helm, values=values)
    assert proc.returncode != 0, case
    assert "platform" in proc.stderr, proc.stderr


def test_default_config_must_exist(helm):
    values = {"platform": {"devicePlugin": {"enabled": True, "config": {"default": "mig-mixed"}}}}
    proc = template(helm, values=values)
    assert proc.returncode != 0
    assert '"mig-mixed" is not a key of platform.devicePlugin.config.map' in proc.stderr


# --- DCGM exporter ------------------------------------------------------------------

def counter_fields(objects) -> list[str]:
    cm = one(objects, "ConfigMap", "dcgm-exporter")
    lines = [ln for ln in cm["data"]["counters.csv"].splitlines() if ln.strip() and not ln.startswith("#")]
    for line in lines:
        assert re.fullmatch(r"DCGM_(FI|EXP)_[A-Z0-9_]+, (gauge|counter|label), .+", line), line
    return [ln.split(",")[0] for ln in lines]


def test_dcgm_exporter_daemonset_service_and_counters():
    objects = objs("helm", "platform-on")
    ds = one(objects, "DaemonSet", "dcgm-exporter")
    ctr = containers(ds)["dcgm-exporter"]
    e = env(ctr)
    assert e["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert e["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert e["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/counters.csv"
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert ctr["image"].startswith("nvcr.io/nvidia/k8s/dcgm-exporter:") and not ctr["image"].endswith(":latest")
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert vols["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    svc = one(objects, "Service", "dcgm-exporter")
    assert svc["spec"]["ports"][0]["port"] == 9400
    assert svc["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    fields = counter_fields(objects)
    assert len(fields) == len(set(fields))
    for f in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
              "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS",
              "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_FB_USED"):
        assert f in fields, f


def test_every_metric_the_alerts_use_is_collected():
    objects = objs("helm", "platform-on")
    fields = set(counter_fields(objects))
    rule = one(objects, "PrometheusRule", "gpu-alerts")
    used = {m for g in rule["spec"]["groups"] for r in g["rules"] for m in re.findall(r"DCGM_\w+", r["expr"])}
    assert used and used <= fields, used - fields


def test_sys_admin_only_with_profiling(helm4):
    values = {"autoscaling": {"metrics": [{"name": "DCGM_FI_DEV_GPU_UTIL", "target": "70"}]},
              "platform": {"dcgmExporter": {"enabled": True, "profiling": False}}}
    objects = render(helm4, values=values)
    ctr = containers(one(objects, "DaemonSet", "dcgm-exporter"))["dcgm-exporter"]
    assert "add" not in ctr["securityContext"].get("capabilities", {})
    assert not [f for f in counter_fields(objects) if f.startswith("DCGM_FI_PROF_")]


def test_profiling_metric_without_profiling_fails(helm):
    values = {"gpu": {"mode": "mig"},
              "platform": {"dcgmExporter": {"enabled": True, "profiling": False},
                           "prometheusAdapter": {"enabled": True}}}
    proc = template(helm, values=values)
    assert proc.returncode != 0
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE is a profiling (DCP) field" in proc.stderr


# --- ServiceMonitor / PrometheusRule gating --------------------------------------------

def test_servicemonitor_and_rule_only_with_the_crds_or_forced(helm4):
    base = {"platform": {"dcgmExporter": {"enabled": True}}}
    kinds = lambda objects: {o["kind"] for o in platform_objs(objects)}  # noqa: E731
    plain = kinds(render(helm4, values=base))
    assert "ServiceMonitor" not in plain and "PrometheusRule" not in plain
    with_crds = kinds(render(helm4, values=base, api_versions=(SM_API, RULE_API)))
    assert {"ServiceMonitor", "PrometheusRule"} <= with_crds
    with_gv = kinds(render(helm4, values=base, api_versions=("monitoring.coreos.com/v1",)))
    assert {"ServiceMonitor", "PrometheusRule"} <= with_gv
    other = kinds(render(helm4, values=base, api_versions=("monitoring.coreos.com/v1alpha1",)))
    assert "ServiceMonitor" not in other and "PrometheusRule" not in other
    forced = copy.deepcopy(base)
    forced["platform"]["dcgmExporter"]["serviceMonitor"] = {"force": True}
    forced["platform"]["alerts"] = {"force": True}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(render(helm4, values=forced))


def test_platform_and_workload_alerts_are_separate_rule_objects(helm4):
    """One PrometheusRule per concern (issue 28): the platform's GPU health and component
    groups in one, the inference workload's in another, each rendered only when its side
    is; both carry platform.alerts.labels (what a Prometheus ruleSelector matches)."""
    def rules(**over) -> dict[str, tuple[str | None, set[str]]]:
        alerts = {"force": True, "labels": {"release": "kps"}, **over.pop("alerts", {})}
        vals = {"platform": {"alerts": alerts}, **over}
        out = {}
        for o in render(helm4, values=vals):
            if o["kind"] == "PrometheusRule":
                assert o["metadata"]["labels"]["release"] == "kps"
                out[o["metadata"]["name"]] = (component(o), {g["name"] for g in o["spec"]["groups"]})
        return out
    both = rules()
    assert both == {"gi-gpu-inference-gpu-alerts": ("gpu-alerts", {"gpu-inference.gpu-health", "gpu-inference.gpu-platform"}),
                    "gi-gpu-inference-alerts": ("inference", {"gpu-inference.workload"})}, both
    assert rules(alerts={"gpuRules": False}) == {"gi-gpu-inference-alerts": both["gi-gpu-inference-alerts"]}
    assert rules(workload={"enabled": False}) == {"gi-gpu-inference-gpu-alerts": both["gi-gpu-inference-gpu-alerts"]}


def test_servicemonitor_honors_the_workload_labels():
    objects = objs("helm", "platform-on")
    sm = one(objects, "ServiceMonitor", "dcgm-exporter")
    ep = sm["spec"]["endpoints"][0]
    assert ep["honorLabels"] is True and ep["port"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"] == one(objects, "Service", "dcgm-exporter")["spec"]["selector"]
    assert {"action": "labeldrop", "regex": "pod|container"} in ep["relabelings"]
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_exported_mode_keeps_target_labels():
    sm = one(objs("helm", "platform-exported-labels"), "ServiceMonitor", "dcgm-exporter")
    ep = sm["spec"]["endpoints"][0]
    assert ep["honorLabels"] is False
    assert not [r for r in ep["relabelings"] if r["action"] == "labeldrop"]


# --- Prometheus adapter ----------------------------------------------------------------

def adapter_rules(objects) -> list[dict]:
    cm = one(objects, "ConfigMap", "prometheus-adapter")
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert set(config) == {"rules"}, "no default/resource/external rules"
    return config["rules"]


def test_adapter_rule_per_scaling_metric(helm4):
    metrics = [{"name": "DCGM_FI_DEV_GPU_UTIL", "target": "70"},
               {"name": "vllm:num_requests_waiting", "target": "5"}]
    objects = render(helm4, values={"autoscaling": {"metrics": metrics},
                                    "platform": {"prometheusAdapter": {"enabled": True}}})
    rules = adapter_rules(objects)
    assert [r["name"] for r in rules] == [
        {"matches": "^DCGM_FI_DEV_GPU_UTIL$", "as": "DCGM_FI_DEV_GPU_UTIL"},
        {"matches": "^vllm:num_requests_waiting$", "as": "vllm_num_requests_waiting"}]
    for r, m in zip(rules, metrics):
        assert r["seriesQuery"] == f'{{__name__="{m["name"]}",namespace!="",pod!=""}}'
        assert r["resources"] == {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
        assert r["metricsQuery"] == "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"
    # The HPA asks for exactly the names the adapter exposes.
    hpa = by_kind(objects, "HorizontalPodAutoscaler")[0]
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [r["name"]["as"] for r in rules]
    api = one(objects, "APIService", "prometheus-adapter")
    assert api["metadata"]["name"] == "v1beta1.custom.metrics.k8s.io"
    svc = one(objects, "Service", "prometheus-adapter")
    assert api["spec"]["service"] == {"name": svc["metadata"]["name"], "namespace": NS, "port": 443}


def test_adapter_rbac():
    objects = objs("helm", "platform-on")
    bindings = {(o["kind"], o["roleRef"]["name"]): o for o in platform_objs(objects) if "roleRef" in o}
    sa = one(objects, "ServiceAccount", "prometheus-adapter")["metadata"]["name"]
    delegator = bindings[("ClusterRoleBinding", "system:auth-delegator")]
    assert delegator["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NS}]
    reader = bindings[("RoleBinding", "extension-apiserver-authentication-reader")]
    assert reader["metadata"]["namespace"] == "kube-system"
    hpa = [b for (k, n), b in bindings.items() if n.endswith("-server-resources")][0]
    assert hpa["subjects"] == [{"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}]
    dep = one(objects, "Deployment", "prometheus-adapter")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--config=/etc/adapter/config.yaml" in args
    assert any(a.startswith("--prometheus-url=http") for a in args)


def test_triton_counter_uses_the_rate_query(helm4):
    values = {"server": {"type": "triton"}, "gpu": {"mode": "shared"},
              "platform": {"prometheusAdapter": {"enabled": True}}}
    rules = adapter_rules(render(helm4, values=values))
    assert len(rules) == 1
    q = rules[0]["metricsQuery"]
    assert "rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[1m])" in q
    assert "rate(nv_inference_request_success{<<.LabelMatchers>>}[1m])" in q


def test_exported_mode_applies_to_dcgm_series_only(helm4):
    metrics = [{"name": "DCGM_FI_DEV_GPU_UTIL", "target": "70"},
               {"name": "vllm:num_requests_running", "target": "4"}]
    values = {"autoscaling": {"metrics": metrics},
              "platform": {"prometheusAdapter": {"enabled": True, "exporterLabels": "exported"}}}
    dcgm, vllm = adapter_rules(render(helm4, values=values))
    assert set(dcgm["resources"]["overrides"]) == {"exported_namespace", "exported_pod"}
    assert dcgm["seriesQuery"] == '{__name__="DCGM_FI_DEV_GPU_UTIL",exported_namespace!="",exported_pod!=""}'
    assert set(vllm["resources"]["overrides"]) == {"namespace", "pod"}


def test_adapter_off_with_keda(helm4):
    values = {"autoscaling": {"engine": "keda"}, "platform": {"prometheusAdapter": {"enabled": True}}}
    assert not [o for o in render(helm4, values=values) if component(o) == "prometheus-adapter"]


# --- values / schema --------------------------------------------------------------------

@pytest.mark.parametrize("values, message", [
    ({"platform": {"dcgmExporter": {"image": {"repository": "x", "tag": "latest"}}}}, "tag"),
    ({"platform": {"prometheusAdapter": {"exporterLabels": "both"}}}, "exporterLabels"),
    ({"platform": {"alerts": {"xidWindow": "ten minutes"}}}, "xidWindow"),
    ({"platform": {"devicePlugin": {"enabeld": True}}}, "enabeld"),
])
def test_schema_rejects_bad_platform_values(helm, values, message):
    proc = template(helm, values=values)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def _terms(ds: dict) -> list[dict]:
    return ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


@pytest.mark.parametrize("label", ["nvidia.com/gpu.deploy.device-plugin", ""])
def test_device_plugin_daemonsets_skip_opted_out_nodes(helm4, label):
    """Nodes labelled nvidia.com/gpu.deploy.device-plugin=false (the GPU Operator's label;
    gpuvalues sets it on DRA pools) run no device plugin and no MPS control daemon: the
    opt-out is ANDed into every ORed GPU-node term. GFD and the DCGM exporter still run
    (they have opt-out labels of their own). paused-for-mig-change is out too: mig-manager
    pauses a GPU client with it (mig-parted pkg/mig/reconfigure/reconfigure.go maybeSetPaused)."""
    mps = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    objects = render(helm4, values={"platform": {
        "devicePlugin": {"enabled": True, "nodeOptOutLabel": label, "config": {"map": {"default": mps}}},
        "gfd": {"enabled": True, "nodeOptOutLabel": ""}, "dcgmExporter": {"enabled": True, "nodeOptOutLabel": ""}}})
    opt_out = {"key": label, "operator": "NotIn", "values": ["false", "paused-for-mig-change"]}
    for comp in ("device-plugin", "mps-control-daemon", "gpu-feature-discovery", "dcgm-exporter"):
        terms = _terms(one(objects, "DaemonSet", comp))
        assert len(terms) == 3, comp
        has = [opt_out in t["matchExpressions"] for t in terms]
        want = bool(label) and comp in ("device-plugin", "mps-control-daemon")
        assert has == [want] * 3, (comp, terms)


# --- per-component DaemonSet settings (issue 28) ------------------------------------------

# each platform DaemonSet (its component label) and the values that configure it
DAEMONSETS = {"device-plugin": ("devicePlugin",), "mps-control-daemon": ("devicePlugin", "mpsControlDaemon"),
              "gpu-feature-discovery": ("gfd",), "mig-manager": ("migManager",),
              "dcgm-exporter": ("dcgmExporter",), "nfd-worker": ("nfd", "worker")}
ALL_DAEMONSETS = {"gfd": {"enabled": True}, "nfd": {"enabled": True}, "migManager": {"enabled": True},
                  "dcgmExporter": {"enabled": True}}


def _daemonsets(helm: str, setting: str, value_of) -> dict[str, dict]:
    """Every platform DaemonSet rendered with `setting` set to value_of(component) in each
    component's own values (platform-mig-sharing runs the MPS daemon too)."""
    platform = copy.deepcopy(ALL_DAEMONSETS)
    for comp, path in DAEMONSETS.items():
        node = platform
        for key in path:
            node = node.setdefault(key, {})
        node[setting] = value_of(comp)
    objects = render(helm, scenario_file("platform-mig-sharing"), values={"platform": platform})
    found = {component(o): o for o in objects if o["kind"] == "DaemonSet"}
    assert set(found) == set(DAEMONSETS), set(found)
    return found


def test_daemonset_defaults_keep_the_shared_header(helm4):
    """Without settings every DaemonSet rolls (RollingUpdate) at system-node-critical, as the
    one shared header did, with no RuntimeClass."""
    objects = render(helm4, scenario_file("platform-mig-sharing"), values={"platform": copy.deepcopy(ALL_DAEMONSETS)})
    for ds in (o for o in objects if o["kind"] == "DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
        assert spec["priorityClassName"] == "system-node-critical" and "runtimeClassName" not in spec


def test_daemonset_update_strategy_per_component(helm4):
    pct = {c: f"{10 + i}%" for i, c in enumerate(DAEMONSETS)}
    want = lambda c: ({"type": "OnDelete"} if c == "mig-manager"   # noqa: E731
                      else {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": pct[c]}})
    for comp, ds in _daemonsets(helm4, "updateStrategy", want).items():
        assert ds["spec"]["updateStrategy"] == want(comp), comp


def test_daemonset_priority_class_per_component(helm4):
    """GFD and the DCGM exporter no longer take the device plugin's PriorityClass; empty omits it."""
    name = lambda c: "" if c == "nfd-worker" else f"pc-{c}"   # noqa: E731
    for comp, ds in _daemonsets(helm4, "priorityClassName", name).items():
        assert ds["spec"]["template"]["spec"].get("priorityClassName", "") == name(comp), comp


def test_daemonset_runtime_class_per_component(helm4):
    for comp, ds in _daemonsets(helm4, "runtimeClassName", lambda c: f"rc-{c}").items():
        assert ds["spec"]["template"]["spec"]["runtimeClassName"] == f"rc-{comp}", comp


def test_daemonset_pod_annotations_per_component_keep_the_checksums(helm4):
    for comp, ds in _daemonsets(helm4, "podAnnotations", lambda c: {"example.com/who": c}).items():
        ann = ds["spec"]["template"]["metadata"]["annotations"]
        assert ann["example.com/who"] == comp and any(k.startswith("checksum/") for k in ann), (comp, ann)


def test_daemonset_node_selector_per_component(helm4):
    """A component's nodeSelector is ANDed with its placement; the MPS daemon keeps its own."""
    for comp, ds in _daemonsets(helm4, "nodeSelector", lambda c: {"example.com/pool": c}).items():
        sel = ds["spec"]["template"]["spec"]["nodeSelector"]
        assert sel.pop("example.com/pool") == comp
        assert sel == ({"nvidia.com/mps.capable": "true"} if comp == "mps-control-daemon" else {}), (comp, sel)


@pytest.mark.parametrize("setting,value,needle", [
    ("updateStrategy", {"type": "Sometimes"}, "updateStrategy"),
    ("updateStrategy", {"rollingUpdate": {"maxUnavailable": "150%"}}, "maxUnavailable"),
    ("priorityClassName", "Not_A_Name", "priorityClassName"), ("runtimeClassName", "nvidia runtime", "runtimeClassName"),
    ("podAnnotations", {"a": 1}, "podAnnotations"), ("nodeSelector", {"bad key!": "x"}, "bad key!"),
])
def test_daemonset_settings_schema_refuses(helm4, setting, value, needle):
    res = template(helm4, values={"platform": {"gfd": {"enabled": True, setting: value}}})
    assert res.returncode != 0 and needle in res.stderr, res.stderr
