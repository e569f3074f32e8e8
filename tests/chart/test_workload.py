"""The inference workload part of charts/gpu-inference, rendered by the real Helm 4.1.4
and Helm 3.17.2: lint, strict Kubernetes schema validation for every supported minor,
custom resources against their upstream CRD schemas, and the workload policy rules.

Each scenario is rendered once per helm per Kubernetes version (cached), and the parsed
objects are validated in-process.
"""
from __future__ import annotations

import copy
import math
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import (
    KUBE_MINORS,
    SCENARIO_DIR,
    by_kind,
    crd_errors,
    crd_validators,
    k8s_errors,
    render,
    rendered,
    rendered_text,
    scenario_file,
)
from tests.conftest import CHART

# The seven scenarios the issue names; platform-*-values.yaml belong to the platform part.
EXPECTED_SCENARIOS = {"minimal", "whole-hpa", "mig-mixed", "timesliced-queue", "dra", "keda",
                      "multigpu-nvlink"}
SCENARIOS = sorted(p.name[: -len("-values.yaml")] for p in SCENARIO_DIR.glob("*-values.yaml")
                   if not p.name.startswith("platform-"))


def min_minor(name: str) -> int:
    """The scenario's lowest supported Kubernetes minor, from its `minKube: 1.NN` comment."""
    m = re.search(r"minKube:\s*1\.(\d+)", scenario_file(name).read_text())
    assert m, f"{scenario_file(name)} lacks a 'minKube: 1.NN' comment"
    return int(m.group(1))


def minors_for(name: str) -> list[str]:
    return [m for m in KUBE_MINORS if int(m.split(".")[1]) >= min_minor(name)]


def default_kube(scenario: str) -> str:
    return f"1.{max(min_minor(scenario), 34)}.0"


def objects(helm_name: str, scenario: str, kube_version: str | None = None) -> list[dict]:
    """A deep copy of the scenario's cached render (chartlib.rendered)."""
    return copy.deepcopy(list(rendered(helm_name, scenario, kube_version or default_kube(scenario))))


def ours(objs: list[dict]) -> list[dict]:
    """The workload part's objects (the platform part's DaemonSets etc. are checked by its tests)."""
    return [o for o in objs if (o.get("metadata", {}).get("labels") or {}).get("app.kubernetes.io/component")
            in ("inference", "helm-test")]


def one(objs: list[dict], kind: str) -> dict:
    found = by_kind(ours(objs), kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def server(objs: list[dict]) -> dict:
    return next(c for c in one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
                if c["name"] == "server")


def helm_id(path_or_name) -> str:
    return Path(str(path_or_name)).name


# ===========================================================================================

def test_the_seven_scenarios_exist():
    assert EXPECTED_SCENARIOS <= set(SCENARIOS), EXPECTED_SCENARIOS - set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(helm, scenario):
    proc = subprocess.run([helm, "lint", "--strict", str(CHART), "--values", str(scenario_file(scenario)),
                           "--kube-version", default_kube(scenario)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_object_validates_for_every_supported_minor(helm, scenario):
    name = helm_id(helm)
    low = min_minor(scenario)
    checked = 0
    for minor in minors_for(scenario):
        m = int(minor.split(".")[1])
        # Render at the oldest supported version (exercises the pre-1.30 preStop exec
        # path) and at 1.37; validate each minor against the render meant for it.
        objs = objects(name, scenario, f"1.{low}.0" if m < 30 else "1.37.0")
        assert objs and k8s_errors(objs, minor) == []
        checked += 1
    assert checked == len(minors_for(scenario)) and checked >= 4


def test_dra_scenario_really_needs_1_34():
    # The 1.33 schema has no resource.k8s.io/v1 and no resourceClaimTemplateName on pods:
    # the minKube comment is not just caution.
    objs = objects("helm", "dra", "1.37.0")
    assert k8s_errors(objs, "1.33") != []
    assert min_minor("dra") == 34


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_custom_resources_match_their_crd_schemas(helm, scenario):
    objs = objects(helm_id(helm), scenario)
    custom = [o for o in objs if (o["apiVersion"], o["kind"]) in crd_validators()]
    for o in custom:
        assert crd_errors(o) == []
    expected = {"keda": {"ScaledObject"}, "whole-hpa": {"ServiceMonitor"}}.get(scenario, set())
    assert expected <= {o["kind"] for o in custom}


def test_crd_validation_rejects_what_the_api_server_would():
    # The checker is not vacuous: a typo'd field and a wrong type fail.
    so = one(objects("helm", "keda"), "ScaledObject")
    bad = copy.deepcopy(so)
    bad["spec"]["minReplicas"] = 2                      # the field is minReplicaCount
    assert any("minReplicas" in e for e in crd_errors(bad))
    bad = copy.deepcopy(so)
    bad["spec"]["triggers"][0]["metadata"]["threshold"] = 0.7   # metadata values are strings
    assert crd_errors(bad)
    sm = one(objects("helm", "whole-hpa"), "ServiceMonitor")
    bad = copy.deepcopy(sm)
    bad["spec"]["endpoints"][0]["scrapeInterval"] = "15s"
    assert crd_errors(bad)


# --- Workload policy (the GPU-specific rules no generic checker knows) ---------------------

def policy_violations(objs: list[dict]) -> list[str]:
    """The issue's workload policy, as assertions over rendered objects."""
    out = []
    objs = ours(objs)
    dep = one(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    hpa = by_kind(objs, "HorizontalPodAutoscaler")
    so = by_kind(objs, "ScaledObject")
    if (hpa or so) and "replicas" in dep["spec"]:
        out.append("Deployment has spec.replicas although an autoscaler owns it")
    for h in hpa:
        if h["spec"].get("minReplicas", 1) < 2:
            out.append("HPA minReplicas < 2")
        if h["spec"]["minReplicas"] > h["spec"]["maxReplicas"]:
            out.append("HPA minReplicas > maxReplicas")
    for s in so:
        if s["spec"].get("minReplicaCount", 0) < 2:
            out.append("ScaledObject minReplicaCount < 2")
    if pod.get("automountServiceAccountToken") is not False:
        out.append("service account token mounted")
    psc = pod.get("securityContext", {})
    for c in pod.get("initContainers", []) + pod["containers"]:
        n = c["name"]
        sc = c.get("securityContext", {})
        res = c.get("resources", {})
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory", "ephemeral-storage"):
                if r not in res.get(kind, {}):
                    out.append(f"{n}: {kind}.{r} unset")
        image = c["image"]
        tag = image.split("@")[0].rsplit("/", 1)[-1]
        if ":" not in tag and "@" not in image:
            out.append(f"{n}: image {image} has no tag")
        if tag.endswith(":latest"):
            out.append(f"{n}: image {image} uses latest")
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            out.append(f"{n}: may run as root")
        if sc.get("readOnlyRootFilesystem") is not True:
            out.append(f"{n}: root filesystem writable")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{n}: privilege escalation allowed")
        if sc.get("privileged"):
            out.append(f"{n}: privileged")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            out.append(f"{n}: capabilities not dropped")
        if (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            out.append(f"{n}: no RuntimeDefault seccomp")
        gpu_requests = {k: v for k, v in res.get("requests", {}).items() if k.startswith("nvidia.com/")}
        for k, v in gpu_requests.items():
            if str(res.get("limits", {}).get(k)) != str(v):
                out.append(f"{n}: GPU request {k}={v} differs from its limit")
    for test_pod in by_kind(objs, "Pod"):
        for c in test_pod["spec"]["containers"]:
            sc = c.get("securityContext", {})
            if not (sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
                    and "ALL" in sc.get("capabilities", {}).get("drop", [])
                    and (sc.get("runAsNonRoot") or test_pod["spec"].get("securityContext", {}).get("runAsNonRoot"))):
                out.append(f"test pod {c['name']}: not hardened")
            if not {"cpu", "memory"} <= set(c.get("resources", {}).get("limits", {})):
                out.append(f"test pod {c['name']}: no limits")
    srv = next(c for c in pod["containers"] if c["name"] == "server")
    for p in ("startupProbe", "livenessProbe", "readinessProbe"):
        if p not in srv:
            out.append(f"server: no {p}")
    if srv.get("livenessProbe") == srv.get("readinessProbe"):
        out.append("server: liveness and readiness probes are identical")
    ports = {p["name"] for p in srv.get("ports", [])} | {p["containerPort"] for p in srv.get("ports", [])}
    for p in ("startupProbe", "livenessProbe", "readinessProbe"):
        port = srv.get(p, {}).get("httpGet", {}).get("port")
        if port not in ports:
            out.append(f"server: {p} port {port} is not a container port")
    if "preStop" not in srv.get("lifecycle", {}):
        out.append("server: no preStop hook")
    pdbs = by_kind(objs, "PodDisruptionBudget")
    if not pdbs:
        out.append("no PodDisruptionBudget")
    min_replicas = (hpa[0]["spec"]["minReplicas"] if hpa else
                    so[0]["spec"]["minReplicaCount"] if so else dep["spec"].get("replicas", 1))
    for pdb in pdbs:
        spec = pdb["spec"]
        if spec.get("unhealthyPodEvictionPolicy") != "AlwaysAllow":
            out.append("PDB unhealthyPodEvictionPolicy is not AlwaysAllow")
        if "maxUnavailable" in spec and str(spec["maxUnavailable"]) in ("0", "0%"):
            out.append("PDB maxUnavailable 0 blocks drains")
        if "minAvailable" in spec:
            ma = str(spec["minAvailable"])
            need = math.ceil(int(ma[:-1]) * min_replicas / 100) if ma.endswith("%") else int(ma)
            if need >= min_replicas:
                out.append("PDB minAvailable blocks drains")
        if spec["selector"]["matchLabels"] != dep["spec"]["selector"]["matchLabels"]:
            out.append("PDB selects other pods than the Deployment")
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_workload_policy(helm, scenario):
    assert policy_violations(objects(helm_id(helm), scenario)) == []


def test_policy_checker_catches_violations():
    # Each rule fires on an object that breaks it (the checker is not vacuous).
    base = objects("helm", "whole-hpa")
    cases = {
        "spec.replicas": lambda o: one(o, "Deployment")["spec"].__setitem__("replicas", 3),
        "HPA minReplicas < 2": lambda o: one(o, "HorizontalPodAutoscaler")["spec"].__setitem__("minReplicas", 1),
        "identical": lambda o: server(o).__setitem__("readinessProbe", server(o)["livenessProbe"]),
        "uses latest": lambda o: server(o).__setitem__("image", "vllm/vllm-openai:latest"),
        "root filesystem writable": lambda o: server(o)["securityContext"].__setitem__("readOnlyRootFilesystem", False),
        "privilege escalation": lambda o: server(o)["securityContext"].pop("allowPrivilegeEscalation"),
        "differs from its limit": lambda o: server(o)["resources"]["requests"].__setitem__("nvidia.com/gpu", 2),
        "minAvailable blocks": lambda o: one(o, "PodDisruptionBudget")["spec"].update({"minAvailable": 2}),
        "not AlwaysAllow": lambda o: one(o, "PodDisruptionBudget")["spec"].pop("unhealthyPodEvictionPolicy"),
        "no PodDisruptionBudget": lambda o: o.remove(one(o, "PodDisruptionBudget")),
        "limits.ephemeral-storage unset": lambda o: server(o)["resources"]["limits"].pop("ephemeral-storage"),
        "test pod ready: not hardened": lambda o: one(o, "Pod")["spec"]["containers"][0]["securityContext"].pop(
            "readOnlyRootFilesystem"),
    }
    for expect, mutate in cases.items():
        objs = copy.deepcopy(base)
        mutate(objs)
        found = policy_violations(objs)
        assert any(expect in v for v in found), (expect, found)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A loader that refuses duplicate mapping keys (PyYAML silently keeps the last)."""


def _no_duplicates(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {sorted(dupes)}", node.start_mark)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendered_yaml_has_no_duplicate_keys(helm4, scenario):
    text = rendered_text(helm_id(helm4), scenario, default_kube(scenario))
    docs = [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d]
    assert docs
    assert not re.search(r"\n[ \t]+\n", text), "whitespace-only lines in the rendered YAML"


def test_duplicate_key_loader_works():
    with pytest.raises(yaml.constructor.ConstructorError):
        list(yaml.load_all("a: 1\na: 2\n", Loader=_UniqueKeyLoader))


# --- Every combination of the main switches -------------------------------------------------

def _combo_values(mode: str, stype: str, engine: str) -> dict:
    v = {"gpu.mode": mode, "server.type": stype, "autoscaling.engine": engine}
    if stype == "custom":
        v.update({"server.image.repository": "registry.example/server", "server.image.tag": "1.0.0"})
        if mode == "shared":
            v.update({"autoscaling.metrics[0].name": "server_queue_depth", "autoscaling.metrics[0].target": "4"})
    if stype == "triton":
        v.update({"model.source": "pvc", "model.pvc.claimName": "model-repo"})
    if mode == "shared" and stype == "vllm":
        v["server.args[0]"] = "--gpu-memory-utilization=0.3"
    return v


COMBOS = [(m, s, e) for m in ("whole", "mig", "shared", "dra") for s in ("vllm", "triton", "custom")
          for e in ("hpa", "keda", "none")]


def test_every_mode_server_engine_combination_renders_valid_objects(helm4):
    """36 combinations on Helm 4: strict Kubernetes 1.34 and 1.37 schemas, CRD schemas, policy."""
    for mode, stype, engine in COMBOS:
        objs = render(helm4, set_values=_combo_values(mode, stype, engine), kube_version="1.34.0")
        where = (mode, stype, engine)
        for minor in ("1.34", "1.37"):
            assert k8s_errors(objs, minor) == [], where
        for o in objs:
            if (o["apiVersion"], o["kind"]) in crd_validators():
                assert crd_errors(o) == [], where
        assert policy_violations(objs) == [], where
        kinds = {o["kind"] for o in ours(objs)}
        assert ("HorizontalPodAutoscaler" in kinds) == (engine == "hpa"), where
        assert ("ScaledObject" in kinds) == (engine == "keda"), where
        assert ("ResourceClaimTemplate" in kinds) == (mode == "dra"), where


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm4_and_helm3_render_the_same_objects(scenario):
    # Same chart, same values: both majors must produce identical objects (the templates use
    # nothing whose behaviour differs between Helm 3.17 and Helm 4.1).
    kube = default_kube(scenario)
    assert objects("helm", scenario, kube) == objects("helm3", scenario, kube)
