"""gpuvalues.planners.autoscaling.simulate.scale_to_zero: GPU-hours saved against requests that waited for a
cold start. Expected values are worked out by hand in each docstring from the trace."""
from __future__ import annotations

import pytest

from gpuvalues.errors import CapacityError
from gpuvalues.io.present import scale_to_zero_table
from gpuvalues.planners.autoscaling.simulate import parse_trace, scale_to_zero, scale_to_zero_sweep

# one hour, idle except 1 req/s during t = 1800..1859 (sampled each second: 60 requests)
BURST = parse_trace("0,0\n1799,0\n1800,1\n1859,1\n1860,0\n3600,0\n")


def test_one_burst_by_hand():
    """At zero until the poll at 1800 sees load; ready at 1800+120 = 1920; last load at 1859,
    back to zero at 1859+300 -> the replica exists 1800..2159: 360 s = 0.1 GPU-hours against
    1.0 kept at one replica. All 60 requests arrive before 1920 and wait 1920-t: 120..61 s,
    mean 90.5."""
    r = scale_to_zero(BURST, replica_rps=2, cooldown_s=300, cold_start_s=120).as_dict()
    assert r["gpu_hours_min1"] == 1.0 and r["gpu_hours_zero"] == 0.1 and r["saved_pct"] == 90.0
    assert r["cold_starts"] == 1 and r["requests"] == 60.0 and r["requests_waited"] == 60.0
    assert r["mean_wait_s"] == 90.5 and r["max_wait_s"] == 120.0


def test_polling_delays_the_activation():
    """Load from 1805: the next poll is at 1815 (every 15 s from 0), ready at 1935, so the
    first request waits 130 s."""
    tr = parse_trace("0,0\n1804,0\n1805,1\n1859,1\n1860,0\n3600,0\n")
    r = scale_to_zero(tr, replica_rps=2, cooldown_s=300, cold_start_s=120)
    assert r.max_wait_s == 130.0 and r.cold_starts == 1


def test_constant_load_saves_nothing_and_waits_once():
    """Never idle: one cold start at t=0 (120 requests wait), then one replica like the baseline."""
    tr = parse_trace("0,1\n3600,1\n")
    r = scale_to_zero(tr, replica_rps=2, cooldown_s=300, cold_start_s=120)
    assert r.gpu_hours_zero == pytest.approx(r.gpu_hours_min1) and r.cold_starts == 1
    assert r.requests_waited == pytest.approx(120.0) and r.time_at_zero_pct == 0.0


def test_cooldown_trades_gpu_hours_for_cold_starts():
    """Two bursts 20 minutes apart: a cooldown above the gap keeps the replica (one cold start,
    fewer GPU-hours saved); below it, the second burst waits for a second cold start."""
    tr = parse_trace("0,0\n599,0\n600,1\n659,1\n660,0\n1859,0\n1860,1\n1919,1\n1920,0\n7200,0\n")
    short, long_ = scale_to_zero_sweep(tr, [300, 1800], replica_rps=2, cold_start_s=120)
    assert (short.cold_starts, long_.cold_starts) == (2, 1)
    assert short.requests_waited == 120.0 and long_.requests_waited == 60.0
    assert short.gpu_hours_zero < long_.gpu_hours_zero < long_.gpu_hours_min1
    text = scale_to_zero_table([short.as_dict(), long_.as_dict()])
    assert "gpu_hours_saved" in text and "requests_waited" in text


def test_replicas_above_one_follow_the_load_in_both_runs():
    """At 5 req/s and 2 req/s per replica both runs hold 3 replicas once warm."""
    tr = parse_trace("0,5\n3600,5\n")
    r = scale_to_zero(tr, replica_rps=2, cooldown_s=300, cold_start_s=100, gpus_per_replica=2)
    # baseline 3 replicas x 2 GPUs x 1 h; scale to zero: 1 replica for the 100 s cold start
    assert r.gpu_hours_min1 == pytest.approx(6.0)
    assert r.gpu_hours_zero == pytest.approx(6.0 - 2 * 2 * 100 / 3600)


@pytest.mark.parametrize("kw, field", [({"replica_rps": 0}, "replica_rps"), ({"cooldown_s": -1}, "cooldown_s")])
def test_bad_parameters_name_the_field(kw, field):
    args = {"replica_rps": 2, "cooldown_s": 300, "cold_start_s": 120, **kw}
    with pytest.raises(CapacityError) as exc:
        scale_to_zero(BURST, **args)
    assert exc.value.field == field
