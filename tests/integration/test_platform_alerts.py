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
    assert len(rules) == 1, [o["kind"] for o in objs]
    return rules[0]["spec"]


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
    assert len(names) == 9, names
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
    expr = _alerts(spec)["DCGMExporterAbsent"]["expr"]
    assert expr == 'absent(up{job="nvidia-dcgm-exporter"} == 1)'


def test_no_hpa_alert_without_an_autoscaler(helm4):
    spec = _rule_spec(helm4, **{"autoscaling.engine": "none"})
    assert "InferenceHPAMaxedOut" not in _alerts(spec)
    assert "InferencePodsNotReady" in _alerts(spec)


def test_promtool_is_the_debian_build(promtool):
    out = run([promtool, "--version"]).stdout + run([promtool, "--version"]).stderr
    assert "2.42" in out, out
    assert shutil.which(promtool) or Path(promtool).exists()
