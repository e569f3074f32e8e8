"""Trace replay (gpuvalues.planners.autoscaling.simulate) and the `gpuvalues simulate` command.

Expectations are hand-derived: tiny traces whose every sync step can be followed on paper,
the flap counter on hand-made event lists, and the seed's claim that needs measuring
(stabilization stops flapping on the spike trace)."""
from __future__ import annotations

import json

import pytest
import yaml

from gpuvalues.cli import main
from gpuvalues.errors import CapacityError
from gpuvalues.io.traces import load_behaviors, load_trace
from gpuvalues.planners.autoscaling.capacity import recommended_behavior
from gpuvalues.planners.autoscaling.simulate import (
    BUILTIN_TRACES,
    NO_STABILIZATION,
    SimConfig,
    SimMetric,
    count_flaps,
    parse_metrics,
    parse_trace,
    plan_and_simulate,
    simulate,
)

# ---------------------------------------------------------------- traces


def test_parse_trace_with_header_comments_and_interpolation():
    tr = parse_trace("# comment\ntime_s,requests_per_s\n0,10\n\n60,40\n120, 40\n")
    assert tr.times_s == (0.0, 60.0, 120.0) and tr.rps == (10.0, 40.0, 40.0)
    assert tr.at(30) == 25.0 and tr.at(-5) == 10.0 and tr.at(500) == 40.0


@pytest.mark.parametrize("text, line, field, words", [
    ("time_s,requests_per_s\n0,10\n15,abc\n", 3, "requests_per_s", "not a number"),
    ("0,10\n15,-1\n", 2, "requests_per_s", ">= 0"),
    ("0,10\n15,1,2\n", 2, None, "expected 2 columns"),
    ("0,10\n15,1\n15,3\n", 3, "time_s", "times must increase"),
    ("0,10\n15,nan\n", 2, "requests_per_s", "finite"),
    ("time_s,rps\n0,1\n", 1, None, "header"),
])
def test_bad_trace_names_line_and_field(text, line, field, words):
    with pytest.raises(CapacityError) as e:
        parse_trace(text, "t.csv")
    assert (e.value.source, e.value.line, e.value.field) == ("t.csv", line, field)
    assert words in e.value.message
    assert str(e.value).startswith(f"t.csv:{line}: ")


def test_too_short_trace():
    with pytest.raises(CapacityError, match="at least two"):
        parse_trace("time_s,requests_per_s\n0,1\n")


def test_builtin_traces_load():
    for name in BUILTIN_TRACES:
        tr = load_trace(name)
        assert len(tr.times_s) > 100 and min(tr.rps) > 0
    spike = load_trace("spike")
    assert (min(spike.rps), max(spike.rps)) == (30.0, 110.0)


# ---------------------------------------------------------------- the replay, by hand


def test_constant_load_at_target_never_scales():
    # 50 rps, 5 ready pods, latency 2 s: running = 50 x 2 / 5 = 20 per pod = the target
    cfg = SimConfig(replica_rps=10, min_replicas=1, max_replicas=20, metrics=(SimMetric("running", 20000),),
                    initial_replicas=5)
    r = simulate(parse_trace("0,50\n600,50\n"), cfg, None, "legacy")
    assert r.scale_events == [] and set(r.replicas) == {5}
    # 600 s at 15 s steps: 41 steps of 5 pods = 5 x 41 x 15 s
    assert r.summary["gpu_hours"] == pytest.approx(5 * 41 * 15 / 3600, abs=1e-3)
    assert r.summary["slo_violation_minutes"] == 0


def test_step_up_follows_metric_lag_and_startup_by_hand():
    # Load jumps 20 -> 60 rps at t=60 s. mu 10, running target 10 per pod (latency 2 s).
    # Syncs at t=60 and 75 see t=30 and 45 (lag 30 s): 20 rps x 2 s / 4 pods = 10 = target.
    # t=90 sees t=60: 60 rps, but 4 pods serve at most 40 rps: running = 40 x 2 / 4 = 20
    # per pod, ratio 2 -> ceil(2 x 4) = 8.
    cfg = SimConfig(replica_rps=10, min_replicas=1, max_replicas=8, metrics=(SimMetric("running", 10000),),
                    initial_replicas=4, startup_s=120, metric_lag_s=30, tolerance=0.1)
    r = simulate(parse_trace("0,20\n59,20\n60,60\n900,60\n"), cfg, None, "legacy")
    assert r.scale_events[0] == (90.0, 4, 8)
    i = r.times_s.index(90.0)
    assert r.ready[i] == 4  # new pods load the model for 120 s
    assert r.ready[r.times_s.index(210.0)] == 8
    assert r.violation[r.times_s.index(60.0)]  # 60 rps on 40 rps of capacity: queue grows


def test_shorter_lag_scales_one_sync_earlier():
    # lag 0 still reads the last completed interval: t=75 sees t=60 (60 rps) and scales.
    cfg = SimConfig(replica_rps=10, min_replicas=1, max_replicas=8, metrics=(SimMetric("running", 10000),),
                    initial_replicas=4, metric_lag_s=0)
    r = simulate(parse_trace("0,20\n59,20\n60,60\n900,60\n"), cfg, None, "legacy")
    assert r.scale_events[0] == (75.0, 4, 8)


def test_missing_metric_dampens_scale_up_during_startup():
    # While the 4 new pods load, their server metric is missing and counts as 0 on a
    # scale-up (controller rule), so the HPA does not add more pods for the same backlog.
    cfg = SimConfig(replica_rps=10, min_replicas=1, max_replicas=30, metrics=(SimMetric("running", 10000),),
                    initial_replicas=4, startup_s=120, metric_lag_s=30)
    r = simulate(parse_trace("0,20\n59,20\n60,60\n900,60\n"), cfg, None, "legacy")
    # after 4 -> 8 at t=90, the next syncs see 4 reporting pods at 20 and 4 missing (0):
    # average 10 = target, within tolerance: no scale until the new pods report.
    assert [e for e in r.scale_events if e[0] < 210] == [(90.0, 4, 8)]


def test_count_flaps_by_hand():
    ev = [(0, 2, 6), (300, 6, 3), (500, 3, 6), (2000, 6, 2), (3000, 2, 4), (3100, 4, 2), (3200, 2, 5)]
    # down at 300 then up at 500 (200 s): flap; down at 2000, up at 3000 (1000 s > 600): no;
    # down at 3100, up at 3200: flap
    assert count_flaps(ev, 600) == 2
    assert count_flaps(ev, 60) == 0


# ---------------------------------------------------------------- the seed's cool-down advice


def test_spike_trace_flaps_without_stabilization_and_not_with_recommended():
    report = plan_and_simulate(load_trace("spike"), replica_rps=10,
                               behaviors={"no-stabilization": NO_STABILIZATION,
                                          "recommended": recommended_behavior(120)})
    by = {r.name: r.summary for r in report.results}
    assert by["no-stabilization"]["flaps"] >= 5  # one per burst, roughly
    assert by["recommended"]["flaps"] == 0
    # holding capacity between bursts costs GPU-hours and buys the SLO back
    assert by["recommended"]["gpu_hours"] > by["no-stabilization"]["gpu_hours"]
    assert by["recommended"]["slo_violation_minutes"] < by["no-stabilization"]["slo_violation_minutes"]


def test_vllm_queue_alone_saws_and_the_running_companion_fixes_it():
    # The waiting queue is 0 whenever capacity suffices: alone, the HPA sizes down to the
    # floor until a queue forms again. With the running-requests companion (max of both)
    # the steady state is sized and the sawtooth goes away.
    day = load_trace("diurnal")
    rec = {"recommended": recommended_behavior(120)}
    alone = plan_and_simulate(day, replica_rps=10, metrics="queue=10", behaviors=rec).results[0].summary
    paired = plan_and_simulate(day, replica_rps=10, behaviors=rec)  # plan: queue + running
    assert [m.kind for m in paired.config.metrics] == ["queue", "running"]
    paired = paired.results[0].summary
    assert alone["flaps"] > 10 and alone["slo_violation_minutes"] > 30
    assert paired["flaps"] == 0 and paired["slo_violation_minutes"] == 0


def test_recommended_behavior_window_scales_with_model_load():
    assert recommended_behavior(60)["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert recommended_behavior(300)["scaleDown"]["stabilizationWindowSeconds"] == 900
    assert recommended_behavior(5000)["scaleDown"]["stabilizationWindowSeconds"] == 3600


# ---------------------------------------------------------------- options


def test_parse_metrics_and_behaviors(tmp_path):
    assert parse_metrics("queue=5, gpu_util=70,gr_engine_active=700m") == (
        SimMetric("queue", 5000), SimMetric("gpu_util", 70000), SimMetric("gr_engine_active", 700))
    for bad in ("queue", "latency=5", "queue=-1", ""):
        with pytest.raises(CapacityError):
            parse_metrics(bad)
    f = tmp_path / "b.yaml"
    f.write_text("behavior:\n  scaleDown:\n    stabilizationWindowSeconds: 60\n")
    got = load_behaviors(["legacy", f"mine={f}"], 120)
    assert got["legacy"] is None and got["mine"]["scaleDown"]["stabilizationWindowSeconds"] == 60
    f.write_text("scaleDown:\n  stabilizationWindowSeconds: 99999\n")
    with pytest.raises(CapacityError) as e:
        load_behaviors([f"bad={f}"], 120)
    assert e.value.source == str(f) and e.value.field == "behavior.scaleDown.stabilizationWindowSeconds"
    with pytest.raises(CapacityError):
        load_behaviors(["fastest"], 120)


# ---------------------------------------------------------------- CLI


def test_cli_table_json_yaml(capsys):
    assert main(["simulate", "spike", "--replica-rps", "10"]) == 0
    out = capsys.readouterr().out
    assert "no-stabilization" in out and "recommended" in out and "flaps" in out
    assert main(["simulate", "spike", "--replica-rps", "10", "--output", "json", "--behavior", "legacy"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [b["behavior"] for b in data["behaviors"]] == ["legacy"]
    assert data["plan"]["metric"]["name"] == "vllm:num_requests_waiting"
    assert main(["simulate", "spike", "--replica-rps", "10", "--output", "yaml", "--metrics", "gpu_util=70",
                 "--behavior", "recommended", "--series"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["simulation"]["metrics"] == [{"kind": "gpu_util", "target_milli": 70000}]
    assert len(data["series"]["recommended"]["replicas"]) == 481


def test_cli_bad_csv_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "t.csv"
    bad.write_text("time_s,requests_per_s\n0,10\n15,abc\n")
    assert main(["simulate", str(bad), "--replica-rps", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpuvalues: error: {bad}:3: requests_per_s: 'abc' is not a number [GV100]"]


def test_cli_plot_png(tmp_path, capsys):
    png = tmp_path / "spike.png"
    assert main(["simulate", "spike", "--replica-rps", "10", "--plot", str(png), "-q"]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cli_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    png = tmp_path / "x.png"
    assert main(["simulate", "spike", "--replica-rps", "10", "--plot", str(png)]) == 2
    assert "pip install 'gpuvalues[plot]'" in capsys.readouterr().err
    assert not png.exists()


def test_cli_unreadable_inputs_are_one_line_errors(tmp_path, capsys):
    binary = tmp_path / "t.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    assert main(["simulate", str(binary), "--replica-rps", "10"]) == 2
    assert main(["simulate", str(tmp_path / "missing.csv"), "--replica-rps", "10"]) == 2
    assert main(["simulate", "spike", "--replica-rps", "10", "--plot", str(tmp_path / "no" / "x.png")]) == 2
    assert main(["simulate", "spike", "--replica-rps", "-1"]) == 2
    assert main(["simulate", "spike", "--replica-rps", "10", "--min-replicas", "9", "--max-replicas", "3"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 5 and all(line.startswith("gpuvalues: error: ") for line in lines)
    assert "not a text CSV" in lines[0] and "missing.csv" in lines[1] and "cannot write the plot" in lines[2]
