"""Serving features of charts/gpu-inference (issue 18): scale to zero, the inference gateway,
model sources and LoRA adapters, rendered by the real Helm 4.1.4 and Helm 3.17.2 from the
values files in examples/values/.

Every rendered object is checked strictly by kubernetes-validate for each supported minor,
custom resources against their upstream CRD schemas (tests/chart/data/crds: InferencePool v1
and InferenceObjective v1alpha2 from the Gateway API Inference Extension v1.5.0 module,
HTTPRoute v1 from sigs.k8s.io/gateway-api v1.6.3, ScaledObject from KEDA), and the wiring
between the objects (selectors, names, ports, claims) is asserted.
"""
from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import HELMS, KUBE_MINORS, by_kind, crd_errors, crd_validators, k8s_errors, render, template
from tests.conftest import CHART, ROOT

EXAMPLES = ROOT / "examples" / "values"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
FULL = "gi-gpu-inference"  # release gi, chart gpu-inference
MARKER = ".gpu-inference-complete"


@lru_cache(maxsize=None)
def objs(helm_name: str, example: str, kube: str = "1.35.0") -> tuple:
    return tuple(render(HELMS[helm_name], EXAMPLES / f"{example}.yaml", kube_version=kube))


def one(objects, kind: str, name: str | None = None) -> dict:
    found = [o for o in by_kind(list(objects), kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in by_kind(list(objects), kind)])
    return found[0]


def server(objects) -> dict:
    return one(objects, "Deployment", FULL)["spec"]["template"]["spec"]


def container(objects) -> dict:
    return next(c for c in server(objects)["containers"] if c["name"] == "server")


def test_every_mode_has_an_example():
    assert set(NAMES) >= {"scale-to-zero-keda", "gateway", "model-cache-pvc", "model-image",
                          "model-streamer", "lora-adapters"}


@pytest.mark.parametrize("helm_name", HELMS)
@pytest.mark.parametrize("example", NAMES)
def test_example_objects_are_valid(helm_name, example):
    objects = objs(helm_name, example)
    minors = [m for m in KUBE_MINORS if int(m.split(".")[1]) >= 33]  # image volumes: >= 1.33
    errors = [e for m in minors for e in k8s_errors(list(objects), m)]
    assert not errors, "\n".join(errors)
    custom = [o for o in objects if (o["apiVersion"], o["kind"]) in crd_validators()]
    errors = [e for o in custom for e in crd_errors(o)]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("helm_name", HELMS)
@pytest.mark.parametrize("example", NAMES)
def test_example_lints_strict(helm_name, example):
    proc = subprocess.run([HELMS[helm_name], "lint", "--strict", str(CHART), "--values", str(EXAMPLES / f"{example}.yaml"),
                           "--kube-version", "1.35.0"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_crd_validator_rejects_a_broken_inferencepool():
    """Negative control: the InferencePool schema can fail (targetPorts required, port range)."""
    pool = dict(one(objs("helm", "gateway"), "InferencePool"))
    broken = {**pool, "spec": {**pool["spec"], "targetPorts": [{"number": 70000}]}}
    assert any("70000" in e for e in crd_errors(broken))
    missing = {**pool, "spec": {k: v for k, v in pool["spec"].items() if k != "endpointPickerRef"}}
    assert any("endpointPickerRef" in e for e in crd_errors(missing))


def test_crd_validator_rejects_a_route_to_an_unknown_field():
    route = one(objs("helm", "gateway"), "HTTPRoute")
    broken = {**route, "spec": {**route["spec"], "rules": [{**route["spec"]["rules"][0], "backend": []}]}}
    assert crd_errors(broken)


# --- gateway ---------------------------------------------------------------------------------

@pytest.mark.parametrize("helm_name", HELMS)
def test_gateway_wiring(helm_name):
    o = objs(helm_name, "gateway")
    dep = one(o, "Deployment", FULL)
    pool = one(o, "InferencePool", FULL)
    epp = one(o, "Deployment", f"{FULL}-epp")
    epp_svc = one(o, "Service", f"{FULL}-epp")
    srv_svc = one(o, "Service", FULL)
    route = one(o, "HTTPRoute", FULL)
    server_pod = dep["spec"]["template"]["metadata"]["labels"]
    epp_pod = epp["spec"]["template"]["metadata"]["labels"]

    def selects(sel, labels):
        return all(labels.get(k) == v for k, v in sel.items())

    # the pool selects the server pods, never the picker; the picker's Service the reverse
    assert selects(pool["spec"]["selector"]["matchLabels"], server_pod)
    assert not selects(pool["spec"]["selector"]["matchLabels"], epp_pod)
    assert selects(epp_svc["spec"]["selector"], epp_pod) and not selects(epp_svc["spec"]["selector"], server_pod)
    assert not selects(srv_svc["spec"]["selector"], epp_pod)
    # pool -> picker Service and port; picker -> pool by name and namespace
    ref = pool["spec"]["endpointPickerRef"]
    assert ref["name"] == epp_svc["metadata"]["name"]
    assert ref["port"]["number"] in [p["port"] for p in epp_svc["spec"]["ports"]]
    args = epp["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--pool-name={FULL}" in args and "--pool-namespace=inference" in args
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert 8000 in [p["containerPort"] for p in container(o)["ports"]]
    # route: the named Gateway -> the pool
    assert route["spec"]["parentRefs"] == [{"name": "inference-gateway", "namespace": "gateway-system",
                                            "sectionName": "http"}]
    backend = route["spec"]["rules"][0]["backendRefs"][0]
    assert (backend["group"], backend["kind"], backend["name"]) == ("inference.networking.k8s.io", "InferencePool", FULL)
    assert route["spec"]["rules"][0]["timeouts"]["request"] == "600s"
    # RBAC: the picker's account may read its pool and the pods, nothing cluster-wide
    role = one(o, "Role", f"{FULL}-epp")
    rb = one(o, "RoleBinding", f"{FULL}-epp")
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("inference.networking.k8s.io", "inferencepools"), ("", "pods"),
            ("inference.networking.x-k8s.io", "inferenceobjectives")} <= granted
    assert rb["subjects"][0]["name"] == epp["spec"]["template"]["spec"]["serviceAccountName"]
    assert not by_kind(list(o), "ClusterRole")
    # pinned picker image from the release the CRD comes from
    assert epp["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
    # the picker's config: the vLLM metrics scrape on the server's http port, no flow control at min 2
    cm = one(o, "ConfigMap", f"{FULL}-epp")["data"]["plugins.yaml"]
    assert "metrics-data-source" in cm and "flowControl" not in cm


def test_gateway_off_renders_none_of_it():
    o = objs("helm", "model-image")
    kinds = {x["kind"] for x in o}
    assert not kinds & {"InferencePool", "HTTPRoute", "InferenceObjective", "Role"}
    assert not [x for x in by_kind(list(o), "Deployment") if x["metadata"]["name"].endswith("-epp")]


# --- scale to zero ---------------------------------------------------------------------------

@pytest.mark.parametrize("helm_name", HELMS)
def test_scale_to_zero_keda(helm_name):
    o = objs(helm_name, "scale-to-zero-keda")
    so = one(o, "ScaledObject", FULL)["spec"]
    assert so["minReplicaCount"] == 0 and so["maxReplicaCount"] == 4
    assert so["cooldownPeriod"] == 600  # max(300, modelLoadTimeoutSeconds=600)
    triggers = {t["name"]: t for t in so["triggers"]}
    assert triggers["vllm-num-requests-waiting"]["metadata"]["activationThreshold"] == "0"
    act = triggers["activation"]["metadata"]
    assert act["query"] == ('sum(inference_extension_flow_control_queue_size{namespace="inference",'
                            f'inference_pool="{FULL}"}})')
    assert act["activationThreshold"] == "0" and act["threshold"] == "5"
    # the picker holds requests during the cold start, and Prometheus scrapes its queue
    assert "- flowControl" in one(o, "ConfigMap", f"{FULL}-epp")["data"]["plugins.yaml"]
    sm = one(o, "ServiceMonitor", f"{FULL}-epp")["spec"]
    epp_svc = one(o, "Service", f"{FULL}-epp")
    assert sm["selector"]["matchLabels"].items() <= epp_svc["metadata"]["labels"].items()
    assert sm["endpoints"][0]["port"] in [p["name"] for p in epp_svc["spec"]["ports"]]
    # the startup probe lets the cold start take the whole load time
    sp = container(o)["startupProbe"]
    assert sp["failureThreshold"] * sp["periodSeconds"] >= 600
    # a PDB that allows every eviction at 0 or 1 replicas
    pdb = one(o, "PodDisruptionBudget", FULL)["spec"]
    assert pdb["maxUnavailable"] == 1 and "minAvailable" not in pdb
    assert "replicas" not in one(o, "Deployment", FULL)["spec"]


@pytest.mark.parametrize("helm_name", HELMS)
def test_cooldown_default_unchanged_when_not_scaling_to_zero(helm_name):
    o = render(HELMS[helm_name], values={"autoscaling": {"engine": "keda"}})
    so = one(o, "ScaledObject", FULL)["spec"]
    assert so["cooldownPeriod"] == 300 and so["minReplicaCount"] == 2
    assert all("activationThreshold" not in t["metadata"] for t in so["triggers"])
    assert [t["name"] for t in so["triggers"]] == ["dcgm-fi-dev-gpu-util"]


@pytest.mark.parametrize("helm_name", HELMS)
def test_explicit_activation_query_and_cooldown(helm_name):
    o = render(HELMS[helm_name], values={"autoscaling": {"engine": "keda", "minReplicas": 0, "keda": {
        "activationQuery": "sum(rate(http_requests_total[1m]))", "activationThreshold": "500m",
        "cooldownPeriod": 120}}})
    so = one(o, "ScaledObject", FULL)["spec"]
    assert so["cooldownPeriod"] == 120
    act = {t["name"]: t for t in so["triggers"]}["activation"]["metadata"]
    assert act["query"] == "sum(rate(http_requests_total[1m]))" and act["activationThreshold"] == "0.5"
    assert not crd_errors(one(o, "ScaledObject", FULL))


@pytest.mark.parametrize("helm_name", HELMS)
def test_hpa_scale_to_zero_with_feature_gate(helm_name):
    o = render(HELMS[helm_name], values={"autoscaling": {
        "minReplicas": 0, "hpaScaleToZero": True,
        "externalMetric": {"name": "gateway_queue", "target": "5", "selector": {"pool": FULL}}}})
    hpa = one(o, "HorizontalPodAutoscaler", FULL)["spec"]
    assert hpa["minReplicas"] == 0
    ext = [m for m in hpa["metrics"] if m["type"] == "External"]
    assert ext == [{"type": "External", "external": {
        "metric": {"name": "gateway_queue", "selector": {"matchLabels": {"pool": FULL}}},
        "target": {"type": "AverageValue", "averageValue": "5"}}}]
    assert not k8s_errors(list(o), "1.35")


# --- model sources ---------------------------------------------------------------------------

@pytest.mark.parametrize("helm_name", HELMS)
def test_model_cache_pvc_and_fill_job(helm_name):
    o = objs(helm_name, "model-cache-pvc")
    pvc = one(o, "PersistentVolumeClaim", f"{FULL}-model")["spec"]
    assert pvc["accessModes"] == ["ReadWriteMany"] and pvc["storageClassName"] == "nfs-rwx"
    assert pvc["resources"]["requests"]["storage"] == "177Gi"  # ceil(141 x 1.25)
    job = one(o, "Job")
    assert job["metadata"]["name"].startswith(f"{FULL}-fill-")
    jpod = job["spec"]["template"]["spec"]
    assert jpod["volumes"][0]["persistentVolumeClaim"]["claimName"] == f"{FULL}-model"
    env = {e["name"]: e.get("value") for e in jpod["containers"][0]["env"]}
    assert env["MODEL_DIR"] == "/models/meta-llama/Llama-3.1-70B-Instruct"
    assert MARKER in jpod["containers"][0]["args"][0]
    # the servers mount the same claim read-only and wait for the Job's marker
    spec = server(o)
    model_vol = next(v for v in spec["volumes"] if v["name"] == "model")
    assert model_vol["persistentVolumeClaim"] == {"claimName": f"{FULL}-model", "readOnly": True}
    wait = spec["initContainers"][0]
    wait_env = {e["name"]: e.get("value") for e in wait["env"]}
    assert wait["name"] == "wait-model" and wait_env["MODEL_DIR"] == env["MODEL_DIR"]
    assert f'"$MODEL_DIR/{MARKER}"' in wait["command"][2]
    assert "--model=/models/meta-llama/Llama-3.1-70B-Instruct" in container(o)["args"]


def test_fill_job_name_follows_the_model():
    """A Job's template is immutable: a new model must be a new Job, the same model the same Job."""
    base = {"model": {"source": "pvc", "sizeGB": 10, "pvc": {"create": True}}}
    a = one(render(HELMS["helm"], values=base), "Job")["metadata"]["name"]
    b = one(render(HELMS["helm"], values={"model": {**base["model"], "name": "org/other"}}), "Job")["metadata"]["name"]
    assert a != b and a == one(render(HELMS["helm"], values=base), "Job")["metadata"]["name"]


@pytest.mark.parametrize("helm_name", HELMS)
def test_model_image_volume(helm_name):
    o = objs(helm_name, "model-image")
    vol = next(v for v in server(o)["volumes"] if v["name"] == "model")
    assert vol == {"name": "model", "image": {"reference": "registry.example.com/models/qwen2.5-7b-instruct:v1",
                                              "pullPolicy": "IfNotPresent"}}
    mount = next(m for m in container(o)["volumeMounts"] if m["name"] == "model")
    assert mount["readOnly"] is True
    assert "--model=/models/qwen2.5-7b" in container(o)["args"]


@pytest.mark.parametrize("helm_name", HELMS)
def test_model_streamer(helm_name):
    o = objs(helm_name, "model-streamer")
    c = container(o)
    assert c["args"][:3] == ["--model=s3://models/meta-llama/Llama-3.1-8B-Instruct",
                             "--served-model-name=llama-8b", "--load-format=runai_streamer"]
    assert '--model-loader-extra-config={"concurrency":16}' in c["args"]
    assert c["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
    assert {"name": "AWS_ENDPOINT_URL", "value": "https://minio.storage.svc:9000"} in c["env"]


@pytest.mark.parametrize("helm_name", HELMS)
def test_download_storage_sized_from_model(helm_name):
    """16 GB of weights: a 20Gi emptyDir and an ephemeral-storage limit above it plus the
    pod's other disk-backed volumes (8Gi cache, 1Gi tmp) and 2Gi for logs: 31Gi."""
    o = objs(helm_name, "lora-adapters")
    vol = next(v for v in server(o)["volumes"] if v["name"] == "model")
    assert vol["emptyDir"]["sizeLimit"] == "20Gi"
    res = container(o)["resources"]
    assert res["limits"]["ephemeral-storage"] == "31Gi" and res["requests"]["ephemeral-storage"] == "31Gi"
    disk = sum(int(v["emptyDir"]["sizeLimit"].removesuffix("Gi")) for v in server(o)["volumes"]
               if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory")
    assert int(res["limits"]["ephemeral-storage"].removesuffix("Gi")) > disk


def test_without_model_size_the_limit_still_covers_the_download():
    # No model.sizeGB: the 64Gi model emptyDir stays, and the limit holds it (2Gi own + 64Gi
    # model + 1Gi tmp + 8Gi cache; tests/chart/test_chart_defaults.py); the request is unchanged.
    o = render(HELMS["helm"])
    assert container(o)["resources"]["limits"]["ephemeral-storage"] == "75Gi"
    assert container(o)["resources"]["requests"]["ephemeral-storage"] == "1Gi"
    assert next(v for v in server(o)["volumes"] if v["name"] == "model")["emptyDir"]["sizeLimit"] == "64Gi"


# --- LoRA ------------------------------------------------------------------------------------

@pytest.mark.parametrize("helm_name", HELMS)
def test_lora_flags_and_objectives(helm_name):
    o = objs(helm_name, "lora-adapters")
    args = container(o)["args"]
    i = args.index("--lora-modules")
    assert args[i + 1:i + 3] == ["sql=org/llama-3.1-8b-sql-lora", "support=org/llama-3.1-8b-support-lora"]
    assert {"--enable-lora", "--max-loras=4", "--max-lora-rank=64"} <= set(args)
    assert args.count("--lora-modules") == 1
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in container(o)["env"]
    objectives = {x["metadata"]["name"]: x["spec"] for x in by_kind(list(o), "InferenceObjective")}
    assert objectives == {
        f"{FULL}-sql": {"priority": 10, "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": FULL}},
        f"{FULL}-support": {"priority": 0, "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": FULL}}}


# --- refusals: one clear line on both helms ---------------------------------------------------

CASES = {
    "hpa-zero-without-gate": ({"autoscaling": {"minReplicas": 0}}, "1.35.0",
                              ["autoscaling.minReplicas=0 with engine=hpa needs the alpha HPAScaleToZero"]),
    "hpa-zero-without-external-metric": ({"autoscaling": {"minReplicas": 0, "hpaScaleToZero": True}}, "1.35.0",
                                         ["autoscaling.externalMetric: an HPA with minReplicas 0 needs an External metric"]),
    "keda-zero-without-activation": ({"autoscaling": {"engine": "keda", "minReplicas": 0}}, "1.35.0",
                                     ["autoscaling.keda.activationQuery: with minReplicas 0 no server pod exists"]),
    "zero-with-min-available": ({"autoscaling": {"engine": "keda", "minReplicas": 0, "keda": {"activationQuery": "vector(1)"}},
                                 "pdb": {"minAvailable": 1}}, "1.35.0",
                                ["pdb.minAvailable with autoscaling.minReplicas=0", "use pdb.maxUnavailable=1"]),
    "image-on-1.32": ({"model": {"source": "image", "image": {"reference": "r.example/m:v1"}}}, "1.32.0",
                      ["model.source=image needs Kubernetes >= 1.33", "v1.32.0"]),
    "image-without-reference": ({"model": {"source": "image"}}, "1.35.0", ["model.image.reference: model.source=image needs"]),
    "image-latest": ({"model": {"source": "image", "image": {"reference": "r.example/m:latest"}}}, "1.35.0",
                     ["model.image.reference: latest is not allowed"]),
    "streamer-on-triton": ({"server": {"type": "triton"}, "autoscaling": {"engine": "none"},
                            "model": {"source": "streamer", "streamer": {"uri": "s3://b/m"}}}, "1.35.0",
                           ["model.source=streamer is vLLM's --load-format runai_streamer, but server.type=triton"]),
    "streamer-without-uri": ({"model": {"source": "streamer"}}, "1.35.0", ["model.streamer.uri: model.source=streamer needs"]),
    "cache-pvc-without-size": ({"model": {"source": "pvc", "pvc": {"create": True}}}, "1.35.0",
                               ["model.sizeGB: model.pvc.create needs the size"]),
    "lora-on-triton": ({"server": {"type": "triton"}, "autoscaling": {"engine": "none"},
                        "lora": {"adapters": [{"name": "a", "source": "org/a"}]}}, "1.35.0",
                       ["lora: LoRA adapters are configured for vLLM", "server.type=triton"]),
    "lora-duplicate-name": ({"lora": {"adapters": [{"name": "a", "source": "org/a"}, {"name": "a", "source": "org/b"}]}},
                            "1.35.0", ["lora.adapters: the name a is used twice"]),
    "gateway-on-triton": ({"server": {"type": "triton"}, "autoscaling": {"engine": "none"}, "gateway": {"enabled": True}},
                          "1.35.0", ["gateway.enabled: the endpoint picker is configured for vLLM's metrics"]),
}


@pytest.mark.parametrize("helm_name", HELMS)
@pytest.mark.parametrize("case", CASES)
def test_refused_with_one_line(helm_name, case):
    values, kube, fragments = CASES[case]
    proc = template(HELMS[helm_name], values=values, kube_version=kube)
    assert proc.returncode != 0 and not proc.stdout
    for f in fragments:
        assert f in proc.stderr, proc.stderr


SCHEMA_CASES = {
    # values, (Helm 4 fragments, Helm 3 fragments)
    "negative-min-replicas": ({"autoscaling": {"minReplicas": -1}},
                              (["/autoscaling/minReplicas", "minimum"], ["autoscaling.minReplicas", "greater than or equal to 0"])),
    "bad-lora-rank": ({"lora": {"maxLoraRank": 24}},
                      (["/lora/maxLoraRank", "value must be one of"], ["lora.maxLoraRank", "must be one of"])),
    "unknown-model-source": ({"model": {"source": "nfs"}},
                             (["/model/source", "value must be one of"], ["model.source", "must be one of"])),
    "adapter-name-with-equals": ({"lora": {"adapters": [{"name": "a", "source": "x=y"}]}},
                                 (["/lora/adapters/0/source", "does not match pattern"], ["source", "Does not match pattern"])),
    "bad-streamer-uri": ({"model": {"source": "streamer", "streamer": {"uri": "http://x/y"}}},
                         (["/model/streamer/uri"], ["model.streamer.uri"])),
}


@pytest.mark.parametrize("helm_name", HELMS)
@pytest.mark.parametrize("case", SCHEMA_CASES)
def test_schema_refuses(helm_name, case):
    values, (h4, h3) = SCHEMA_CASES[case]
    proc = template(HELMS[helm_name], values=values, kube_version="1.35.0")
    assert proc.returncode != 0 and not proc.stdout
    for f in (h4 if helm_name == "helm" else h3):
        assert f in proc.stderr, proc.stderr


def test_zero_replicas_allowed_by_schema_for_keda():
    """The old schema minimum (1) is gone: KEDA with minReplicas 0 renders."""
    proc = template(HELMS["helm"], values={"autoscaling": {"engine": "keda", "minReplicas": 0},
                                           "gateway": {"enabled": True}}, kube_version="1.35.0")
    assert proc.returncode == 0, proc.stderr


# --- vLLM flags against the pinned release -----------------------------------------------------

VLLM_FLAGS = {line.strip() for line in (Path(__file__).parent / "data" / "vllm-0.33.0-flags.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}


def vllm_flags_used(objects) -> tuple[set[str], set[str], set[str]]:
    """(flags, load formats, VLLM_* env names) the rendered vLLM server container uses."""
    c = container(objects)
    flags = {a.split("=", 1)[0] for a in c["args"] if a.startswith("--")}
    formats = {a.split("=", 1)[1] for a in c["args"] if a.startswith("--load-format=")}
    envs = {e["name"] for e in c.get("env", []) if e["name"].startswith("VLLM_")}
    return flags, formats, envs


@pytest.mark.parametrize("example", NAMES)
def test_every_vllm_flag_exists_in_the_pinned_release(example):
    """Each flag, load format and VLLM_* variable the chart gives vLLM is one vLLM 0.33.0 defines
    (tests/chart/data/vllm-0.33.0-flags.txt, extracted from the release's wheel)."""
    flags, formats, envs = vllm_flags_used(objs("helm", example))
    assert flags and flags <= VLLM_FLAGS, flags - VLLM_FLAGS
    assert {f"load-format={f}" for f in formats} <= VLLM_FLAGS
    assert {f"env:{e}" for e in envs} <= VLLM_FLAGS


def test_default_vllm_image_is_the_release_the_flags_come_from():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["server"]["images"]["vllm"]["tag"] == "v0.33.0"
    c = container(objs("helm", "gateway"))
    assert c["image"] == "vllm/vllm-openai:v0.33.0"


def test_flag_check_can_fail():
    """Negative control: a misspelt flag (vLLM's old --lora-module) is not in the list."""
    assert "--lora-modules" in VLLM_FLAGS and "--lora-module" not in VLLM_FLAGS
    assert "--enable-loras" not in VLLM_FLAGS and "load-format=runai" not in VLLM_FLAGS
