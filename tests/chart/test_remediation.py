"""platform.remediation (the GPU health remediation controller) rendered by the real Helm
4.1.4 and Helm 3.17.2: strict Kubernetes validation for every supported minor, least
privilege RBAC, a config file the controller itself accepts (its own loader is the
consumer), and the inference workload's defaults that remediation relies on."""
from __future__ import annotations

import argparse
import copy

import pytest
import yaml

from gpuvalues.operations import controller
from gpuvalues.operations.remediation import TAINT_EFFECT, TAINT_KEY
from tests.chart.chartlib import KUBE_MINORS, by_kind, k8s_errors, render, template
from tests.conftest import CHART, run

ON = {"platform": {"remediation": {"enabled": True}}}
NS = "inference"


def remediation_objs(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "remediation"]


@pytest.fixture(scope="module")
def rendered_on(request):
    cache = {}

    def get(helm: str) -> list[dict]:
        if helm not in cache:
            cache[helm] = render(helm, values=copy.deepcopy(ON))
        return copy.deepcopy(cache[helm])
    return get


def test_off_by_default(helm):
    assert remediation_objs(render(helm)) == []


def test_one_resource_per_template_and_strict_validation(helm, rendered_on):
    objs = remediation_objs(rendered_on(helm))
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Role", "RoleBinding",
                     "Service", "ServiceAccount"]
    for minor in KUBE_MINORS:
        assert k8s_errors(objs, minor) == []


def test_lint_strict(helm, tmp_path):
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(ON))
    res = run([helm, "lint", "--strict", str(CHART), "-f", str(f), "--namespace", NS])
    assert res.returncode == 0, res.stdout + res.stderr


def test_deployment_two_replicas_lease_and_metrics(helm, rendered_on):
    objs = remediation_objs(rendered_on(helm))
    [dep] = by_kind(objs, "Deployment")
    [svc] = by_kind(objs, "Service")
    [sa] = by_kind(objs, "ServiceAccount")
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    [c] = spec["containers"]
    assert c["args"][0] == "remediate"
    assert ":" in c["image"] and not c["image"].endswith(":latest")
    # the Service reaches the metrics port of these pods
    assert all(dep["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items())
    [port] = c["ports"]
    assert svc["spec"]["ports"][0]["targetPort"] == port["name"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # never on a GPU node it may quarantine: no tolerations at all
    assert not spec.get("tolerations")
    assert c["securityContext"]["readOnlyRootFilesystem"] and spec["securityContext"]["runAsNonRoot"]


def _rules(role: dict) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


LEAST = {("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"), ("", "nodes", "patch"),
         ("", "nodes/status", "patch"), ("", "pods", "list"), ("", "pods/eviction", "create"),
         ("", "namespaces", "get"), ("", "events", "create")}


def test_rbac_least_privilege(helm, rendered_on):
    objs = remediation_objs(rendered_on(helm))
    [cr] = by_kind(objs, "ClusterRole")
    [role] = by_kind(objs, "Role")
    assert _rules(cr) == LEAST
    assert not any("*" in x for rule in cr["rules"] for x in rule["verbs"] + rule["resources"] + rule["apiGroups"])
    assert role["metadata"]["namespace"] == NS
    assert _rules(role) == {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    [crb] = by_kind(objs, "ClusterRoleBinding")
    [rb] = by_kind(objs, "RoleBinding")
    [sa] = by_kind(objs, "ServiceAccount")
    for b, target in ((crb, cr), (rb, role)):
        assert b["roleRef"]["name"] == target["metadata"]["name"]
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NS}]


def test_pod_delete_only_when_allowed(helm):
    vals = {"platform": {"remediation": {"enabled": True, "allowPodDelete": True}}}
    [cr] = by_kind(remediation_objs(render(helm, values=vals)), "ClusterRole")
    assert _rules(cr) - LEAST == {("", "pods", "delete")}


def test_config_is_accepted_by_the_controller(helm, rendered_on, tmp_path):
    """The controller's own loader and checks read the rendered config (its consumer)."""
    objs = remediation_objs(rendered_on(helm))
    [cm] = by_kind(objs, "ConfigMap")
    [dep] = by_kind(objs, "Deployment")
    [role] = by_kind(objs, "Role")
    f = tmp_path / "config.yaml"
    f.write_text(cm["data"]["config.yaml"])
    mount = dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--config") + 1] == f"{mount}/config.yaml"
    ns = argparse.Namespace(config=str(f), kubeconfig=None, context=None, prometheus_url=None, sync_period=None,
                            dry_run=None, once=None, metrics_address=None, lease_namespace=None, lease_name=None,
                            identity=None)
    opts = controller.options_from_args(ns)
    assert opts.lease_namespace == role["metadata"]["namespace"] == NS
    assert opts.sync_period_s == 30 and opts.lease_duration_s == 90
    assert opts.machine.breaker_max_nodes == 2 and opts.machine.breaker_max_percent == 50
    assert opts.signals.critical_xids == (46, 48, 64, 74, 79, 95, 119, 120)
    assert "exporter" in opts.signals.enabled and not opts.signals.exporter_missing_acts
    port = dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert opts.metrics_address.endswith(f":{port}")


@pytest.mark.parametrize("bad", [
    {"breakerMaxPercent": 150}, {"replicas": 0}, {"signals": {"exporterMissing": "page"}}, {"unknown": 1},
    {"criticalXids": ["79"]}, {"window": "ten minutes"}, {"image": {"repository": "x", "tag": "latest"}},
])
def test_schema_rejects_bad_values(helm, bad):
    vals = {"platform": {"remediation": {"enabled": True, **bad}}}
    res = template(helm, values=vals)
    assert res.returncode != 0
    assert "remediation" in res.stderr, res.stderr


def test_lease_shorter_than_two_syncs_fails(helm):
    vals = {"platform": {"remediation": {"enabled": True, "syncPeriodSeconds": 60, "leaseDurationSeconds": 90}}}
    res = template(helm, values=vals)
    assert res.returncode != 0 and "leaseDurationSeconds" in res.stderr


# --- the inference workload keeps what remediation needs --------------------------------------

def tolerates(tol: dict, key: str, effect: str) -> bool:
    """Does a toleration match the taint key:effect (core/v1 Toleration semantics: an empty
    key with Exists matches every key; an empty effect matches every effect)."""
    if tol.get("effect") and tol["effect"] != effect:
        return False
    if not tol.get("key"):
        return tol.get("operator") == "Exists"
    return tol["key"] == key


def workload_problems(objects: list[dict]) -> list[str]:
    """Why remediation could not drain the inference workload safely."""
    problems = []
    deps = [d for d in by_kind(objects, "Deployment") if d["metadata"]["labels"].get("app.kubernetes.io/component")
            not in ("remediation", "prometheus-adapter")]
    assert deps, "no inference Deployment rendered"
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in by_kind(objects, "HorizontalPodAutoscaler")}
    for d in deps:
        name = d["metadata"]["name"]
        replicas = hpas[name]["spec"].get("minReplicas", 1) if name in hpas else d["spec"].get("replicas", 1)
        if replicas < 2:
            problems.append(f"{name}: {replicas} replica(s): a drain takes the service down")
        for t in d["spec"]["template"]["spec"].get("tolerations") or []:
            if tolerates(t, TAINT_KEY, TAINT_EFFECT):
                problems.append(f"{name}: tolerates the remediation taint ({t})")
    pdbs = by_kind(objects, "PodDisruptionBudget")
    if not pdbs:
        problems.append("no PodDisruptionBudget")
    for p in pdbs:
        if p["spec"].get("maxUnavailable") != 1:
            problems.append(f"PDB maxUnavailable {p['spec'].get('maxUnavailable')} (want 1)")
        if p["spec"].get("unhealthyPodEvictionPolicy") != "AlwaysAllow":
            problems.append("PDB unhealthyPodEvictionPolicy is not AlwaysAllow")
    return problems


def test_inference_defaults_are_drainable(helm):
    assert workload_problems(render(helm)) == []
    assert workload_problems(render(helm, values={"autoscaling": {"engine": "none"}})) == []


@pytest.mark.parametrize("vals,expect", [
    ({"autoscaling": {"engine": "none"}, "replicaCount": 1}, "1 replica"),
    ({"autoscaling": {"minReplicas": 1}}, "1 replica"),
    ({"tolerations": [{"operator": "Exists"}]}, "tolerates the remediation taint"),
    ({"tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}, "tolerates"),
    ({"pdb": {"maxUnavailable": 2}}, "maxUnavailable 2"),
    ({"pdb": {"unhealthyPodEvictionPolicy": "IfHealthyBudget"}}, "AlwaysAllow"),
])
def test_drainability_check_can_fail(helm, vals, expect):
    """Negative controls: the checker above catches each way the workload could block."""
    problems = workload_problems(render(helm, values=vals))
    assert any(expect in p for p in problems), problems


def test_gpu_taint_toleration_is_not_the_remediation_taint():
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                         TAINT_KEY, TAINT_EFFECT)


def test_image_dockerfile_matches_the_chart(helm, rendered_on):
    """Docker cannot run here, so the image is not built in the tests; this checks the
    contract between operations/Dockerfile and the Deployment: the entrypoint is the
    gpuvalues CLI (the chart passes `remediate ...` as args), the user is the chart's
    non-root UID, the metrics port is the one exposed."""
    text = (CHART.parent.parent / "operations" / "Dockerfile").read_text()
    [dep] = by_kind(remediation_objs(rendered_on(helm)), "Deployment")
    spec = dep["spec"]["template"]["spec"]
    assert 'ENTRYPOINT ["gpuvalues"]' in text
    assert spec["containers"][0]["args"][0] == "remediate"
    assert f"USER {spec['securityContext']['runAsUser']}:" in text
    assert f"EXPOSE {spec['containers'][0]['ports'][0]['containerPort']}" in text
    assert "latest" not in text.split("FROM", 1)[1].splitlines()[0]
