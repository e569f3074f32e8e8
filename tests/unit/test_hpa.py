"""gpuvalues.planners.autoscaling.hpa beyond the upstream tables: hand-computed cases for the paths those tables
leave thin (missing and pending pods, integer averages, period boundaries, percent
rounding, defaults, guards) and the public API the acceptance tests use."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuvalues.errors import CapacityError
from gpuvalues.planners.autoscaling.hpa import (
    HPA,
    ExternalMetric,
    MetricUnavailable,
    ObjectMetric,
    PodSample,
    PodsMetric,
    combine_proposals,
    fill_behavior,
    format_milli,
    metrics_replicas,
    milli_value,
    parse_quantity,
    pods_metric_replicas,
)

P = PodSample


# ---------------------------------------------------------------- Pods metric

def test_scale_up_basic():
    # avg 20000 / 15000 = 1.333 -> ceil(1.333 x 3) = 4
    assert pods_metric_replicas(3, [P(20000), P(10000), P(30000)], 15000) == 4


def test_missing_pods_count_as_target_on_scale_down():
    # ratio 5000/10000 = 0.5; the missing pod counts as 10000: avg 6250 -> ceil(0.625 x 4) = 3
    assert pods_metric_replicas(4, [P(5000), P(5000), P(5000), P(None)], 10000) == 3


def test_missing_pods_count_as_zero_on_scale_up():
    # ratio 3.0; two missing pods at 0: avg 10000 -> ratio 1.0, within tolerance -> keep 3
    assert pods_metric_replicas(3, [P(30000), P(None), P(None)], 10000) == 3


def test_pending_pods_would_reverse_direction():
    # ratio 1.5 with pending pods: padded with 0, avg 15000 -> ratio 0.75 < 1: keep 4
    # (ignoring the pending pods would give ceil(1.5 x 2) = 3, a scale-down)
    pods = [P(30000), P(30000), P(None, phase="Pending"), P(None, phase="Pending")]
    assert pods_metric_replicas(4, pods, 20000) == 4


def test_pending_pods_ignored_on_scale_down():
    pods = [P(10000), P(10000), P(None, phase="Pending")]
    assert pods_metric_replicas(3, pods, 20000) == 1  # ceil(0.5 x 2)


def test_failed_and_deleting_pods_ignored():
    pods = [P(30000), P(30000, phase="Failed"), P(90000, deleting=True)]
    assert pods_metric_replicas(3, pods, 10000) == 3  # one counted pod at ratio 3


def test_unready_running_pods_count_for_custom_metrics():
    # readiness only matters for CPU: the not-ready pod's 30000 is averaged in
    assert pods_metric_replicas(2, [P(30000, ready=False), P(10000)], 10000) == 4


def test_integer_average_truncates():
    # (1 + 2) / 2 = 1 in Go's integer division: ratio exactly 1.0, keep 2 (floats would say 3)
    assert pods_metric_replicas(2, [P(1), P(2)], 1) == 2


def test_per_direction_tolerance():
    pods = [P(10200)] * 3
    assert pods_metric_replicas(3, pods, 10000) == 3  # 1.02 within the default 0.1
    assert pods_metric_replicas(3, pods, 10000, tolerance=(0.5, 0.01)) == 4  # ceil(3.06)
    assert pods_metric_replicas(3, [P(6000)] * 3, 10000, tolerance=(0.5, 0.01)) == 3
    assert pods_metric_replicas(3, [P(6000)] * 3, 10000, tolerance=(0.3, 0.01)) == 2  # ceil(1.8)


def test_pods_metric_errors():
    with pytest.raises(MetricUnavailable, match="no pods"):
        pods_metric_replicas(1, [], 1000)
    with pytest.raises(MetricUnavailable, match="did not receive metrics"):
        pods_metric_replicas(2, [P(None), P(None, phase="Pending")], 1000)
    with pytest.raises(CapacityError):
        P(1, phase="Sleeping")
    with pytest.raises(CapacityError):
        P(1.5)  # milli-units are integers


# ---------------------------------------------------------------- several metrics

def test_multiple_metrics_take_the_max():
    pods = [P(20000), P(20000)]
    metrics = [PodsMetric(tuple(pods), 10000),  # -> 4
               ObjectMetric(30000, target_milli=10000),  # ratio 3 x 2 ready -> 6
               ExternalMetric((5000, 5000), average_target_milli=2000)]  # ceil(10000/2000) = 5
    assert metrics_replicas(metrics, 2, pods) == 6


def test_invalid_metric_blocks_scale_down_only():
    assert combine_proposals(4, [None, 7]) == 7
    with pytest.raises(MetricUnavailable):
        combine_proposals(4, [None, 2])
    with pytest.raises(MetricUnavailable):
        combine_proposals(4, [None, None])


def test_object_value_from_zero_replicas_skips_tolerance():
    # currentReplicas 0 (scale to zero path): ceil(ratio), no ready pods needed
    assert metrics_replicas([ObjectMetric(1050, target_milli=1000)], 0, []) == 2


# ---------------------------------------------------------------- behavior defaults

def test_behavior_defaults_as_api_server():
    b = fill_behavior({})
    assert b.scale_up.stabilization_window_seconds == 0 and b.scale_up.select_policy == "Max"
    assert [(p.type, p.value, p.period_seconds) for p in b.scale_up.policies] == [("Pods", 4, 15), ("Percent", 100, 15)]
    assert b.scale_down.stabilization_window_seconds is None  # the controller's 300 s flag
    assert [(p.type, p.value, p.period_seconds) for p in b.scale_down.policies] == [("Percent", 100, 15)]
    b = fill_behavior({"scaleDown": {"stabilizationWindowSeconds": 60, "tolerance": "50m"}})
    assert b.scale_down.stabilization_window_seconds == 60 and b.scale_down.tolerance == 0.05
    assert [p.type for p in b.scale_down.policies] == ["Percent"]
    assert fill_behavior(None) is None


@pytest.mark.parametrize("behavior, field", [
    ({"scaleUp": {"stabilizationWindowSeconds": 3601}}, "behavior.scaleUp.stabilizationWindowSeconds"),
    ({"scaleUp": {"policies": []}}, "behavior.scaleUp.policies"),
    ({"scaleDown": {"selectPolicy": "Fastest"}}, "behavior.scaleDown.selectPolicy"),
    ({"scaleDown": {"policies": [{"type": "Nodes", "value": 1, "periodSeconds": 60}]}}, "behavior.scaleDown.policies[0].type"),
    ({"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}}, "behavior.scaleDown.policies[0].periodSeconds"),
    ({"scaleDown": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 60}]}}, "behavior.scaleDown.policies[0].value"),
    ({"scaleUp": {"tolerance": "-1"}}, "behavior.scaleUp.tolerance"),
    ({"scaleSideways": {}}, "behavior"),
])
def test_behavior_validation(behavior, field):
    with pytest.raises(CapacityError) as e:
        HPA(1, 10, behavior)
    assert e.value.field == field


def test_tolerance_from_behavior():
    h = HPA(1, 10, {"scaleUp": {"tolerance": "0.01"}})
    assert h.tolerances == (0.1, 0.01)


# ---------------------------------------------------------------- normalization

def test_legacy_scale_up_limit_and_stabilization():
    h = HPA(1, 20)
    assert h.recommend(0, 3, 10) == 6 and h.last_reason == "ScaleUpLimit"  # max(2 x 3, 4)
    h = HPA(1, 20)
    h.record_recommendation(-100, 8)
    assert h.recommend(0, 6, 2) == 8  # highest recommendation in the last 5 minutes
    h = HPA(1, 20)
    h.record_recommendation(-300, 8)  # exactly 300 s old: not before the cutoff, still counts
    assert h.recommend(0, 6, 2) == 8
    h = HPA(1, 20)
    h.record_recommendation(-300.5, 8)
    assert h.recommend(0, 6, 2) == 2


def test_policy_period_boundary():
    h = HPA(1, 100, {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}})
    h.record_scale(0, 4)  # 10 -> 14 at t=0
    assert h.recommend(59, 14, 30) == 14  # the period started at 10: 10 + 4 = 14
    assert h.recommend(60, 14, 30) == 18  # the event is exactly 60 s old: out of the period


def test_percent_rounding_directions():
    up = HPA(1, 100, {"scaleUp": {"policies": [{"type": "Percent", "value": 15, "periodSeconds": 60}]}})
    assert up.recommend(0, 10, 50) == 12  # ceil(10 x 1.15 = 11.5)
    down = HPA(1, 100, {"scaleDown": {"stabilizationWindowSeconds": 0,
                                      "policies": [{"type": "Percent", "value": 15, "periodSeconds": 60}]}})
    assert down.recommend(0, 10, 1) == 8  # int(10 x 0.85 = 8.5)


def test_select_policy_min_max_disabled():
    rules = {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                          {"type": "Percent", "value": 100, "periodSeconds": 15}]}
    assert HPA(1, 100, {"scaleUp": {**rules, "selectPolicy": "Max"}}).recommend(0, 10, 50) == 20
    assert HPA(1, 100, {"scaleUp": {**rules, "selectPolicy": "Min"}}).recommend(0, 10, 50) == 14
    assert HPA(1, 100, {"scaleUp": {**rules, "selectPolicy": "Disabled"}}).recommend(0, 10, 50) == 10
    down = {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 2, "periodSeconds": 15},
                                                          {"type": "Percent", "value": 50, "periodSeconds": 15}]}
    assert HPA(1, 100, {"scaleDown": {**down, "selectPolicy": "Max"}}).recommend(0, 10, 1) == 5
    assert HPA(1, 100, {"scaleDown": {**down, "selectPolicy": "Min"}}).recommend(0, 10, 1) == 8


def test_scale_down_stabilization_window_with_behavior():
    h = HPA(1, 100, {"scaleDown": {"stabilizationWindowSeconds": 120}})
    assert h.recommend(0, 10, 10) == 10
    assert h.recommend(60, 10, 3) == 10  # the 10 from t=0 is inside the window
    assert h.recommend(119, 10, 3) == 10
    assert h.recommend(120, 10, 3) == 3  # exactly 120 s old: outside (strict After)


def test_reconcile_guards_and_events():
    h = HPA(2, 10, {})
    assert h.reconcile(0, 0, 5) == 0 and h.last_reason == "ScalingDisabled"
    assert h.reconcile(15, 12, 3) == 10  # above max -> max
    assert h.reconcile(30, 1, 9) == 2  # below min -> min
    assert h.reconcile(45, 4, None) == 4  # metrics failed: no change
    assert h.reconcile(60, 4, 9) == 8  # default scale-up: max(4 + 4 pods, 4 x 200%) = 8
    assert h.scale_up_events[-1][1] == 4


# ---------------------------------------------------------------- quantities

@pytest.mark.parametrize("text, milli", [("700m", 700), ("0.7", 700), ("70", 70000), ("1.5k", 1_500_000),
                                         ("1Ki", 1_024_000), ("5e-1", 500), ("0.0001", 1), (3, 3000)])
def test_quantity_milli(text, milli):
    assert milli_value(text) == milli


def test_quantity_format_and_errors():
    assert format_milli(700) == "700m" and format_milli(70000) == "70"
    assert parse_quantity("250m") == Fraction(1, 4)
    for bad in ("7 0", "abc", "1.2.3", True):
        with pytest.raises(CapacityError):
            parse_quantity(bad)


def test_external_sums_cap_like_the_controller():
    from gpuvalues.planners.autoscaling.hpa import (
        MAX_INT32,
        MAX_INT64,
        current_usage_milli,
        external_per_pod_metric_replicas,
    )

    # AverageValue: the sum is ceil(sum / target) once outside tolerance: (3000+5000)/2000 = 4
    assert external_per_pod_metric_replicas(2, (3000, 5000), 2000) == 4
    # the per-pod path treats any negative running sum as an int64 overflow: MaxInt64
    m = ExternalMetric((-5,), average_target_milli=1000)
    assert current_usage_milli(m, 2) == MAX_INT64
    assert external_per_pod_metric_replicas(2, (-5,), 1000) == MAX_INT32
    # the Value path caps a positive overflow at MaxInt64
    assert current_usage_milli(ExternalMetric((MAX_INT64, 5), target_milli=1), 1) == MAX_INT64


# ---------------------------------------------------------------- properties

_policy = st.fixed_dictionaries({"type": st.sampled_from(["Pods", "Percent"]),
                                 "value": st.integers(1, 200), "periodSeconds": st.integers(1, 600)})
_rules = st.fixed_dictionaries({}, optional={
    "stabilizationWindowSeconds": st.integers(0, 900),
    "selectPolicy": st.sampled_from(["Max", "Min", "Disabled"]),
    "policies": st.lists(_policy, min_size=1, max_size=3)})
_behavior = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"scaleUp": _rules, "scaleDown": _rules}))


@settings(max_examples=300, deadline=None)
@given(behavior=_behavior, lo=st.integers(1, 20), span=st.integers(0, 50),
       history=st.lists(st.tuples(st.integers(0, 900), st.integers(0, 200)), max_size=8),
       events=st.lists(st.tuples(st.integers(0, 900), st.integers(-20, 20)), max_size=6),
       data=st.data())
def test_recommendation_stays_within_min_max(behavior, lo, span, history, events, data):
    hi = lo + span
    current = data.draw(st.integers(lo, hi))
    desired = data.draw(st.integers(0, 500))
    h = HPA(lo, hi, behavior)
    now = 1000.0
    for age, r in history:
        h.record_recommendation(now - age, r)
    for age, d in sorted(events, reverse=True):
        h.record_scale(now - age, d)
    got = h.recommend(now, current, desired)
    assert lo <= got <= hi
    if desired >= current:  # never moves against the metrics' direction
        assert got >= current
    elif behavior is not None and h.behavior.scale_down.select_policy == "Disabled":
        assert got == current  # scale-down disabled
