"""`validate` accepts nothing that render, Helm or the API server refuses (issue 25).

One corpus of hostile values files, each judged twice:
- by its consumers without our schema: the real helm 4 with `--skip-schema-validation`
  (helm's own checks and the chart's `fail` rules), then what the API server checks that
  kubernetes-validate does not (object names, label syntax, container resource names,
  ported below with their sources) and the custom resources against their upstream CRD
  schemas (tests/chart/data/crds);
- by `gpuvalues validate --values` (gpuvalues.pipeline.check: our schema and rules).
Each case must get the same verdict from both: a refusal the consumers make that validate
misses fails here (the issue's `:latest`, duplicate LoRA names, `gateway.sectionName`,
`resources.limits.cpuu`, labels), and so does a refusal of values the consumers take.
A smaller corpus of specs checks that a spec validate accepts renders.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from gpuvalues import pipeline
from gpuvalues.checks.rules import chart_defaults, coalesce
from gpuvalues.errors import GpuValuesError
from tests.chart.chartlib import HELMS, crd_errors, crd_validators, parse
from tests.conftest import CHART, ROOT

# apimachinery pkg/util/validation/validation.go: IsDNS1123Label, IsDNS1123Subdomain,
# IsDNS1035Label, IsQualifiedName, IsValidLabelValue.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# pkg/apis/core/helper/helpers.go standardContainerResources, IsHugePageResourceName.
STANDARD_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}


def qualified_name_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (key.count("/") and not prefix):
        return False
    if prefix and not (len(prefix) <= 253 and DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(QUALIFIED_NAME.fullmatch(name))


def label_errors(where: str, labels: dict | None) -> list[str]:
    out = []
    for k, v in (labels or {}).items():
        if not qualified_name_ok(str(k)):
            out.append(f"{where}: label key {k!r}")
        if not (isinstance(v, str) and len(v) <= 63 and LABEL_VALUE.fullmatch(v)):
            out.append(f"{where}: label value {v!r}")
    return out


def resource_name_ok(name: str) -> bool:
    """pkg/apis/core/validation/validation.go validateContainerResourceName."""
    if "/" not in name:
        return name in STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-")
    return qualified_name_ok(name)


def pod_specs(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return [spec]
    tpl = (spec.get("template") or {}).get("spec")
    return [tpl] if tpl else []


def api_server_errors(obj: dict) -> list[str]:
    """What the API server refuses in `obj` that kubernetes-validate does not check."""
    meta = obj.get("metadata") or {}
    where = f"{obj.get('kind')}/{meta.get('name')}"
    name = str(meta.get("name", ""))
    out = []
    # Services are DNS-1035 labels (ValidateServiceName), most objects DNS subdomains.
    if obj.get("kind") == "Service":
        ok = len(name) <= 63 and DNS1035_LABEL.fullmatch(name)
    else:
        ok = len(name) <= 253 and DNS1123_SUBDOMAIN.fullmatch(name)
    if not ok:
        out.append(f"{where}: name")
    out += label_errors(where, meta.get("labels"))
    for pod in pod_specs(obj):
        out += label_errors(f"{where} nodeSelector", pod.get("nodeSelector"))
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            for part in ("requests", "limits"):
                for r in (c.get("resources") or {}).get(part, {}) or {}:
                    if not resource_name_ok(r):
                        out.append(f"{where}/{c['name']}: resources.{part}.{r}")
            # validateResourceRequirements: hugepages and extended resources are not
            # overcommitted: a request needs a limit, and the two equal.
            res = c.get("resources") or {}
            for r, q in (res.get("requests") or {}).items():
                if (r.startswith("hugepages-") or "/" in r) and str((res.get("limits") or {}).get(r)) != str(q):
                    out.append(f"{where}/{c['name']}: resources.requests.{r} without an equal limit")
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            # validateLocalDescendingPath: a subPath is relative and has no '..' element
            for m in c.get("volumeMounts", []):
                sub = m.get("subPath", "")
                if sub.startswith("/") or ".." in sub.split("/"):
                    out.append(f"{where}/{c['name']}: volumeMounts subPath {sub!r}")
    tpl_meta = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
    out += label_errors(f"{where} pod", tpl_meta.get("labels"))
    if (obj.get("apiVersion"), obj.get("kind")) in crd_validators():
        out += crd_errors(obj)
    return out


def consumers_refuse(values: dict) -> str:
    """Why helm (no schema) or the API server refuses `values`; '' when they take it."""
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        proc = subprocess.run(
            [HELMS["helm"], "template", "gi", str(CHART), "--namespace", "inference",
             "--kube-version", "1.34.0", "--skip-schema-validation", "--values", str(f)],
            capture_output=True, text=True)
    if proc.returncode:
        return proc.stderr.strip()[-300:]
    errors = [e for obj in parse(proc.stdout) for e in api_server_errors(obj)]
    return "; ".join(errors + hub_errors(values))


def hub_errors(values: dict) -> list[str]:
    """The Hugging Face Hub client's own check of the repo id the servers download
    (vLLM for download/emptyDir, the fill Job for a created claim)."""
    model = coalesce(chart_defaults(), values)["model"]
    if model["source"] in ("download", "emptyDir") or (model["source"] == "pvc" and model["pvc"]["create"]):
        try:
            validate_repo_id(model["name"])
        except HFValidationError as exc:
            return [f"model.name: {exc}"]
    return lora_errors(values)


def lora_errors(values: dict) -> list[str]:
    """vLLM's own reading of --lora-modules sources (vllm/lora/utils.py
    get_adapter_absolute_path, ported as its three branches): an absolute path is kept; a
    path that does not exist in the pod and is no repo id the Hub client takes
    (validate_repo_id, the real one) fails at start. `..` segments leave the model volume."""
    out = []
    for ad in (coalesce(chart_defaults(), values).get("lora") or {}).get("adapters") or []:
        src = str(ad.get("source"))
        if src.startswith("/"):
            if "/../" in src + "/":
                out.append(f"lora {ad.get('name')}: {src} leaves the volume")
            continue
        try:
            validate_repo_id(src)
        except HFValidationError as exc:
            out.append(f"lora {ad.get('name')}: {exc}")
    return out


def validate_errors(values: dict) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        return [str(x) for x in pipeline.check(values=f, kube_version="1.34.0")
                if x.severity == "error"]


PLATFORM = yaml.safe_load((CHART / "ci" / "platform-on-values.yaml").read_text())
GATEWAY = yaml.safe_load((ROOT / "examples" / "values" / "gateway.yaml").read_text())
LORA = yaml.safe_load((ROOT / "examples" / "values" / "lora-adapters.yaml").read_text())


def merge(base: dict, patch: dict) -> dict:
    out = dict(base)
    for k, v in patch.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def gw(**ref) -> dict:
    return merge(GATEWAY, {"gateway": {"parentRefs": [{"name": "inference-gateway", **ref}]}})


# id: values. Every one is refused by a consumer (checked below, so the corpus cannot rot).
HOSTILE = {
    "model-injection": {"model": {"name": "x ] || touch PWNED; true || [ x"}},
    "model-space": {"model": {"name": "org/model name"}},
    "model-kubelet-expansion": {"model": {"name": "$(HF_TOKEN)"}},
    "image-latest": {"server": {"image": {"tag": "latest"}}},
    "init-image-latest": {"model": {"source": "init", "init": {"image": {"tag": "latest"}, "command": ["true"]}}},
    "model-image-latest": {"model": {"source": "image", "image": {"reference": "registry.example.com/w:latest"}}},
    "vllm-images-latest": {"server": {"images": {"vllm": {"tag": "latest"}}}},
    "limits-cpuu": {"resources": {"limits": {"cpuu": "1"}}},
    "requests-cpuu": {"resources": {"requests": {"cpuu": "1"}}},
    "dcgm-limits-cpuu": merge(PLATFORM, {"platform": {"dcgmExporter": {"resources": {"limits": {"cpuu": "1"}}}}}),
    "adapter-requests-cpuu": merge(PLATFORM, {"platform": {"prometheusAdapter": {"resources": {"requests": {"cpuu": "1"}}}}}),
    "device-plugin-limits-cpuu": merge(PLATFORM, {"platform": {"devicePlugin": {"resources": {"limits": {"cpuu": "1"}}}}}),
    "gfd-limits-cpuu": merge(PLATFORM, {"platform": {"gfd": {"resources": {"limits": {"cpuu": "1"}}}}}),
    "epp-limits-cpuu": merge(GATEWAY, {"gateway": {"epp": {"resources": {"limits": {"cpuu": "1"}}}}}),
    "section-name-space": gw(sectionName="Bad Name"),
    "section-name-upper": gw(sectionName="HTTP"),
    "parent-namespace": gw(namespace="Gateway_System"),
    "parent-kind": gw(kind="9Gateway"),
    "lora-duplicate": merge(LORA, {"lora": {"adapters": [{"name": "a", "source": "org/a"},
                                                         {"name": "a", "source": "org/b"}]}}),
    "lora-is-model": merge(LORA, {"lora": {"adapters": [{"name": "base", "source": "org/a"}]},
                                  "model": {"name": "base"}}),
    "lora-s3": merge(LORA, {"lora": {"adapters": [{"name": "a", "source": "s3://bucket/a"}]}}),
    "lora-revision": merge(LORA, {"lora": {"adapters": [{"name": "a", "source": "org/a@v2"}]}}),
    "lora-relative": merge(LORA, {"lora": {"adapters": [{"name": "a", "source": "./a"}]}}),
    "lora-dotdot": merge(LORA, {"lora": {"adapters": [{"name": "a", "source": "/models/../etc/a"}]}}),
    "pod-label-value": {"podLabels": {"team": "$(whoami)"}},
    "pod-label-key": {"podLabels": {"bad key": "x"}},
    "common-label-long": {"commonLabels": {"team": "x" * 64}},
    "node-selector-value": {"nodeSelector": {"pool": "a b"}},
    "service-monitor-label": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube prometheus"}}},
    "fullname-digit": {"fullnameOverride": "1llm"},
    "hugepages-request-only": {"resources": {"requests": {"hugepages-2Mi": "1Gi"}}},
    "extended-request-above-limit": {"resources": {"requests": {"example.com/foo": "2"},
                                                   "limits": {"example.com/foo": "1"}}},
    "subpath-absolute": {"model": {"source": "pvc", "pvc": {"claimName": "w", "subPath": "/etc"}}},
    "subpath-dotdot": {"model": {"source": "pvc", "pvc": {"claimName": "w", "subPath": "a/../../b"}}},
}

# Values every consumer takes: validate must take them too.
VALID = {
    "defaults": {},
    "platform": PLATFORM,
    "gateway": GATEWAY,
    "gateway-dotted-section": gw(sectionName="https.internal", namespace="gw", kind="Gateway"),
    "lora": LORA,
    "lora-absolute-path": merge(LORA, {"lora": {"adapters": [{"name": "a", "source": "/models/adapters/a"}]}}),
    "labels": {"podLabels": {"example.com/team": "ml-serving", "tier": "A.1_b"},
               "commonLabels": {"empty": ""}, "nodeSelector": {"nvidia.com/gpu.present": "true"}},
    "resources": {"resources": {"requests": {"cpu": "2", "memory": "8Gi", "hugepages-2Mi": "1Gi"},
                                "limits": {"memory": "8Gi", "hugepages-2Mi": "1Gi", "example.com/foo": "1"}}},
    "model-path-pvc": {"model": {"name": "models/llama/v1.2", "source": "pvc",
                                 "pvc": {"claimName": "weights"}}},
    "digest-and-tag": {"server": {"image": {"tag": "v0.9.1", "digest": "sha256:" + "a" * 64}}},
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_validate_refuses_what_a_consumer_refuses(case):
    values = HOSTILE[case]
    why = consumers_refuse(values)
    assert why, f"{case}: helm and the API server take it: not a hostile case"
    assert validate_errors(values), f"{case}: validate accepts what its consumer refuses: {why}"


@pytest.mark.parametrize("case", sorted(VALID))
def test_validate_accepts_what_every_consumer_takes(case):
    values = VALID[case]
    assert consumers_refuse(values) == "", case
    assert validate_errors(values) == [], case


def test_the_api_server_checks_can_fail():
    """Negative control for the ported API server rules, on objects built by hand."""
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "1svc", "labels": {"a b": "ok", "ok": "-bad"}}, "spec": {}}
    assert len(api_server_errors(bad)) == 3
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "resources": {"limits": {"cpuu": 1, "cpu": 1,
                                                              "nvidia.com/gpu": 1}}}]}}
    assert api_server_errors(pod) == ["Pod/p/c: resources.limits.cpuu"]


# Values pasted into the alerts' PromQL and annotations (where Prometheus expands {{ }}):
# no consumer refuses them, they change what the rules do, so validate must.
QUERY_INJECTION = {
    "job-breaks-out": {"platform": {"alerts": {"dcgmExporterJob": 'x"} or vector(1) #'}}},
    "job-template": {"platform": {"alerts": {"dcgmExporterJob": '{{ query "up" }}'}}},
    "runbook-template": {"platform": {"alerts": {"runbookBaseUrl": 'https://r.example.com/{{ query "up" }}'}}},
    "runbook-quote": {"platform": {"alerts": {"runbookBaseUrl": 'https://r.example.com/"x'}}},
}


@pytest.mark.parametrize("case", sorted(QUERY_INJECTION))
def test_values_that_reach_promql_are_refused(case):
    assert validate_errors(QUERY_INJECTION[case]), case


def test_the_chart_s_own_job_names_pass():
    for job in ("gi-gpu-inference-dcgm-exporter", "nvidia-dcgm-exporter", "monitoring/dcgm"):
        assert validate_errors({"platform": {"alerts": {"dcgmExporterJob": job,
                                                        "runbookBaseUrl": "https://r.example.com/gpu"}}}) == []


# --------------------------------------------------------------------------- specs

SPEC = yaml.safe_load((ROOT / "examples" / "single-a100.yaml").read_text())


def spec_with(**workload) -> dict:
    spec = merge(SPEC, {})
    spec["workloads"] = [{**SPEC["workloads"][0], **workload}]
    return spec


SPECS = {
    "name-63": (spec_with(name="a" * 63), False),
    "name-54": (spec_with(name="a" * 54), False),
    "name-digit": (spec_with(name="8b-llama"), False),
    "model-injection": (spec_with(model="x ] || touch PWNED; true || [ x",
                                  modelSource={"type": "cache", "storageClassName": "nfs"},
                                  modelSizeGB=10), False),
    "cache-model-not-hf": (spec_with(model="a/b/c", modelSource={"type": "cache", "storageClassName": "nfs"},
                                     modelSizeGB=10), False),
    "lora-duplicate": (spec_with(lora=[{"name": "a", "source": "org/a"}, {"name": "a", "source": "org/b"}]), False),
    "storage-class-injection": (spec_with(modelSource={"type": "cache", "storageClassName": "nfs;rm"},
                                          modelSizeGB=10), False),
    "lora-s3": (spec_with(lora=[{"name": "a", "source": "s3://bucket/a"}]), False),
    "lora-path-in-download": (spec_with(lora=[{"name": "a", "source": "/models/a"}]), False),
    "lora-path-in-claim": (spec_with(lora=[{"name": "a", "source": "/models/adapters/a"}],
                                     modelPvc="weights"), True),
    "memory-below-weights": (spec_with(memoryGB=15, parameters=8), False),
    "weights-and-token": (spec_with(parameters=8, modelSource={"type": "download", "token": {
        "secretName": "hf-token", "mountAs": "env"}}), True),
    "name-53": (spec_with(name="a" * 53), True),
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_a_spec_validate_accepts_renders(case, tmp_path):
    spec, expected = SPECS[case]
    f = tmp_path / "spec.yaml"
    f.write_text(yaml.safe_dump(spec))
    accepted = not [x for x in pipeline.check(spec=f) if x.severity == "error"]
    assert accepted == expected, case
    if accepted:
        try:
            out, _ = pipeline.rendered(f)
        except GpuValuesError as exc:
            pytest.fail(f"{case}: validate accepts it, render refuses: {exc}")
        errors = [e for _, text in out for obj in parse(text) for e in api_server_errors(obj)]
        assert errors == [], errors


def helm_refuses(helm_name: str, values: dict) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        proc = subprocess.run(
            [HELMS[helm_name], "template", "gi", str(CHART), "--namespace", "inference",
             "--kube-version", "1.34.0", "--values", str(f)], capture_output=True, text=True)
    return proc.returncode != 0


@pytest.mark.parametrize("helm_name", ["helm", "helm3"])
def test_both_helms_enforce_the_schema_alike(helm_name):
    """The schema's patterns are RE2 (Go) as well as Python regexes, and Helm 3's draft-07
    validator reads them as Helm 4's does: each helm, with the chart's schema, refuses
    every hostile case (by the schema or a render rule) and takes every valid one."""
    for case, values in VALID.items():
        assert not helm_refuses(helm_name, values), case
    for case, values in {**HOSTILE, **QUERY_INJECTION}.items():
        assert helm_refuses(helm_name, values), case
