"""platform.remediation (the GPU health remediation controller) rendered by the real Helm
4.1.4 and Helm 3.17.2: strict Kubernetes validation for every supported minor, least
privilege RBAC, a config file the controller itself accepts (its own loader is the
consumer), and the inference workload's defaults that remediation relies on."""
from __future__ import annotations

import argparse
import copy

import pytest
import yaml

from gpuvalues.operations import config, drain
from gpuvalues.operations.remediation import TAINT_EFFECT, TAINT_KEY
from tests.chart.chartlib import HELMS, KUBE_MINORS, by_kind, k8s_errors, render, template
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
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "NetworkPolicy", "Role", "RoleBinding",
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
    opts = config.options_from_args(ns)
    assert opts.lease_namespace == role["metadata"]["namespace"] == NS
    assert opts.sync_period_s == 30 and opts.lease_duration_s == 90
    assert opts.machine.breaker_max_nodes == 2 and opts.machine.breaker_max_percent == 50
    assert opts.signals.critical_xids == (46, 48, 64, 74, 79, 95, 119, 120)
    assert "exporter" in opts.signals.enabled and not opts.signals.exporter_missing_acts
    port = dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert opts.metrics_address.endswith(f":{port}")


def test_critical_xids_have_one_source(helm4):
    """platform.alerts.criticalXids is the one list: the controller quarantines on the Xids
    the alert pages on unless platform.remediation.criticalXids names its own (issue 28)."""
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())["platform"]
    assert chart_values["remediation"]["criticalXids"] == []          # no second copy of the list

    def config_and_alert(vals: dict) -> tuple[list, str]:
        objs = render(helm4, values={"platform": {"remediation": {"enabled": True, **vals.get("remediation", {})},
                                                   "alerts": {"force": True, **vals.get("alerts", {})}}})
        [cm] = by_kind(remediation_objs(objs), "ConfigMap")
        exprs = [r["expr"] for o in by_kind(objs, "PrometheusRule") for g in o["spec"]["groups"]
                 for r in g["rules"] if r.get("alert") == "GPUCriticalXidError"]
        return yaml.safe_load(cm["data"]["config.yaml"])["criticalXids"], exprs[0]

    xids, expr = config_and_alert({})
    assert xids == chart_values["alerts"]["criticalXids"]
    assert f'xid=~"{"|".join(map(str, xids))}"' in expr
    xids, expr = config_and_alert({"alerts": {"criticalXids": [79, 48]}})
    assert xids == [79, 48] and 'xid=~"79|48"' in expr
    xids, expr = config_and_alert({"alerts": {"criticalXids": [79, 48]}, "remediation": {"criticalXids": [13]}})
    assert xids == [13] and 'xid=~"79|48"' in expr                     # an explicit list wins for the controller


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

def workload_problems(objects: list[dict]) -> list[str]:
    """gpuvalues.operations.drain.drain_blockers for the quarantine taint; the inference
    Deployment must be among what it looked at."""
    assert any(d["kind"] == "Deployment" and drain.is_gpu_pod({"spec": d["spec"]["template"]["spec"]})
               for d in objects), "no GPU Deployment rendered"
    return drain.drain_blockers(objects, TAINT_KEY, TAINT_EFFECT)


def test_inference_defaults_are_drainable(helm):
    assert workload_problems(render(helm)) == []
    assert workload_problems(render(helm, values={"autoscaling": {"engine": "none"}})) == []


@pytest.mark.parametrize("vals,expect", [
    ({"autoscaling": {"engine": "none"}, "replicaCount": 1}, "1 replica"),
    ({"autoscaling": {"minReplicas": 1}}, "1 replica"),
    ({"tolerations": [{"operator": "Exists"}]}, "tolerates the quarantine taint"),
    ({"tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}, "tolerates"),
    ({"pdb": {"maxUnavailable": 2}}, "maxUnavailable 2"),
    ({"pdb": {"enabled": False}}, "no PodDisruptionBudget"),
    ({"pdb": {"unhealthyPodEvictionPolicy": "IfHealthyBudget"}}, "AlwaysAllow"),
])
def test_drainability_check_can_fail(helm, vals, expect):
    """Negative controls: the checker above catches each way the workload could block."""
    problems = workload_problems(render(helm, values=vals))
    assert any(expect in p for p in problems), problems


def test_gpu_taint_toleration_is_not_the_remediation_taint():
    assert not drain.tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
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


# checkov failures accepted for the controller's objects, each with its reason.
CHECKOV_SKIPS = {
    "CKV_K8S_38": "the controller talks to the API server: it needs its ServiceAccount token",
    "CKV_K8S_43": "pinned tag; a digest is per registry mirror and cannot be resolved offline here",
    "CKV_K8S_15": "IfNotPresent with a pinned tag, as every platform image of the chart",
}


def test_checkov_on_the_controller(rendered_on, tmp_path):
    """The maintained policy checker (checkov, .tools/checkov-venv) on the controller's
    objects: nothing fails but the reasoned skips above, and every skip is still needed."""
    import json
    import subprocess

    from tests.chart.test_workload_checkov import CHECKOV, ENV

    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: run ci/setup.sh")
    (tmp_path / "remediation.yaml").write_text(yaml.safe_dump_all(remediation_objs(rendered_on(HELMS["helm"]))))
    proc = subprocess.run([str(CHECKOV), "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json",
                           "--skip-download", "--compact"], capture_output=True, text=True, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    data = data[0] if isinstance(data, list) else data
    failed = {f["check_id"] for f in data["results"]["failed_checks"]}
    assert failed - set(CHECKOV_SKIPS) == set(), failed
    assert set(CHECKOV_SKIPS) - failed == set(), "stale skip"
    assert len(data["results"]["passed_checks"]) > 50


def test_the_chart_exporter_exports_every_signal_it_reads(helm):
    """With the chart's own DCGM exporter, every series the controller's queries read is
    in the exporter's counters CSV (else a signal would silently never fire)."""
    import re

    from gpuvalues.operations.signals import SignalConfig

    vals = {"platform": {"dcgmExporter": {"enabled": True}, "remediation": {"enabled": True}}}
    objs = render(helm, values=vals)
    [cm] = [o for o in by_kind(objs, "ConfigMap") if "dcgm" in o["metadata"]["name"]]
    csv = "\n".join(cm["data"].values())
    fields = {line.split(",")[0].strip() for line in csv.splitlines() if line and not line.startswith("#")}
    read = set()
    for q in SignalConfig().queries().values():
        read |= set(re.findall(r"\b(DCGM_[A-Z0-9_]+)", q))
    assert read and read <= fields, read - fields
    # negative control: without remediation the NVLink recovery counter is not added
    off = render(helm, values={"platform": {"dcgmExporter": {"enabled": True}}})
    [cm] = [o for o in by_kind(off, "ConfigMap") if "dcgm" in o["metadata"]["name"]]
    assert "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL" not in "\n".join(cm["data"].values())


@pytest.mark.parametrize("operator", [False, True])
def test_the_controller_reads_the_charts_own_exporter_job(helm, operator):
    """exporterJob defaults to the job the chart's alerts use (prometheus-operator names a
    ServiceMonitor's job after its Service, Documentation/api-reference: `jobLabel` unset),
    exporterNamespace to the release's; with the GPU Operator its exporter's job, any namespace."""
    vals = copy.deepcopy(ON)
    if operator:
        vals["platform"]["gpuOperator"] = True
    else:
        vals["platform"]["dcgmExporter"] = {"enabled": True}
    objs = render(helm, values=vals)
    [cm] = by_kind(remediation_objs(objs), "ConfigMap")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    if operator:
        assert (cfg["exporterJob"], cfg["exporterNamespace"]) == ("nvidia-dcgm-exporter", "")
    else:
        [svc] = [o for o in objs if o["kind"] == "Service"
                 and o["metadata"]["labels"].get("app.kubernetes.io/component") == "dcgm-exporter"]
        assert (cfg["exporterJob"], cfg["exporterNamespace"]) == (svc["metadata"]["name"], NS)
