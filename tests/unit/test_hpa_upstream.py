"""The Kubernetes HPA controller's own table tests, ported as data (tests/unit/data/hpa/*.yaml,
each file names its upstream source), run against gpuvalues.planners.autoscaling.hpa.

Expectations are upstream's; the helpers below only rebuild upstream's fixtures (the fake
pod lister, generateScalingRules, generateEventsUniformDistribution) from the data.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuvalues.planners.autoscaling.hpa import (
    HPA,
    ExternalMetric,
    MetricUnavailable,
    ObjectMetric,
    PodSample,
    PodsMetric,
    combine_proposals,
    convert_desired_replicas_with_rules,
    current_usage_milli,
    group_pods,
    metric_replicas,
    milli_value,
)

DATA = Path(__file__).parent / "data" / "hpa"
NOW = 100_000.0  # any clock origin; upstream uses time.Now()


def load(name: str):
    doc = yaml.safe_load((DATA / name).read_text())
    return doc["cases"] if isinstance(doc, dict) and "cases" in doc else doc


def ids(cases):
    return [c["name"] for c in cases]


# ---------------------------------------------------------------- replica_calculator_test.go

def fake_pods(case) -> list[PodSample]:
    """prepareTestClientSet + prepareTestCMClient: max(currentReplicas, len(podPhase)) pods."""
    n = max(case["current_replicas"], len(case.get("pod_phase", [])))
    ready = case.get("pod_ready", [])
    phase = case.get("pod_phase", [])
    deleting = case.get("pod_deleting", [])
    levels = case["levels_milli"] if case["metric_type"] == "pods" else []
    return [PodSample(value_milli=levels[i] if i < len(levels) else None,
                      phase=phase[i] if i < len(phase) else "Running",
                      ready=ready[i] if i < len(ready) else True,
                      deleting=deleting[i] if i < len(deleting) else False)
            for i in range(n)]


def build_metric(case, pods):
    t, levels = case["metric_type"], case["levels_milli"]
    if t == "pods":
        return PodsMetric(tuple(pods), case["target_milli"])
    if t == "object":
        return ObjectMetric(levels[0], target_milli=case["target_milli"])
    if t == "object_per_pod":
        return ObjectMetric(levels[0], average_target_milli=case["average_target_milli"])
    if t == "external":
        return ExternalMetric(tuple(levels), target_milli=case["target_milli"])
    return ExternalMetric(tuple(levels), average_target_milli=case["average_target_milli"])


RC = load("replica_calculator.yaml")


@pytest.mark.parametrize("case", RC, ids=ids(RC))
def test_replica_calculator(case):
    pods = fake_pods(case)
    metric = build_metric(case, pods)
    tolerance = tuple(case["tolerance"]) if "tolerance" in case else 0.1
    current = case["current_replicas"]
    assert metric_replicas(metric, current, current, pods, tolerance) == case["expected_replicas"]
    assert current_usage_milli(metric, current) == case["expected_usage_milli"]


# ---------------------------------------------------------------- horizontal_test.go helpers

def generate_scaling_rules(pods, pods_period, percent, percent_period, window):
    rules = {"stabilizationWindowSeconds": window, "selectPolicy": "Max"}
    policies = []
    if pods:
        policies.append({"type": "Pods", "value": pods, "periodSeconds": pods_period})
    if percent:
        policies.append({"type": "Percent", "value": percent, "periodSeconds": percent_period})
    if policies:
        rules["policies"] = policies
    return rules


def uniform_events(spec, now):
    """generateEventsUniformDistribution: Go converts the float offset to a Duration (int)."""
    changes, period = spec["uniform_changes"], spec["period_s"]
    seg = period / len(changes)
    return [(now - int(period - seg * (i + 1) + seg / 2), c, False) for i, c in enumerate(changes)]


SWR = load("scaling_with_rules.yaml")


@pytest.mark.parametrize("case", SWR, ids=ids(SWR))
def test_scaling_with_rules(case):
    behavior = {"scaleUp": case.get("scale_up"), "scaleDown": case.get("scale_down")}
    h = HPA(case["min_replicas"], case["max_replicas"], behavior)
    h.load_state(
        scale_up_events=uniform_events(case["scale_up_events"], NOW) if "scale_up_events" in case else (),
        scale_down_events=uniform_events(case["scale_down_events"], NOW) if "scale_down_events" in case else (),
    )
    replicas, condition = h.limit_rate(NOW, case["current_replicas"], case["desired_replicas"])
    assert (replicas, condition) == (case["expected_replicas"], case["expected_condition"])


CDR = load("convert_desired_replicas_with_rules.yaml")


@pytest.mark.parametrize("case", CDR, ids=ids(CDR))
def test_convert_desired_replicas_with_rules(case):
    got = convert_desired_replicas_with_rules(case["current_replicas"], case["desired_replicas"],
                                              case["min_replicas"], case["max_replicas"])
    assert got == (case["expected_replicas"], case["expected_condition"])


NDR = load("normalize_desired_replicas.yaml")


@pytest.mark.parametrize("case", NDR, ids=ids(NDR))
def test_normalize_desired_replicas(case):
    h = HPA(1, 1000)  # no behavior: downscale stabilization 5 minutes
    h.load_state(recommendations=[(NOW - age, r) for r, age in case["recommendations"]])
    assert h.stabilize(NOW, 1, case["desired_replicas"]) == case["expected_replicas"]
    assert len(h.recommendations) == case["expected_log_length"]


NDRB = load("normalize_desired_replicas_with_behavior.yaml")


@pytest.mark.parametrize("case", NDRB, ids=ids(NDRB))
def test_normalize_desired_replicas_with_behavior(case):
    behavior = {"scaleUp": {"stabilizationWindowSeconds": case.get("scale_up_window_s", 0)},
                "scaleDown": {"stabilizationWindowSeconds": case.get("scale_down_window_s", 0)}}
    h = HPA(1, 1000, behavior)
    h.load_state(recommendations=[(NOW - age, r) for r, age in case["recommendations"]])
    assert h.stabilize(NOW, case["current_replicas"], case["desired_replicas"]) == case["expected_replicas"]
    if "expected_recommendations" in case:
        assert [r for _, r in h.recommendations] == case["expected_recommendations"]


SSE = load("store_scale_events.yaml")


@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize("case", SSE, ids=ids(SSE))
def test_store_scale_events(case, direction):
    rules = generate_scaling_rules(*case["rules"]) if case["rules"] else None
    key = "scaleUp" if direction == "up" else "scaleDown"
    h = HPA(1, 1000, {key: rules} if rules else None)
    prev = [(NOW - age, change, outdated) for change, age, outdated in case["prev_events"]]
    h.load_state(**({"scale_up_events": prev} if direction == "up" else {"scale_down_events": prev}))
    events = h.scale_up_events if direction == "up" else h.scale_down_events
    assert sum(c for at, c, _ in events if at > NOW - 60) == case["expected_change_in_60s"]
    sign = 1 if direction == "up" else -1
    h.record_scale(NOW, sign * case["replica_change"])
    events = h.scale_up_events if direction == "up" else h.scale_down_events
    assert [[c, o] for _, c, o in events] == case["new_events"]


def test_scale_limits_with_min_policy():
    doc = yaml.safe_load((DATA / "scale_limits_min_policy.yaml").read_text())
    up = HPA(1, 1000, {"scaleUp": doc["rules"]})
    cur = doc["scale_up"]["current_replicas"]
    assert up.limit_rate(NOW, cur, 1000)[0] == doc["scale_up"]["expected_limit"]
    down = HPA(1, 1000, {"scaleDown": doc["rules"]})
    cur = doc["scale_down"]["current_replicas"]
    assert down.limit_rate(NOW, cur, 1)[0] == doc["scale_down"]["expected_limit"]


# ---------------------------------------------------------------- horizontal_test.go, whole syncs

RECONCILE = load("reconcile.yaml")


def reconcile_metric(spec, levels, pods):
    if spec["type"] not in ("Pods", "Object", "External"):
        return None  # an unknown metric source type: the controller fails that metric
    target = milli_value(spec["target"])
    avg = spec["target_type"] == "AverageValue"
    if spec["type"] == "Pods":
        return PodsMetric(tuple(pods), target)
    if spec["type"] == "Object":
        return ObjectMetric(levels[0], average_target_milli=target) if avg else ObjectMetric(levels[0], target_milli=target)
    return (ExternalMetric(tuple(levels), average_target_milli=target) if avg
            else ExternalMetric(tuple(levels), target_milli=target))


@pytest.mark.parametrize("case", RECONCILE, ids=ids(RECONCILE))
def test_reconcile(case):
    n = case.get("pods", case["status_replicas"])
    levels = case["reported_levels_milli"]
    ready = case.get("pod_ready", [])
    pods_metric = any(m["type"] == "Pods" for m in case["metrics"])
    pods = [PodSample(levels[i] if pods_metric and i < len(levels) else None,
                      ready=ready[i] if i < len(ready) else True) for i in range(n)]
    h = HPA(case["min_replicas"], case["max_replicas"])
    if "recommendations" in case:
        h.load_state(recommendations=case["recommendations"])
    proposals = []
    for spec in case["metrics"]:
        metric = reconcile_metric(spec, levels, pods)
        try:
            proposals.append(None if metric is None else
                             metric_replicas(metric, case["spec_replicas"], case["status_replicas"], pods))
        except MetricUnavailable:
            proposals.append(None)
    try:
        desired = combine_proposals(case["spec_replicas"], proposals)
    except MetricUnavailable:
        desired = None
    assert h.reconcile(NOW, case["spec_replicas"], desired) == case["expected_replicas"]


GP = load("group_pods.yaml")


@pytest.mark.parametrize("case", GP, ids=ids(GP))
def test_group_pods(case):
    samples = [PodSample(1 if p["has_metric"] else None, phase=p["phase"], ready=p["ready"],
                         deleting=p["deleting"]) for p in case["pods"]]
    g = group_pods(samples)
    got = {"ready": len(g.ready_values), "unready": g.unready, "missing": g.missing, "ignored": g.ignored}
    assert got == case["expected"]
