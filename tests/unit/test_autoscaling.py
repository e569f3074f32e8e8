"""Metric choice, Erlang C and the capacity model (gpuvalues.planners.autoscaling.capacity).

Oracles are independent of the code under test: Erlang C by its closed formula in exact
rational arithmetic, Erlang B against the published 1% grade-of-service table, replica
sizing by brute-force search over that exact formula, and hand computations.
"""
from __future__ import annotations

import math
from fractions import Fraction

import pytest

from gpuvalues.errors import CapacityError, GpuValuesError
from gpuvalues.planners.autoscaling import capacity as autoscaling
from gpuvalues.planners.autoscaling import hpa
from gpuvalues.planners.autoscaling.capacity import (
    CapacityPlan,
    choose_metric,
    erlang_b,
    erlang_c,
    mmc_mean_wait,
    plan_capacity,
    replicas_for_load,
)


def exact_erlang_c(c: int, a: Fraction) -> Fraction:
    """C(c, A) = (A^c/c! * c/(c-A)) / (sum_{k<c} A^k/k! + A^c/c! * c/(c-A))."""
    term = a**c / math.factorial(c) * Fraction(c) / (c - a)
    head = sum(a**k / math.factorial(k) for k in range(c))
    return term / (head + term)


# ---------------------------------------------------------------- Erlang C

@pytest.mark.parametrize("c, a", [(1, Fraction(1, 2)), (2, Fraction(1)), (3, Fraction(5, 2)),
                                  (5, Fraction(4)), (8, Fraction(77, 10)), (10, Fraction(3))])
def test_erlang_c_matches_closed_formula_small(c, a):
    assert erlang_c(c, float(a)) == pytest.approx(float(exact_erlang_c(c, a)), rel=1e-12)


def test_erlang_c_hand_values():
    # M/M/1: C = rho. M/M/2 at A=1: C = (1/2 * 2) / (1 + 1 + 1) = 1/3.
    assert erlang_c(1, 0.5) == pytest.approx(0.5, rel=1e-15)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3, rel=1e-15)


@pytest.mark.parametrize("c, a", [(300, Fraction(2805, 10)), (500, Fraction(480)), (800, Fraction(6001, 10))])
def test_erlang_c_stable_for_hundreds_of_servers(c, a):
    # A^c / c! overflows floats here (e.g. 480^500); the exact rational formula does not.
    got = erlang_c(c, float(a))
    assert 0 < got < 1 and math.isfinite(got)
    assert got == pytest.approx(float(exact_erlang_c(c, a)), rel=1e-9)


def test_erlang_b_published_table():
    # Erlang B table, 1% grade of service: 5 trunks carry 1.36 E, 10 trunks 4.46 E.
    assert erlang_b(5, 1.36) == pytest.approx(0.01, abs=0.0005)
    assert erlang_b(10, 4.46) == pytest.approx(0.01, abs=0.0005)


def test_erlang_c_edges():
    assert erlang_c(4, 0.0) == 0.0
    assert erlang_c(4, 4.0) == 1.0  # unstable queue: everybody waits
    assert erlang_c(4, 9.5) == 1.0
    with pytest.raises(CapacityError):
        erlang_c(0, 1.0)
    with pytest.raises(CapacityError):
        erlang_c(3, -1.0)
    with pytest.raises(CapacityError):
        erlang_c(3, math.nan)


def test_mean_wait_hand_computed():
    # M/M/2, lambda=1, mu=1: C=1/3, W_q = (1/3) / (2 - 1) = 1/3 s.
    assert mmc_mean_wait(2, 1.0, 1.0) == pytest.approx(1 / 3)
    assert mmc_mean_wait(2, 2.0, 1.0) == math.inf


def brute_force_size(rate: Fraction, mu: Fraction, p: Fraction, w: Fraction | None) -> int:
    a = rate / mu
    c = 1
    while True:
        if c > a:
            cw = exact_erlang_c(c, a)
            if cw <= p and (w is None or cw / (c * mu - rate) <= w):
                return c
        c += 1


@pytest.mark.parametrize("rate, mu, p, w", [
    (Fraction(4), Fraction(1), Fraction(1, 5), None),
    (Fraction(20), Fraction(5), Fraction(1, 5), Fraction(1)),
    (Fraction(120), Fraction(5), Fraction(1, 5), Fraction(1)),
    (Fraction(37), Fraction(3), Fraction(1, 20), None),
    (Fraction(9), Fraction(2), Fraction(1, 2), Fraction(1, 10)),
])
def test_replicas_for_load_matches_brute_force(rate, mu, p, w):
    got = replicas_for_load(float(rate), float(mu), max_wait_probability=float(p),
                            max_queue_wait_s=None if w is None else float(w))
    assert got == brute_force_size(rate, mu, p, w)


# ---------------------------------------------------------------- metric choice

def test_mig_uses_gr_engine_active_ratio():
    m = choose_metric("mig", "triton")
    assert (m.name, m.target, m.kind, m.target_milli) == ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "700m", "Pods", 700)
    assert "not reported per MIG instance" in m.reason
    assert choose_metric("mig", "vllm").name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert choose_metric("mig", "custom", target_utilization=0.65).target == "650m"


def test_whole_gpu_allows_gpu_util_and_recommends_queue_for_llm():
    m = choose_metric("whole", "vllm")
    assert (m.name, m.target, m.source) == ("vllm:num_requests_waiting", "5", "server")
    assert "recommended" in m.reason and "100%" in m.reason
    g = choose_metric("whole", "vllm", prefer="gpu")
    assert (g.name, g.target, g.unit) == ("DCGM_FI_DEV_GPU_UTIL", "70", "percent 0-100")
    assert choose_metric("whole", "triton").name == "DCGM_FI_DEV_GPU_UTIL"
    t = choose_metric("whole", "triton", prefer="server")
    assert t.name == "nv_inference_queue_duration_us" and t.adapter_name == "nv_inference_queue_duration_us"
    # The custom-metrics API name the chart's HPA and adapter rules use: ':' -> '_'.
    assert m.adapter_name == "vllm_num_requests_waiting"


def test_shared_gpu_allows_server_metrics_only():
    m = choose_metric("shared", "vllm")
    assert m.name == "vllm:num_requests_waiting" and "not attributable per pod" in m.reason
    with pytest.raises(CapacityError, match="time-slicing or MPS"):
        choose_metric("shared", "vllm", prefer="gpu")
    with pytest.raises(CapacityError, match="server_metric"):
        choose_metric("shared", "custom")
    c = choose_metric("shared", "custom", server_metric="app:inflight", queue_target=8)
    assert (c.name, c.target, c.adapter_name) == ("app:inflight", "8", "app_inflight")


def test_metric_choice_rejects_unknowns():
    for args in (("vgpu", "vllm"), ("whole", "tgi")):
        with pytest.raises(GpuValuesError):
            choose_metric(*args)
    with pytest.raises(CapacityError):
        choose_metric("whole", "vllm", prefer="gpu", target_utilization=1.5)


def test_every_rule_explains_itself():
    for mode in ("whole", "mig", "shared", "dra"):
        for server in ("vllm", "triton"):
            assert len(choose_metric(mode, server).reason) > 40


# ---------------------------------------------------------------- capacity model

def test_capacity_plan_hand_computed():
    # base 20 rps, peak 120 rps, 5 rps per replica, P(wait) <= 0.2, W_q <= 1 s, headroom 20%.
    plan = plan_capacity(20, 120, 5, gpus_per_replica=2)
    c_base = brute_force_size(Fraction(20), Fraction(5), Fraction(1, 5), Fraction(1))
    c_peak = brute_force_size(Fraction(120), Fraction(5), Fraction(1, 5), Fraction(1))
    c_max = brute_force_size(Fraction(144), Fraction(5), Fraction(1, 5), Fraction(1))
    assert isinstance(plan, CapacityPlan)
    assert plan.min_replicas == max(2, c_base)
    assert plan.max_replicas == c_max
    assert plan.design_utilization == pytest.approx(120 / (c_peak * 5))
    assert plan.gpus_at_max == 2 * c_max and plan.gpus_at_min == 2 * plan.min_replicas
    # vLLM queue target by Little's law: a replica drains 5 rps x 1 s = 5 waiting requests.
    assert plan.metric.name == "vllm:num_requests_waiting" and plan.metric.target == "5"
    assert plan.wait_probability_at_peak <= 0.2
    assert plan.warnings == ()


def test_capacity_gpu_target_follows_design_utilization():
    plan = plan_capacity(20, 120, 5, gpu_mode="mig", server_type="triton")
    c_peak = brute_force_size(Fraction(120), Fraction(5), Fraction(1, 5), Fraction(1))
    util = Fraction(120, 5 * c_peak)
    assert plan.metric.target_milli == math.floor(util * 100) * 10  # whole percent, in milli
    plan = plan_capacity(20, 120, 5, gpu_mode="whole", server_type="triton")
    assert plan.metric.target == str(math.floor(util * 100))


def test_ha_floor_at_low_load():
    plan = plan_capacity(0.1, 0.5, 10)
    assert plan.min_replicas == 2 and plan.max_replicas >= 2


def test_inventory_warning():
    plan = plan_capacity(20, 120, 5, gpus_per_replica=2, inventory_gpus=40)
    assert plan.max_replicas * 2 > 40
    assert len(plan.warnings) == 1 and "at most 20 replicas fit" in plan.warnings[0]
    ok = plan_capacity(20, 120, 5, gpus_per_replica=1, inventory_gpus=1000)
    assert ok.warnings == ()


@pytest.mark.parametrize("kwargs, field", [
    (dict(base_rps=10, peak_rps=5, replica_rps=1), "peak_rps"),
    (dict(base_rps=1, peak_rps=5, replica_rps=0), "replica_rps"),
    (dict(base_rps=-1, peak_rps=5, replica_rps=1), "base_rps"),
    (dict(base_rps=1, peak_rps=5, replica_rps=1, gpus_per_replica=0), "gpus_per_replica"),
])
def test_capacity_rejects_nonsense(kwargs, field):
    with pytest.raises(CapacityError) as e:
        plan_capacity(**kwargs)
    assert e.value.field == field


def test_hpa_names_reexported_from_one_implementation():
    assert autoscaling.PodSample is hpa.PodSample
    assert autoscaling.pods_metric_replicas is hpa.pods_metric_replicas
    assert autoscaling.HPA is hpa.HPA


def test_vllm_companion_running_metric_by_littles_law():
    plan = plan_capacity(30, 110, 10, request_latency_s=2.0)
    c_peak = brute_force_size(Fraction(110), Fraction(10), Fraction(1, 5), Fraction(1))
    util_pct = math.floor(Fraction(110, 10 * c_peak) * 100)  # design utilisation, whole percent
    expected = max(1000, math.floor(Fraction(util_pct, 100) * 10 * 2 * 1000))
    assert plan.companion is not None and plan.companion.name == "vllm:num_requests_running"
    assert plan.companion.target_milli == expected
    assert plan_capacity(30, 110, 10).companion is None  # no latency given
    assert plan_capacity(30, 110, 10, server_type="triton", request_latency_s=2.0).companion is None
