"""What the workload templates render for each choice: GPU resources per gpu.mode, probes,
autoscaling (the metric interface, HPA, KEDA, replicas ownership), DRA, placement,
security and the token. Expected values are written out by hand from the issue, the
device plugin's naming rule and the Kubernetes API, not produced by the chart."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import by_kind, render, scenario_file, template
from tests.chart.test_workload import helm_id, objects, one, server
from tests.conftest import CHART

# vLLM on a shared GPU needs its memory fraction (the chart refuses it otherwise).
MEM = {"server.args[0]": "--gpu-memory-utilization=0.4"}
# Triton serves a model repository: it needs weights from a PVC (or an init container).
TRITON = {"server.type": "triton", "model.source": "pvc", "model.pvc.claimName": "model-repo"}


def notes(helm4: str, tmp_path: Path, values: dict) -> str:
    """NOTES.txt as `helm install --dry-run=client` prints it (Helm 4 renders it without a
    cluster; Helm 3.17 still contacts the API server for install dry-runs)."""
    proc = subprocess.run([helm4, "install", "gi", str(CHART), "-n", "inference", "--dry-run=client",
                           *[a for k, v in values.items() for a in ("--set", f"{k}={v}")]],
                          capture_output=True, text=True, env=dict(os.environ, KUBECONFIG=str(tmp_path / "none")))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:", 1)[1]


def scenario_objs(helm: str, name: str) -> list[dict]:
    """The ci/ scenario's objects at Kubernetes 1.34.0, from test_workload's cached render."""
    return objects(helm_id(helm), name, "1.34.0")


def gpu_limits(objs) -> dict:
    return {k: v for k, v in server(objs)["resources"]["limits"].items() if "nvidia.com" in k}


# --- GPU requests by gpu.mode --------------------------------------------------------------

@pytest.mark.parametrize("values, expected", [
    ({}, {"nvidia.com/gpu": 1}),
    ({"gpu.count": "2", "topology.values[0]": "NV8"}, {"nvidia.com/gpu": 2}),
    ({"gpu.mode": "mig", "gpu.mig.profile": "3g.40gb"}, {"nvidia.com/mig-3g.40gb": 1}),
    # The device plugin replaces '+' by '.' in mixed-strategy resource names (internal/rm/rm.go).
    ({"gpu.mode": "mig", "gpu.mig.profile": "1g.10gb+me"}, {"nvidia.com/mig-1g.10gb.me": 1}),
    ({"gpu.mode": "mig", "gpu.mig.profile": "1g.24gb+me.all"}, {"nvidia.com/mig-1g.24gb.me.all": 1}),
    ({"gpu.mode": "mig", "gpu.mig.profile": "1g.24gb-me"}, {"nvidia.com/mig-1g.24gb-me": 1}),
    ({"gpu.mode": "mig", "gpu.mig.strategy": "single", "gpu.mig.profile": "2g.20gb"}, {"nvidia.com/gpu": 1}),
    ({"gpu.mode": "shared", **MEM}, {"nvidia.com/gpu.shared": 1}),
    ({"gpu.mode": "shared", **MEM, "gpu.shared.resourceName": "nvidia.com/gpu"}, {"nvidia.com/gpu": 1}),
    ({"gpu.mode": "shared", **MEM, "gpu.count": "2", "gpu.shared.failRequestsGreaterThanOne": "false"},
     {"nvidia.com/gpu.shared": 2}),
    ({"gpu.mode": "shared", **MEM, "gpu.shared.resourceName": "nvidia.com/mig-1g.10gb.shared"},
     {"nvidia.com/mig-1g.10gb.shared": 1}),
    ({"gpu.mode": "dra"}, {}),
])
def test_gpu_resources_in_limits_only(helm, values, expected):
    objs = render(helm, set_values=values)
    c = server(objs)
    assert gpu_limits(objs) == expected
    assert not [k for k in c["resources"].get("requests", {}) if "nvidia.com" in k]


def test_gpu_request_equal_to_limit_is_allowed(helm4):
    objs = render(helm4, set_values={"gpu.count": "2", "topology.values[0]": "NV8",
                              "resources.requests.nvidia\\.com/gpu": "2"})
    res = server(objs)["resources"]
    assert res["requests"]["nvidia.com/gpu"] == 2 and res["limits"]["nvidia.com/gpu"] == 2


def test_dra_claim_template_and_pod_reference(helm):
    objs = scenario_objs(helm, "dra")
    rct = one(objs, "ResourceClaimTemplate")
    assert rct["apiVersion"] == "resource.k8s.io/v1"
    req = rct["spec"]["spec"]["devices"]["requests"][0]
    assert req == {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                              "allocationMode": "ExactCount", "count": 2}}
    assert rct["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": "gpu.nvidia.com/productName"}]
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": rct["metadata"]["name"]}]
    assert server(objs)["resources"]["claims"] == [{"name": "gpu"}]


def test_dra_mig_uses_a_cel_selector_on_the_profile(helm4):
    objs = render(helm4, set_values={"gpu.mode": "dra", "gpu.dra.deviceClassName": "mig.nvidia.com",
                              "gpu.dra.migProfile": "1g.10gb"})
    exactly = one(objs, "ResourceClaimTemplate")["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com"
    assert exactly["selectors"] == [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}]
    # MIG under DRA scales on the MIG metric, like gpu.mode=mig.
    assert one(objs, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["metric"]["name"] == \
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


# --- Probes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("timeout, period, threshold", [(900, 10, 90), (95, 10, 10), (30, 7, 5), (2400, 30, 80)])
def test_startup_probe_covers_the_model_load_time(helm4, timeout, period, threshold):
    objs = render(helm4, set_values={"server.modelLoadTimeoutSeconds": str(timeout),
                              "probes.startup.periodSeconds": str(period)})
    sp = server(objs)["startupProbe"]
    assert sp["failureThreshold"] == threshold and sp["periodSeconds"] == period
    assert sp["failureThreshold"] * sp["periodSeconds"] >= timeout
    assert (sp["failureThreshold"] - 1) * sp["periodSeconds"] < timeout      # and no more than needed


@pytest.mark.parametrize("stype, live, ready, ports", [
    ("vllm", "/health", "/v1/models", {"http": 8000}),
    ("triton", "/v2/health/live", "/v2/health/ready", {"http": 8000, "grpc": 8001, "metrics": 8002}),
])
def test_server_types_use_their_real_health_endpoints(helm, stype, live, ready, ports):
    objs = render(helm, set_values=TRITON if stype == "triton" else {"server.type": stype})
    c = server(objs)
    assert c["livenessProbe"]["httpGet"] == {"path": live, "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": ready, "port": "http"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == ports
    svc_ports = {p["name"]: p["port"] for p in one(objs, "Service")["spec"]["ports"]}
    assert svc_ports == ports
    assert ":latest" not in c["image"] and ":" in c["image"]


def test_triton_command_line(helm4):
    c = server(scenario_objs(helm4, "mig-mixed"))
    assert c["command"] == ["tritonserver"]
    assert c["args"] == ["--model-repository=/models", "--http-port=8000", "--grpc-port=8001",
                         "--metrics-port=8002", "--strict-readiness=true"]


def test_vllm_tensor_parallel_matches_gpu_count(helm4):
    c = server(scenario_objs(helm4, "multigpu-nvlink"))
    assert "--tensor-parallel-size=4" in c["args"]
    assert "--model=/models/meta-llama/Llama-3.1-70B-Instruct" in c["args"]
    assert "--served-model-name=meta-llama/Llama-3.1-70B-Instruct" in c["args"]


def test_custom_server_takes_everything_from_values(helm4):
    objs = render(helm4, set_values={"server.type": "custom", "server.image.repository": "registry.example/srv",
                              "server.image.tag": "2.1.0", "server.command[0]": "/bin/serve",
                              "server.args[0]": "--fast", "server.custom.livenessPath": "/alive",
                              "server.custom.readinessPath": "/loaded", "server.ports.metrics": "9090",
                              "autoscaling.engine": "none"})
    c = server(objs)
    assert c["image"] == "registry.example/srv:2.1.0"
    assert c["command"] == ["/bin/serve"] and c["args"] == ["--fast"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/alive"
    assert c["readinessProbe"]["httpGet"]["path"] == "/loaded"
    assert c["startupProbe"]["httpGet"]["path"] == "/loaded"
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 8000, "metrics": 9090}


def test_image_digest(helm):
    digest = "sha256:" + "ab" * 32      # a syntactically valid digest, for rendering only
    c = server(render(helm, set_values={"server.image.digest": digest}))
    assert c["image"] == f"vllm/vllm-openai:v0.33.0@{digest}"


@pytest.mark.parametrize("kube, action", [("1.29.0", "exec"), ("1.30.0", "sleep"), ("1.37.0", "sleep")])
def test_prestop_hook_and_grace(helm4, kube, action):
    c = server(render(helm4, kube_version=kube))
    pre = c["lifecycle"]["preStop"]
    assert list(pre) == [action]
    assert pre == ({"sleep": {"seconds": 15}} if action == "sleep" else {"exec": {"command": ["sleep", "15"]}})
    pod = one(render(helm4, kube_version=kube), "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 120


# --- Autoscaling ---------------------------------------------------------------------------

def _metrics_via_interface(helm: str, tmp_path: Path, set_values: dict) -> list[dict]:
    """Call the named template `gpu-inference.autoscaling.metrics` exactly as the platform
    templates do (include | fromYamlArray), from a probe template in a copy of the chart."""
    chart = tmp_path / "gpu-inference"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        (chart / "templates" / "zz-probe.yaml").write_text(
            'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n'
            '  metrics: {{ include "gpu-inference.autoscaling.metrics" . | fromYamlArray | toJson | quote }}\n')
    proc = template(helm, set_values=set_values, chart=chart)
    assert proc.returncode == 0, proc.stderr
    cm = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "ConfigMap"
              and d["metadata"]["name"] == "probe")
    return yaml.safe_load(cm["data"]["metrics"])


# Hand-written from the issue's rules (same as gpuvalues.planners.autoscaling.capacity's metric choice).
DEFAULT_METRICS = [
    ({}, [{"name": "DCGM_FI_DEV_GPU_UTIL", "target": "70"}]),
    ({**TRITON}, [{"name": "DCGM_FI_DEV_GPU_UTIL", "target": "70"}]),
    ({"gpu.mode": "mig"}, [{"name": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "target": "700m"}]),
    ({"gpu.mode": "dra"}, [{"name": "DCGM_FI_DEV_GPU_UTIL", "target": "70"}]),
    ({"gpu.mode": "shared", **MEM}, [{"name": "vllm:num_requests_waiting", "target": "5"}]),
    ({"gpu.mode": "shared", **TRITON},
     [{"name": "nv_inference_queue_duration_us", "target": "50000"}]),
    ({"autoscaling.metrics[0].name": "vllm:num_requests_running", "autoscaling.metrics[0].target": "8"},
     [{"name": "vllm:num_requests_running", "target": "8"}]),
    ({"autoscaling.engine": "none"}, []),
]


def test_metric_interface_for_the_platform_part(helm, tmp_path):
    for values, expected in DEFAULT_METRICS:
        assert _metrics_via_interface(helm, tmp_path, values) == expected, values


def test_hpa_uses_pods_metrics_with_adapter_names(helm):
    objs = scenario_objs(helm, "whole-hpa")
    hpa = one(objs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": one(objs, "Deployment")["metadata"]["name"]}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    assert hpa["spec"]["metrics"] == [
        {"type": "Pods", "pods": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                                  "target": {"type": "AverageValue", "averageValue": "70"}}},
        {"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                  "target": {"type": "AverageValue", "averageValue": "5"}}},
    ]
    b = hpa["spec"]["behavior"]
    assert b["scaleDown"]["stabilizationWindowSeconds"] == 360
    assert b["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert "replicas" not in one(objs, "Deployment")["spec"]


@pytest.mark.parametrize("engine, kinds", [("hpa", {"HorizontalPodAutoscaler"}), ("keda", {"ScaledObject"}),
                                           ("none", set())])
def test_replicas_only_without_an_autoscaler(helm, engine, kinds):
    objs = render(helm, set_values={"autoscaling.engine": engine, "replicaCount": "3"})
    dep = one(objs, "Deployment")
    assert {o["kind"] for o in objs} & {"HorizontalPodAutoscaler", "ScaledObject"} == kinds
    if engine == "none":
        assert dep["spec"]["replicas"] == 3
    else:
        assert "replicas" not in dep["spec"]


def test_keda_scaled_object(helm):
    objs = scenario_objs(helm, "keda")
    so = one(objs, "ScaledObject")
    spec = so["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 12)
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": 3}
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 360
    trig = spec["triggers"]
    assert [t["metadata"]["threshold"] for t in trig] == ["75", "20000"]
    assert all(t["type"] == "prometheus" and t["metricType"] == "AverageValue" for t in trig)
    q0 = trig[0]["metadata"]["query"]
    assert q0 == ('sum(avg by (exported_pod) (DCGM_FI_DEV_GPU_UTIL{exported_namespace="inference",'
                  'exported_pod=~"gi-gpu-inference-[a-z0-9]+-[a-z0-9]+"}))')
    # Triton's own series are scraped from its pods: pod/namespace, not the exporter's exported_*.
    sel = 'namespace="inference",pod=~"gi-gpu-inference-[a-z0-9]+-[a-z0-9]+"'
    assert trig[1]["metadata"]["query"] == (
        f"sum(sum by (pod) (rate(nv_inference_queue_duration_us{{{sel}}}[1m])) / "
        f"clamp_min(sum by (pod) (rate(nv_inference_request_success{{{sel}}}[1m])), 1e-9))")
    assert not by_kind(objs, "HorizontalPodAutoscaler")      # KEDA creates its own


def test_keda_threshold_from_milli_quantity(helm4):
    so = one(render(helm4, set_values={"autoscaling.engine": "keda", "gpu.mode": "mig"}), "ScaledObject")
    assert so["spec"]["triggers"][0]["metadata"]["threshold"] == "0.7"


# --- PDB -------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, expected", [
    ({}, {"maxUnavailable": 1}),
    ({"pdb.maxUnavailable": "25%"}, {"maxUnavailable": "25%"}),
    ({"pdb.minAvailable": "1"}, {"minAvailable": 1}),
    ({"pdb.minAvailable": "50%", "autoscaling.minReplicas": "3"}, {"minAvailable": "50%"}),
])
def test_pdb(helm, values, expected):
    pdb = one(render(helm, set_values=values), "PodDisruptionBudget")
    spec = pdb["spec"]
    assert {k: v for k, v in spec.items() if k in ("maxUnavailable", "minAvailable")} == expected
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


# --- Placement -------------------------------------------------------------------------------

def test_multigpu_nvlink_placement(helm):
    pod = one(scenario_objs(helm, "multigpu-nvlink"), "Deployment")["spec"]["template"]["spec"]
    na = pod["affinity"]["nodeAffinity"]
    assert na["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]},
        *WHOLE_GPU_NODE,
        {"key": "nvidia.com/gpu.topology", "operator": "In", "values": ["NV4", "NV8"]},
    ]}]
    assert na["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 100, "preference": {
        "matchExpressions": [{"key": "nvidia.com/gpu.topology", "operator": "In", "values": ["NV4"]}]}}]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert [t["topologyKey"] for t in pod["topologySpreadConstraints"]] == [
        "kubernetes.io/hostname", "topology.kubernetes.io/zone"]


# A whole GPU must not be a MIG slice (single strategy) or an unrenamed shared replica.
WHOLE_GPU_NODE = [{"key": "nvidia.com/mig.strategy", "operator": "NotIn", "values": ["single"]},
                  {"key": "nvidia.com/gpu.sharing-strategy", "operator": "NotIn", "values": ["time-slicing", "mps"]}]


def test_single_gpu_pod_has_no_topology_requirement_but_avoids_sliced_nodes(helm4):
    pod = one(render(helm4), "Deployment")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": WHOLE_GPU_NODE}]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["nodeAffinity"]


def test_user_affinity_terms_are_anded_with_the_charts(helm4, tmp_path):
    vals = tmp_path / "v.yaml"
    vals.write_text(yaml.safe_dump({
        "gpu": {"mode": "mig", "mig": {"profile": "1g.10gb"}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}]}}},
        "podAntiAffinity": "none", "priorityClassName": "gpu-high",
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]}))
    pod = one(render(helm4, vals), "Deployment")["spec"]["template"]["spec"]
    mig = [{"key": "nvidia.com/mig.strategy", "operator": "In", "values": ["mixed"]}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}, *mig]},
                     {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}, *mig]}]
    assert "podAntiAffinity" not in pod["affinity"]
    assert pod["priorityClassName"] == "gpu-high"
    assert len(pod["tolerations"]) == 2


def test_shared_mode_requires_a_sharing_node(helm4):
    pod = one(scenario_objs(helm4, "timesliced-queue"), "Deployment")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.sharing-strategy", "operator": "In",
                                            "values": ["time-slicing", "mps"]}]}]


# --- Security, token, service account, test pod ---------------------------------------------

def test_token_is_a_secret_reference_mounted_as_a_file(helm):
    objs = scenario_objs(helm, "whole-hpa")
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    c = server(objs)
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN_PATH"]["value"] == "/var/run/secrets/model-token/token"
    assert "HF_TOKEN" not in env
    vol = next(v for v in pod["volumes"] if v["name"] == "model-token")
    assert vol["secret"]["secretName"] == "hf-token"
    assert {"name": "model-token", "mountPath": "/var/run/secrets/model-token", "readOnly": True} in c["volumeMounts"]


def test_token_as_env_uses_secret_key_ref(helm4):
    c = server(render(helm4, set_values={"model.token.secretName": "hf", "model.token.mountAs": "env"}))
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert not any("value" in e and "TOKEN" in e["name"] for e in c["env"])


def test_model_sources(helm4):
    pvc = one(scenario_objs(helm4, "whole-hpa"), "Deployment")["spec"]["template"]["spec"]
    vol = next(v for v in pvc["volumes"] if v["name"] == "model")
    assert vol == {"name": "model", "persistentVolumeClaim": {"claimName": "llama-31-8b-weights", "readOnly": True}}
    init = one(scenario_objs(helm4, "keda"), "Deployment")["spec"]["template"]["spec"]
    ic = init["initContainers"][0]
    assert ic["image"] == "amazon/aws-cli:2.22.35"
    assert {"name": "model", "mountPath": "/models"} in ic["volumeMounts"]
    assert next(v for v in init["volumes"] if v["name"] == "model")["emptyDir"]["sizeLimit"] == "64Gi"


def test_security_defaults(helm):
    objs = render(helm)
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    sc = server(objs)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    sa = one(objs, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    mounts = {m["mountPath"] for m in server(objs)["volumeMounts"]}
    assert {"/tmp", "/cache", "/dev/shm", "/models"} <= mounts
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_helm_test_pod_calls_the_readiness_endpoint(helm):
    objs = render(helm, set_values={**TRITON})
    pod = one(objs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["containers"][0]["args"][-1] == "http://gi-gpu-inference:8000/v2/health/ready"


def test_service_monitor_scrapes_the_metrics_port(helm4):
    sm = one(render(helm4, set_values={"serviceMonitor.enabled": "true", **TRITON}), "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics" and sm["spec"]["endpoints"][0]["path"] == "/metrics"
    sm = one(render(helm4, set_values={"serviceMonitor.enabled": "true"}), "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "http"


def test_notes_tell_how_to_reach_and_what_to_check(helm4, tmp_path):
    # `helm install --dry-run=client` renders NOTES.txt without a cluster (Helm 4 only;
    # Helm 3.17 still contacts the API server for install dry-runs).
    proc = subprocess.run([helm4, "install", "gi", str(CHART), "-n", "inference", "--dry-run=client",
                           "-f", str(scenario_file("timesliced-queue"))], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=str(tmp_path / "none")))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.split("NOTES:", 1)[1]
    assert "kubectl -n inference port-forward svc/gi-gpu-inference 8000:8000" in text
    assert "curl http://127.0.0.1:8000/v1/models" in text
    assert "/apis/custom.metrics.k8s.io/v1beta1/namespaces/inference/pods/*/vllm_num_requests_waiting" in text
    assert "Insufficient nvidia.com/gpu.shared" in text
    assert "helm test gi -n inference" in text


def test_keda_queries_are_valid_promql(helm4, promtool, tmp_path):
    # promtool parses each trigger query (as a recording rule expression).
    queries = []
    for scenario_values in ({}, {"gpu.mode": "mig"}, {"gpu.mode": "shared", **MEM},
                            {"gpu.mode": "shared", **TRITON}):
        so = one(render(helm4, set_values={**scenario_values, "autoscaling.engine": "keda"}), "ScaledObject")
        queries += [t["metadata"]["query"] for t in so["spec"]["triggers"]]
    queries += [t["metadata"]["query"] for t in
                one(scenario_objs(helm4, "keda"), "ScaledObject")["spec"]["triggers"]]
    rules = {"groups": [{"name": "keda", "rules": [{"record": f"keda:q{i}", "expr": q}
                                                   for i, q in enumerate(queries)]}]}
    f = tmp_path / "rules.yaml"
    f.write_text(yaml.safe_dump(rules))
    proc = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(queries)} rules found" in proc.stdout
    # and promtool does reject a broken one (the check is not vacuous)
    f.write_text(yaml.safe_dump({"groups": [{"name": "k", "rules": [{"record": "x:y", "expr": "sum(avg by (pod) (x{)"}]}]}))
    assert subprocess.run([promtool, "check", "rules", str(f)], capture_output=True).returncode != 0


def test_chart_metadata(helm4):
    # The images are values (server.images.<type>), tested in test_chart_conventions.py.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["kubeVersion"] == ">=1.29.0-0"


def test_model_names_with_yaml_specials_stay_strings(helm4):
    # No model id has ': ' or '#': the schema refuses the name (issue 25); with the schema
    # skipped, the template's quoting still keeps it one string.
    assert template(helm4, set_values={"model.name": "org/model: v2 #1"}).returncode != 0
    proc = subprocess.run([helm4, "template", "gi", str(CHART), "--namespace", "inference",
                           "--skip-schema-validation", "--set", "model.name=org/model: v2 #1"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    c = server([d for d in yaml.safe_load_all(proc.stdout) if d])
    assert "--model=org/model: v2 #1" in c["args"]


def test_time_sliced_mig_requires_mixed_strategy_nodes(helm4):
    pod = one(render(helm4, set_values={"gpu.mode": "shared", **MEM,
                                        "gpu.shared.resourceName": "nvidia.com/mig-1g.10gb.shared"}),
              "Deployment")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/mig.strategy", "operator": "In", "values": ["mixed"]}]}]


def test_network_policy_admits_only_the_listed_peers_to_the_server_ports(helm):
    np = one(scenario_objs(helm, "whole-hpa"), "NetworkPolicy")
    assert np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "inference"
    assert np["spec"]["policyTypes"] == ["Ingress"]
    rule = np["spec"]["ingress"][0]
    assert [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in rule["from"]] == \
        ["monitoring", "gateway"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    np = one(render(helm, set_values={"networkPolicy.enabled": "true", **TRITON}), "NetworkPolicy")
    assert np["spec"]["ingress"][0]["from"] == [{"podSelector": {}}]
    assert [p["port"] for p in np["spec"]["ingress"][0]["ports"]] == ["http", "grpc", "metrics"]
    assert not by_kind(render(helm), "NetworkPolicy")


def test_shared_vllm_memory_fraction(helm4, tmp_path):
    c = server(scenario_objs(helm4, "timesliced-queue"))
    assert "--gpu-memory-utilization=0.22" in c["args"]
    # Without one, the install notes warn (vLLM would preallocate 90% of the shared GPU).
    assert "WARNING: vLLM on a shared GPU without a memory fraction" in notes(helm4, tmp_path, {"gpu.mode": "shared"})
    assert "WARNING" not in notes(helm4, tmp_path, {"gpu.mode": "shared", "server.args[0]": "--gpu-memory-utilization=0.3"})
    assert "WARNING" not in notes(helm4, tmp_path, {})


def test_notes_warn_about_triton_without_a_model_repository(helm4, tmp_path):
    assert "WARNING: Triton serves the model repository at /models" in notes(helm4, tmp_path, {"server.type": "triton"})
    assert "WARNING" not in notes(helm4, tmp_path, TRITON)


def test_gpu_request_from_a_values_file_is_compared_as_a_number(helm, tmp_path):
    # YAML numbers reach templates as float64; 1 must still equal the limit 1.
    f = tmp_path / "v.yaml"
    f.write_text("resources:\n  requests:\n    nvidia.com/gpu: 1\n    cpu: '1'\n")
    assert server(render(helm, f))["resources"]["requests"]["nvidia.com/gpu"] == 1
    f.write_text("resources:\n  requests:\n    nvidia.com/gpu: 2\n")
    proc = template(helm, f)
    assert proc.returncode != 0 and "GPU requests must equal limits" in proc.stderr


def test_default_behavior_is_the_librarys_recommendation():
    # The chart's default equals what gpuvalues recommends (and `gpuvalues simulate` measures)
    # for a 120 s model start-up.
    from gpuvalues.planners.autoscaling.capacity import recommended_behavior
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["autoscaling"]["behavior"] == recommended_behavior(120.0)


@pytest.mark.parametrize("values, ready", [
    ({}, "/v1/models"),
    ({"server.args[0]": "--api-key=$(VLLM_KEY)"}, "/health"),          # /v1/* would answer 401
    ({"server.env[0].name": "VLLM_API_KEY", "server.env[0].valueFrom.secretKeyRef.name": "k",
      "server.env[0].valueFrom.secretKeyRef.key": "key"}, "/health"),
    ({"probes.readiness.path": "/v1/models/ready"}, "/v1/models/ready"),
])
def test_vllm_readiness_path(helm4, values, ready):
    c = server(render(helm4, set_values=values))
    assert c["readinessProbe"]["httpGet"]["path"] == ready
    assert c["livenessProbe"] != c["readinessProbe"]


def test_notes_warn_about_several_mig_instances_per_pod(helm4, tmp_path):
    assert "WARNING: 2 MIG instances per pod" in notes(helm4, tmp_path, {"gpu.mode": "mig", "gpu.count": "2"})
    assert "WARNING" not in notes(helm4, tmp_path, {"gpu.mode": "mig"})
