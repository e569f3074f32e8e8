"""Alerts stay quiet and correct for a workload that KEDA scales to zero (issue 18).

The PrometheusRule is rendered by the real Helm 4 with examples/values/scale-to-zero-keda.yaml
(minReplicas 0), and the real promtool (`promtool test rules`) replays what kube-state-metrics
and the DCGM exporter report for such a workload:
- idle at zero for two hours: NO alert of the rendered rule set fires (the list of alerts is
  read from the rendered rule, so an alert added later is held to the same rule);
- a cold start 0 -> 1 that takes the model's load time (10 min): still quiet;
- a cold start that never becomes ready: InferencePodsNotReady fires (the negative control:
  the same harness does report a broken workload).
"""
from __future__ import annotations

import pytest
import yaml

from tests.chart.chartlib import render
from tests.conftest import ROOT, run

EXAMPLE = ROOT / "examples" / "values" / "scale-to-zero-keda.yaml"
NS, DEPLOY = "inference", "gi-gpu-inference"
KSM = 'job="kube-state-metrics"'


@pytest.fixture(scope="module")
def rules(helm4) -> dict:
    objs = render(helm4, EXAMPLE, set_values={"platform.alerts.force": "true"}, kube_version="1.35.0")
    so = [o for o in objs if o["kind"] == "ScaledObject"]
    assert so and so[0]["spec"]["minReplicaCount"] == 0
    return {"groups": [g for o in objs if o["kind"] == "PrometheusRule" for g in o["spec"]["groups"]]}


def _alertnames(spec: dict) -> list[str]:
    return [r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r]


def _series(unavailable: str, replicas: str, minutes: int, scaling_disabled: str | None = None) -> list[dict]:
    """What a healthy platform reports for the scaled-to-zero release (KEDA's HPA is
    keda-hpa-<name>), with the Deployment's unavailable/desired replicas given as promtool
    value strings (all replicas are of the current revision: no rollout). At zero replicas
    the HPA reports ScalingActive=False (reason ScalingDisabled): `scaling_disabled` is that
    condition's 0/1 series."""
    hpa = f'namespace="{NS}",horizontalpodautoscaler="keda-hpa-{DEPLOY}",{KSM}'
    dep = f'namespace="{NS}",deployment="{DEPLOY}",{KSM}'
    cond = f'{hpa},condition="ScalingActive"'
    disabled = scaling_disabled or f"1x{minutes}"
    return [
        {"series": f"kube_deployment_status_replicas_unavailable{{{dep}}}", "values": unavailable},
        {"series": f"kube_deployment_spec_replicas{{{dep}}}", "values": replicas},
        # a scale-up from zero is no rollout: every pod is of the current revision
        {"series": f"kube_deployment_status_replicas_updated{{{dep}}}", "values": replicas},
        {"series": f"kube_deployment_spec_strategy_rollingupdate_max_unavailable{{{dep}}}", "values": f"1x{minutes}"},
        {"series": f'kube_horizontalpodautoscaler_status_condition{{{cond},status="false"}}', "values": disabled},
        {"series": f"kube_horizontalpodautoscaler_status_current_replicas{{{hpa}}}", "values": replicas},
        {"series": f"kube_horizontalpodautoscaler_spec_max_replicas{{{hpa}}}", "values": f"4x{minutes}"},
        {"series": f"kube_horizontalpodautoscaler_spec_min_replicas{{{hpa}}}", "values": f"0x{minutes}"},
        # the GPU platform itself is healthy: exporter up, the node offers its GPUs
        {"series": 'up{job="gi-gpu-inference-dcgm-exporter",instance="10.0.0.1:9400",node="gpu-0"}',
         "values": f"1x{minutes}"},
        {"series": 'kube_node_status_capacity{node="gpu-0",resource="nvidia_com_gpu",job="kube-state-metrics"}',
         "values": f"8x{minutes}"},
        {"series": 'kube_node_status_allocatable{node="gpu-0",resource="nvidia_com_gpu",job="kube-state-metrics"}',
         "values": f"8x{minutes}"},
    ]


def _promtool(promtool, tmp_path, spec, series, checks):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    cases = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": series, "alert_rule_test": checks}]}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    return run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path)


def test_idle_at_zero_no_alert_fires(rules, promtool, tmp_path):
    names = _alertnames(rules)
    assert {"InferencePodsNotReady", "InferenceHPAMaxedOut", "InferenceHPAScalingInactive"} <= set(names)
    checks = [{"eval_time": t, "alertname": n, "exp_alerts": []} for n in names for t in ("30m", "119m")]
    proc = _promtool(promtool, tmp_path, rules, _series("0x120", "0x120", 120), checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cold_start_within_the_load_time_is_quiet(rules, promtool, tmp_path):
    # idle 30 min at 0, a request arrives: 1 desired, unavailable for 10 min while it loads
    checks = [{"eval_time": t, "alertname": n, "exp_alerts": []}
              for n in _alertnames(rules) for t in ("35m", "45m", "89m")]
    proc = _promtool(promtool, tmp_path, rules,
                     _series("0x30 1x10 0x50", "0x30 1x60", 90, scaling_disabled="1x30 0x60"), checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cold_start_that_never_loads_fires(rules, promtool, tmp_path):
    """Negative control: a replica that never becomes ready after leaving zero is reported."""
    checks = [{"eval_time": "45m", "alertname": "InferencePodsNotReady", "exp_alerts": []},
              {"eval_time": "60m", "alertname": "InferencePodsNotReady", "exp_alerts": []}]
    proc = _promtool(promtool, tmp_path, rules, _series("0x30 1x60", "0x30 1x60", 90, scaling_disabled="1x30 0x60"), checks)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "alertname: InferencePodsNotReady, time: 1h" in out, out
