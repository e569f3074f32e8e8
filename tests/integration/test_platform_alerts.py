"""The chart's GPU alerts, checked by the real promtool (Debian's Prometheus 2.42).

The PrometheusRule is rendered by Helm, its `.spec` written as a plain rule file, then
`promtool check rules` validates it and `promtool test rules` runs the hand-written cases
in data/platform-alerts-test.yaml: each alert fires on its fault and stays quiet otherwise.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import render
from tests.conftest import run

DATA = Path(__file__).parent / "data"
UNIT_TESTS = DATA / "platform-alerts-test.yaml"


def _rule_spec(helm: str, **set_values: str) -> dict:
    values = {"platform.alerts.force": "true", **set_values}
    objs = render(helm, set_values=values)
    rules = [o for o in objs if o["kind"] == "PrometheusRule"]
    # one object for the platform's rules, one for the workload's (one resource per template)
    assert len(rules) == 2, [o["kind"] for o in objs]
    return {"groups": [g for r in rules for g in r["spec"]["groups"]]}


def _alerts(spec: dict) -> dict[str, dict]:
    return {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}


@pytest.fixture(scope="module")
def spec(helm4) -> dict:
    return _rule_spec(helm4)


def test_promtool_check_rules_accepts_rendered_groups(spec, promtool, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run([promtool, "check", "rules", str(rules)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_alerts(spec))} rules found" in proc.stdout


def test_promtool_check_rules_rejects_a_broken_expression(spec, promtool, tmp_path):
    """The check above can fail: a rule with a PromQL syntax error is refused."""
    broken = copy.deepcopy(spec)
    broken["groups"][0]["rules"][0]["expr"] = "max by (gpu) (DCGM_FI_DEV_GPU_TEMP > "
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(broken, sort_keys=False))
    assert run([promtool, "check", "rules", str(rules)]).returncode != 0


def test_every_alert_has_a_firing_and_a_quiet_case(spec):
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired, quiet = set(), set()
    for case in cases:
        for t in case["alert_rule_test"]:
            (fired if t["exp_alerts"] else quiet).add(t["alertname"])
    names = set(_alerts(spec))
    assert len(names) == 12, names
    assert names <= fired, f"no firing case for {names - fired}"
    assert names <= quiet, f"no quiet case for {names - quiet}"


def test_every_alert_has_severity_and_runbook(spec):
    for name, rule in _alerts(spec).items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        for key in ("summary", "description", "runbook"):
            assert rule["annotations"].get(key, "").strip(), (name, key)


def _with_runbooks(cases_text: str, spec: dict) -> str:
    """Add each rule's static `runbook` annotation to the expected alerts (promtool
    compares annotations exactly; summaries/descriptions stay hand-written)."""
    alerts = _alerts(spec)
    doc = yaml.safe_load(cases_text)
    for case in doc["tests"]:
        for t in case["alert_rule_test"]:
            for exp in t["exp_alerts"]:
                exp["exp_annotations"]["runbook"] = alerts[t["alertname"]]["annotations"]["runbook"]
    return yaml.safe_dump(doc, sort_keys=False)


def test_promtool_unit_tests_fire_and_stay_quiet(spec, promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    tests = tmp_path / "alerts-test.yaml"
    tests.write_text(_with_runbooks(UNIT_TESTS.read_text(), spec))
    proc = run([promtool, "test", "rules", str(tests)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_last_value_xid_gauge_would_latch(spec, promtool, tmp_path):
    """Why the Xid alert counts in a window: the same faults through the naive
    `DCGM_FI_DEV_XID_ERRORS > 0` rule still fire long after the Xid was handled."""
    naive = copy.deepcopy(spec)
    rule = naive["groups"][0]["rules"][0]
    assert rule["alert"] == "GPUCriticalXidError"
    rule["expr"] = 'max by (Hostname, gpu, UUID) (DCGM_FI_DEV_XID_ERRORS) > 0'
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(naive, sort_keys=False))
    cases = yaml.safe_load(UNIT_TESTS.read_text())
    xid_case = cases["tests"][0]
    quiet_late = [t for t in xid_case["alert_rule_test"] if t["eval_time"] == "20m"]
    assert quiet_late and quiet_late[0]["exp_alerts"] == []
    cases["tests"] = [{**xid_case, "alert_rule_test": quiet_late}]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    proc = run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "alertname: GPUCriticalXidError, time: 20m" in out, out


def test_gpu_operator_alerts_watch_the_operator_exporter(helm4):
    spec = _rule_spec(helm4, **{"platform.gpuOperator": "true"})
    alerts = _alerts(spec)
    assert alerts["DCGMExporterAbsent"]["expr"].startswith('absent(up{job="nvidia-dcgm-exporter"} == 1)\nand on ()')
    assert 'container=~"nvidia-dcgm-exporter"' in alerts["DCGMExporterCrashLooping"]["expr"]


def test_no_hpa_alert_without_an_autoscaler(helm4):
    spec = _rule_spec(helm4, **{"autoscaling.engine": "none"})
    assert "InferenceHPAMaxedOut" not in _alerts(spec)
    assert "InferenceHPAScalingInactive" not in _alerts(spec)
    assert "InferencePodsNotReady" in _alerts(spec)


# The rules before issue 14, each with the unit-test case it got wrong (negative controls:
# the new cases catch the old behaviour, so they are not vacuous).
OLD_RULES = {
    # increase() per series: a DBE across an exporter restart starts a new series at 1.
    ("GPUDoubleBitECCError", "20m"): "max by (Hostname, gpu, UUID) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[30m])) > 0",
    # absent() alone: a GPU pool scaled to zero pages.
    ("DCGMExporterAbsent", "12m"): 'absent(up{job="gi-gpu-inference-dcgm-exporter"} == 1)',
    # no opt-out exclusion: a DRA node (gpu.present, no nvidia.com/gpu) pages as critical.
    ("GPUNodeNoAllocatableGPUs", "11m"):
        '(sum by (node) (kube_node_status_capacity{resource=~"nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"}) > 0 '
        'unless on (node) sum by (node) (kube_node_status_allocatable{resource=~"nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"}) > 0) '
        'or (max by (node) (kube_node_labels{label_nvidia_com_gpu_present="true"}) '
        'unless on (node) sum by (node) (kube_node_status_capacity{resource=~"nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"}) > 0)',
    # unavailable > 0 for 20m: a healthy rollout of slow-loading pods fires.
    ("InferencePodsNotReady", "21m"):
        'kube_deployment_status_replicas_unavailable{namespace="inference",deployment="gi-gpu-inference"} > 0',
}


def _cases_for(alert: str, eval_time: str) -> list[dict]:
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    return [c for c in cases if any(t["alertname"] == alert and t["eval_time"] == eval_time
                                    for t in c["alert_rule_test"])]


@pytest.mark.parametrize("alert, eval_time", sorted(OLD_RULES))
def test_the_old_rule_fails_the_new_case(spec, promtool, tmp_path, alert, eval_time):
    old = copy.deepcopy(spec)
    for g in old["groups"]:
        for r in g["rules"]:
            if r.get("alert") == alert:
                r["expr"] = OLD_RULES[(alert, eval_time)]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    cases = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": _cases_for(alert, eval_time)}
    assert cases["tests"]
    (tmp_path / "t.yaml").write_text(_with_runbooks(yaml.safe_dump(cases), spec))
    proc = run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"alertname: {alert}, time: {eval_time}" in out, out
    # and the rendered rule passes the same cases
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_crash_loop_is_missed_by_up_equals_zero(spec):
    """The crash-loop case (up flapping) keeps DCGMExporterDown quiet; only the new alert fires."""
    (case,) = _cases_for("DCGMExporterCrashLooping", "3m")
    results = {(t["alertname"], t["eval_time"]): bool(t["exp_alerts"]) for t in case["alert_rule_test"]}
    assert results == {("DCGMExporterDown", "20m"): False, ("DCGMExporterCrashLooping", "3m"): False,
                       ("DCGMExporterCrashLooping", "20m"): True}


def test_rollout_stays_within_the_progress_deadline(helm4):
    """The stalled-rollout branch relies on Progressing=False, which the Deployment must not
    reach while a healthy pod is still loading (the default 600 s is below the load budget)."""
    objs = render(helm4, set_values={"server.modelLoadTimeoutSeconds": "1800"})
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    assert dep["spec"]["progressDeadlineSeconds"] == 2400


def _counter_fields(objs) -> set[str]:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("dcgm-exporter-counters")]
    return {line.split(",")[0].strip() for line in cm["data"]["counters.csv"].splitlines()
            if line.strip() and not line.startswith("#")}


def test_our_exporter_ships_every_field_the_alerts_read(helm):
    import re
    objs = render(helm, set_values={"platform.alerts.force": "true", "platform.dcgmExporter.enabled": "true"})
    rules = [o for o in objs if o["kind"] == "PrometheusRule"]
    spec = {"groups": [g for r in rules for g in r["spec"]["groups"]]}
    needed = {f for r in _alerts(spec).values() for f in re.findall(r"DCGM_\w+", r["expr"])}
    assert {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_GPU_TEMP"} <= needed
    assert needed <= _counter_fields(objs)


# Upstream's default counters (NVIDIA/dcgm-exporter etc/default-counters.csv): at 4.2.3-4.1.3
# and at 4.5.3-4.8.2 (the tag this chart pins), DCGM_EXP_XID_ERRORS_COUNT and
# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL are commented out (not collected); GPU_TEMP and
# ROW_REMAP_FAILURE are collected. The GPU Operator's exporter uses that file unless its
# ClusterPolicy names a counters ConfigMap.
UPSTREAM_DEFAULT_MISSING = {"DCGM_EXP_XID_ERRORS_COUNT": "GPUCriticalXidError",
                            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "GPUDoubleBitECCError"}


def test_notes_say_which_alerts_cannot_fire_with_the_operator_exporter(helm4, tmp_path):
    from tests.chart.test_workload_behaviour import notes
    text = notes(helm4, tmp_path, {"platform.gpuOperator": "true", "platform.alerts.force": "true"})
    for field, alert in UPSTREAM_DEFAULT_MISSING.items():
        assert f"{alert} needs {field}" in text, text
    assert "default-counters.csv" in text
    quiet = notes(helm4, tmp_path, {"platform.alerts.force": "true", "platform.dcgmExporter.enabled": "true"})
    assert "default-counters.csv" not in quiet


def test_promtool_is_the_debian_build(promtool):
    out = run([promtool, "--version"]).stdout + run([promtool, "--version"]).stderr
    assert "2.42" in out, out
    assert shutil.which(promtool) or Path(promtool).exists()
