"""Trace replay: a load trace through the capacity model and the Kubernetes HPA.

A trace is a CSV of `time_s,requests_per_s` (a header line and `#` comment lines are
allowed; the load is linear between points). Every `sync_s` (15 s, the controller's sync
period) the HPA (gpuvalues.planners.autoscaling.hpa, the controller's own arithmetic) reads each metric as it
was `metric_lag_s` ago (rounded to whole sync steps, at least one), proposes replicas, takes the maximum, normalizes with the chosen
`behavior`, and scales; new pods serve only after `startup_s` (the model load time).

The serving model is a fluid M/M/c: `replica_rps` (mu) is one ready replica's throughput
at the latency SLO; load beyond the ready capacity builds a backlog that drains later; the
steady-state queue below capacity is Erlang C's L_q. Per-pod metric values:
- `queue`: requests waiting per ready pod, (L_q + backlog) / ready (vllm:num_requests_waiting);
- `queue_time`: mean queueing delay in microseconds (Triton's queue time per request);
- `running`: requests in flight per ready pod, served rate x `request_latency_s` / ready;
- `gpu_util` (0-100) and `gr_engine_active` (0-1): the busy fraction of ready pods.
Server metrics are missing for pods still loading their model (no endpoint yet); DCGM
reports a loading pod's GPU at 0 once it exists. A step violates the SLO when the
queueing delay, (L_q + backlog) / capacity, exceeds `queue_wait_slo_s`.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gpuvalues.csvtext import CsvSyntaxError, end_column, split_line
from gpuvalues.errors import CapacityError
from gpuvalues.planners.autoscaling.capacity import erlang_b
from gpuvalues.planners.autoscaling.hpa import (
    DEFAULT_SYNC_PERIOD_S,
    HPA,
    MetricUnavailable,
    combine_proposals,
    plain_metric_replicas,
)

BUILTIN_TRACES = ("diurnal", "spike")
METRIC_KINDS = ("queue", "queue_time", "running", "gpu_util", "gr_engine_active")
_DCGM_KINDS = ("gpu_util", "gr_engine_active")
_SCALE = {"queue": 1000.0, "queue_time": 1000.0, "running": 1000.0, "gpu_util": 100_000.0,
          "gr_engine_active": 1000.0}  # per-pod value -> milli-units (gpu_util in percent)

# Behaviours compared by default. "no-stabilization" is what the seed warned about: every
# sync may scale down at once. "recommended" is `autoscaling.recommended_behavior`.
NO_STABILIZATION: dict[str, Any] = {"scaleUp": {"stabilizationWindowSeconds": 0},
                          "scaleDown": {"stabilizationWindowSeconds": 0}}


@dataclass(frozen=True)
class Trace:
    """A load trace: strictly increasing times (s) and request rates (requests/s)."""

    times_s: tuple[float, ...]
    rps: tuple[float, ...]
    source: str = "<trace>"

    def at(self, t: float) -> float:
        """The load at `t`, linear between points, held flat outside them."""
        i = bisect.bisect_right(self.times_s, t)
        if i == 0:
            return self.rps[0]
        if i == len(self.times_s):
            return self.rps[-1]
        t0, t1 = self.times_s[i - 1], self.times_s[i]
        r0, r1 = self.rps[i - 1], self.rps[i]
        return r0 + (r1 - r0) * (t - t0) / (t1 - t0)


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    """Parse `time_s,requests_per_s` CSV text; errors name source, line:col and field."""
    times: list[float] = []
    rates: list[float] = []
    lines = text.splitlines()

    def fail(msg: str, lineno: int, col: int, field: str) -> CapacityError:
        return CapacityError(msg, source=source, line=lineno, column=col, field=field)

    for lineno, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            row = split_line(line)
        except CsvSyntaxError as exc:
            raise fail(str(exc), lineno, exc.column, "row") from None
        cells = [c.value for c in row]
        if not "".join(cells):        # a row of empty fields, as csv-writing tools leave
            continue
        if not times and cells[0] == "time_s":
            if cells[1:] != ["requests_per_s"]:
                at = row[1].column if len(row) > 1 else end_column(line)
                raise fail("header must be `time_s,requests_per_s`", lineno, at, "header")
            continue
        if len(cells) != 2:
            at, field = (row[2].column, "row") if len(row) > 2 else (end_column(line), "requests_per_s")
            raise fail(f"expected 2 columns (time_s,requests_per_s), found {len(cells)}", lineno, at, field)
        values = []
        for name, cell in zip(("time_s", "requests_per_s"), row):
            try:
                v = float(cell.value)
            except ValueError:
                raise fail(f"{cell.value!r} is not a number", lineno, cell.column, name) from None
            if not math.isfinite(v) or v < 0:
                raise fail(f"must be a finite number >= 0, got {cell.value}", lineno, cell.column, name)
            values.append(v)
        if times and values[0] <= times[-1]:
            raise fail(f"times must increase: {cells[0]} after {times[-1]:g}", lineno, row[0].column, "time_s")
        times.append(values[0])
        rates.append(values[1])
    if len(times) < 2:
        raise fail("a trace needs at least two `time_s,requests_per_s` rows", max(len(lines), 1), 1, "rows")
    return Trace(tuple(times), tuple(rates), source)


@dataclass(frozen=True)
class SimMetric:
    """A metric the simulated HPA scales on: its kind and AverageValue target (milli-units)."""

    kind: str
    target_milli: int

    def __post_init__(self) -> None:
        if self.kind not in METRIC_KINDS:
            raise CapacityError(f"unknown metric {self.kind!r}; use one of {', '.join(METRIC_KINDS)}", field="metrics")
        if self.target_milli <= 0:
            raise CapacityError(f"target for {self.kind} must be > 0", field="metrics")


# The most HPA sync steps one replay runs (a week at the 15 s default is 40,320) and the most
# replicas it models: past them a run takes minutes and gigabytes, so it is refused first.
MAX_STEPS = 200_000
MAX_REPLICAS = 10_000


@dataclass(frozen=True)
class SimConfig:
    """What is simulated: the Deployment, its metrics and the serving model."""

    replica_rps: float
    min_replicas: int
    max_replicas: int
    metrics: tuple[SimMetric, ...]
    gpus_per_replica: float = 1.0
    startup_s: float = 120.0
    metric_lag_s: float = 30.0
    sync_s: float = DEFAULT_SYNC_PERIOD_S
    queue_wait_slo_s: float = 1.0
    request_latency_s: float = 2.0
    tolerance: float = 0.1
    flap_window_s: float = 600.0
    initial_replicas: int | None = None

    def __post_init__(self) -> None:
        if not self.metrics:
            raise CapacityError("at least one metric is needed", field="metrics")
        for name in ("replica_rps", "sync_s", "queue_wait_slo_s", "request_latency_s", "gpus_per_replica"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise CapacityError(f"must be > 0, got {v!r}", field=name)
        for name in ("startup_s", "metric_lag_s", "flap_window_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise CapacityError(f"must be >= 0, got {v!r}", field=name)
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise CapacityError(f"need 1 <= minReplicas ({self.min_replicas}) <= maxReplicas ({self.max_replicas})",
                                field="min_replicas")
        if self.max_replicas > MAX_REPLICAS:
            raise CapacityError(f"maxReplicas {self.max_replicas} is more than the {MAX_REPLICAS:,} "
                                "replicas simulate models; check the load and --replica-rps",
                                field="max_replicas")


@dataclass(frozen=True)
class SimResult:
    """One behaviour's run: series per sync step and the summary (filled in by `simulate`)."""

    name: str
    times_s: list[float] = field(default_factory=list)
    load_rps: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    metric: list[float] = field(default_factory=list)  # first metric, per pod, as the HPA saw it
    violation: list[bool] = field(default_factory=list)
    scale_events: list[tuple[float, int, int]] = field(default_factory=list)  # (t, from, to)
    summary: dict[str, Any] = field(default_factory=dict)


def _erlang_lq(n: int, load: float) -> float:
    """Steady-state mean queue length L_q = C(n, A) A / (n - A) for A < n."""
    if load <= 0.0:
        return 0.0
    b = erlang_b(n, load)          # bounded work for large n (autoscaling.erlang_b)
    c = n * b / (n - load * (1.0 - b))
    return c * load / (n - load)


def count_flaps(events: Sequence[tuple[float, int, int]], window_s: float) -> int:
    """Scale-ups that come within `window_s` after a scale-down: capacity removed and then
    needed again, each time paying the model load."""
    flaps = 0
    last_down: float | None = None
    for t, before, after in events:
        if after < before:
            last_down = t
        elif after > before and last_down is not None and t - last_down <= window_s:
            flaps += 1
            last_down = None
    return flaps


def simulate(trace: Trace, config: SimConfig, behavior: Mapping[str, Any] | None = None,
             name: str = "behavior") -> SimResult:
    """Replay `trace` once with one HPA `behavior` (None: the controller's legacy path)."""
    cfg = config
    hpa = HPA(cfg.min_replicas, cfg.max_replicas, behavior, tolerance=cfg.tolerance)
    tol = hpa.tolerances
    mu, dt, startup = cfg.replica_rps, cfg.sync_s, cfg.startup_s
    # The HPA reads the last completed interval at least metric_lag_s old (>= one step).
    lag_steps = max(1, int(round(cfg.metric_lag_s / dt)))
    kinds = [(METRIC_KINDS.index(m.kind), m.target_milli, _SCALE[m.kind], m.kind in _DCGM_KINDS)
             for m in cfg.metrics]
    first = kinds[0][0]
    first_scale = 100.0 if cfg.metrics[0].kind == "gpu_util" else 1.0

    t0 = trace.times_s[0]
    steps = math.floor((trace.times_s[-1] - t0) / dt) + 1
    if steps > MAX_STEPS:
        raise CapacityError(f"the trace spans {trace.times_s[-1] - t0:g} s: {steps:,} sync steps of "
                            f"{dt:g} s, more than the {MAX_STEPS:,} one run may take; shorten the "
                            "trace or raise --sync-s", source=trace.source, field="sync_s")
    start = cfg.initial_replicas if cfg.initial_replicas is not None else cfg.min_replicas
    created = [t0 - startup] * start  # creation times, oldest first; these start ready
    backlog = 0.0
    history: list[tuple[float, ...] | None] = []  # per step: per-pod values, METRIC_KINDS order
    res = SimResult(name)
    gpu_pod_seconds = 0.0
    violation_s = 0.0
    requests = violated_requests = 0.0
    times, loads = trace.times_s, trace.rps
    ti = 0

    for step in range(steps):
        t = t0 + step * dt
        while ti + 1 < len(times) and times[ti + 1] <= t:  # linear load, moving pointer
            ti += 1
        if ti + 1 < len(times):
            lam = loads[ti] + (loads[ti + 1] - loads[ti]) * (t - times[ti]) / (times[ti + 1] - times[ti])
        else:
            lam = loads[-1]

        # -- the HPA sync, on metrics as they were lag_steps ago
        n = len(created)
        seen = history[step - lag_steps] if step >= lag_steps else None
        t_seen = t - lag_steps * dt  # the start of the interval those values describe
        desired: int | None
        proposals: list[int | None] = []
        if seen is not None:
            ready_then = bisect.bisect_right(created, t_seen - startup)
            exist_then = bisect.bisect_right(created, t_seen)
            for kind, target, scale, dcgm in kinds:
                counted = exist_then if dcgm else ready_then
                value = int(round(seen[kind] * scale))  # kind: an index into METRIC_KINDS
                try:
                    proposals.append(plain_metric_replicas(n, ready_then * value, counted, 0, n - counted,
                                                           target, tol))
                except MetricUnavailable:
                    proposals.append(None)
        try:
            desired = combine_proposals(n, proposals) if proposals else None
        except MetricUnavailable:
            desired = None
        new_n = hpa.reconcile(t, n, desired)
        if new_n != n:
            res.scale_events.append((t, n, new_n))
            if new_n > n:
                created.extend([t] * (new_n - n))
            else:
                del created[new_n:]  # the ReplicaSet removes the youngest (not yet ready) first
        n = new_n

        # -- serving during [t, t + dt)
        ready = bisect.bisect_right(created, t - startup)
        cap = ready * mu
        values: tuple[float, ...] | None = None
        if ready > 0:
            load = lam / mu
            lq = _erlang_lq(ready, load) if lam < cap else 0.0
            backlog = max(0.0, backlog + (lam - cap) * dt)
            waiting = lq + backlog
            busy = 1.0 if (backlog > 0 or lam >= cap) else lam / cap
            served = min(lam + backlog / dt, cap)
            wait_s = waiting / cap
            # METRIC_KINDS order: queue, queue_time, running, gpu_util, gr_engine_active
            values = (waiting / ready, wait_s * 1e6, served * cfg.request_latency_s / ready, busy, busy)
        else:
            backlog += lam * dt
            wait_s = math.inf if backlog > 0 else 0.0
        history.append(values)
        bad = wait_s > cfg.queue_wait_slo_s
        gpu_pod_seconds += n * dt
        requests += lam * dt
        if bad:
            violation_s += dt
            violated_requests += lam * dt

        res.times_s.append(t)
        res.load_rps.append(lam)
        res.replicas.append(n)
        res.ready.append(ready)
        res.metric.append(seen[first] * first_scale if seen else math.nan)
        res.violation.append(bad)

    ups = sum(1 for _, a, b in res.scale_events if b > a)
    res.summary.update({
        "behavior": name,
        "gpu_hours": round(gpu_pod_seconds * cfg.gpus_per_replica / 3600.0, 3),
        "slo_violation_minutes": round(violation_s / 60.0, 2),
        "slo_violation_request_pct": round(100.0 * violated_requests / requests, 3) if requests else 0.0,
        "scale_ups": ups,
        "scale_downs": len(res.scale_events) - ups,
        "flaps": count_flaps(res.scale_events, cfg.flap_window_s),
        "max_replicas": max(res.replicas),
        "mean_replicas": round(sum(res.replicas) / len(res.replicas), 2),
    })
    return res


def compare(trace: Trace, config: SimConfig, behaviors: Mapping[str, Mapping[str, Any] | None]) -> list[SimResult]:
    """Replay the same trace with each named behaviour (side by side)."""
    if not behaviors:
        raise CapacityError("give at least one behavior to simulate", field="behaviors")
    return [simulate(trace, config, b, name) for name, b in behaviors.items()]


# --------------------------------------------------------------------------- planning + replay

_KIND_OF_METRIC = {"vllm:num_requests_waiting": "queue", "vllm:num_requests_running": "running",
                   "nv_inference_queue_duration_us": "queue_time", "DCGM_FI_DEV_GPU_UTIL": "gpu_util",
                   "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active"}


def builtin_behaviors(startup_s: float) -> dict[str, Mapping[str, Any] | None]:
    """The behaviours compared by default: every sync may scale down (the flapping the
    seed warned about), the controller's legacy path (no `behavior`: 5-minute
    stabilization) and `autoscaling.recommended_behavior`."""
    from gpuvalues.planners.autoscaling.capacity import recommended_behavior

    return {"no-stabilization": NO_STABILIZATION, "legacy": None,
            "recommended": recommended_behavior(startup_s)}


def parse_metrics(text: str) -> tuple[SimMetric, ...]:
    """`queue=5,running=14,gpu_util=70`: metric kinds and per-pod targets (Quantities)."""
    from gpuvalues.planners.autoscaling.hpa import milli_value

    metrics = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        kind, sep, target = item.partition("=")
        if not sep:
            raise CapacityError(f"{item!r}: write KIND=TARGET, e.g. queue=5 or gpu_util=70", field="metrics")
        metrics.append(SimMetric(kind.strip(), milli_value(target.strip(), field="metrics")))
    if not metrics:
        raise CapacityError("no metrics given; e.g. queue=5,running=14", field="metrics")
    return tuple(metrics)


@dataclass(frozen=True)
class SimReport:
    """A capacity plan for the trace and the replay of each behaviour."""

    trace: Trace
    plan: Any
    config: SimConfig
    results: list[SimResult]

    def as_dict(self, series: bool = False) -> dict[str, Any]:
        """Plain data for `--output yaml|json`; per-step series only with `series`."""
        data: dict[str, Any] = {
            "trace": {"source": self.trace.source, "points": len(self.trace.times_s),
                      "duration_s": self.trace.times_s[-1] - self.trace.times_s[0],
                      "base_rps": min(self.trace.rps), "peak_rps": max(self.trace.rps)},
            "plan": self.plan.as_dict(),
            "simulation": {"min_replicas": self.config.min_replicas, "max_replicas": self.config.max_replicas,
                           "metrics": [{"kind": m.kind, "target_milli": m.target_milli} for m in self.config.metrics],
                           "sync_s": self.config.sync_s, "metric_lag_s": self.config.metric_lag_s,
                           "startup_s": self.config.startup_s, "queue_wait_slo_s": self.config.queue_wait_slo_s},
            "behaviors": [r.summary for r in self.results],
        }
        if series:
            data["series"] = {r.name: {"time_s": r.times_s, "load_rps": [round(x, 3) for x in r.load_rps],
                                       "replicas": r.replicas, "ready": r.ready} for r in self.results}
        return data


def plan_and_simulate(trace: Trace, *, replica_rps: float, gpus_per_replica: float = 1,
                      gpu_mode: str = "whole", server_type: str = "vllm",
                      min_replicas: int | None = None, max_replicas: int | None = None,
                      metrics: str | Sequence[SimMetric] | None = None,
                      behaviors: Mapping[str, Mapping[str, Any] | None] | None = None,
                      startup_s: float = 120.0, metric_lag_s: float = 30.0, sync_s: float = DEFAULT_SYNC_PERIOD_S,
                      queue_wait_slo_s: float = 1.0, request_latency_s: float = 2.0,
                      inventory_gpus: float | None = None) -> SimReport:
    """Size the Deployment for the trace (base = its lowest load, peak = its highest) with
    `autoscaling.plan_capacity`, then replay the trace with each behaviour. Explicit
    `min_replicas`, `max_replicas` and `metrics` override the plan."""
    from gpuvalues.planners.autoscaling.capacity import plan_capacity, replicas_for_load

    plan = plan_capacity(min(trace.rps), max(trace.rps), replica_rps, gpus_per_replica=gpus_per_replica,
                         gpu_mode=gpu_mode, server_type=server_type, max_queue_wait_s=queue_wait_slo_s,
                         inventory_gpus=inventory_gpus, request_latency_s=request_latency_s)
    if metrics is None:
        chosen = [plan.metric] + ([plan.companion] if plan.companion else [])
        sim_metrics = tuple(SimMetric(_KIND_OF_METRIC[m.name], m.target_milli) for m in chosen
                            if m.name in _KIND_OF_METRIC)
        if not sim_metrics:
            raise CapacityError(f"cannot simulate {plan.metric.name}; give --metrics", field="metrics")
    elif isinstance(metrics, str):
        sim_metrics = parse_metrics(metrics)
    else:
        sim_metrics = tuple(metrics)
    lo = plan.min_replicas if min_replicas is None else min_replicas
    hi = plan.max_replicas if max_replicas is None else max_replicas
    initial = min(hi, max(lo, replicas_for_load(trace.rps[0], replica_rps, max_queue_wait_s=queue_wait_slo_s)))
    config = SimConfig(replica_rps=replica_rps, min_replicas=lo, max_replicas=hi, metrics=sim_metrics,
                       gpus_per_replica=gpus_per_replica, startup_s=startup_s, metric_lag_s=metric_lag_s,
                       sync_s=sync_s, queue_wait_slo_s=queue_wait_slo_s, request_latency_s=request_latency_s,
                       initial_replicas=initial)
    results = compare(trace, config, behaviors if behaviors is not None else builtin_behaviors(startup_s))
    return SimReport(trace, plan, config, results)


# --- scale to zero: GPU-hours saved vs requests that waited for a cold start -----------------

@dataclass(frozen=True)
class ScaleToZeroResult:
    """One replay of a trace with KEDA-style scale to zero, against the same fleet kept at
    one replica minimum. GPU-hours count a replica from its creation (a loading replica holds
    its GPUs); requests that arrive while no replica is ready wait for the cold start."""

    cooldown_s: float
    cold_start_s: float
    polling_s: float
    gpu_hours_min1: float
    gpu_hours_zero: float
    cold_starts: int
    requests: float
    requests_waited: float
    mean_wait_s: float
    max_wait_s: float
    time_at_zero_pct: float

    def as_dict(self) -> dict[str, Any]:
        saved = self.gpu_hours_min1 - self.gpu_hours_zero
        return {"cooldown_s": self.cooldown_s, "cold_start_s": self.cold_start_s, "polling_s": self.polling_s,
                "gpu_hours_min1": round(self.gpu_hours_min1, 3), "gpu_hours_zero": round(self.gpu_hours_zero, 3),
                "gpu_hours_saved": round(saved, 3),
                "saved_pct": round(100 * saved / self.gpu_hours_min1, 1) if self.gpu_hours_min1 else 0.0,
                "cold_starts": self.cold_starts, "requests": round(self.requests, 1),
                "requests_waited": round(self.requests_waited, 1),
                "waited_pct": round(100 * self.requests_waited / self.requests, 2) if self.requests else 0.0,
                "mean_wait_s": round(self.mean_wait_s, 1), "max_wait_s": round(self.max_wait_s, 1),
                "time_at_zero_pct": round(self.time_at_zero_pct, 1)}


def scale_to_zero(trace: Trace, *, replica_rps: float, cooldown_s: float, cold_start_s: float,
                  gpus_per_replica: float = 1.0, polling_s: float = 15.0, activation_rps: float = 0.0,
                  step_s: float = 1.0, max_replicas: int | None = None) -> ScaleToZeroResult:
    """Replay `trace` with scale to zero as KEDA does it (keda pkg/scaling/executor/
    scale_scaledobjects.go): every `polling_s` the activation trigger is read; above
    `activation_rps` a workload at zero goes to one replica, which serves after
    `cold_start_s`; it returns to zero once the load stayed at or below `activation_rps` for
    `cooldown_s` (cooldownPeriod). Above one replica both runs follow the load alike (fluid:
    ceil(load / replica_rps) replicas), so the difference is the 0 <-> 1 phase only. The
    workload starts at zero. The baseline keeps at least one replica the whole time."""
    for name, v in (("replica_rps", replica_rps), ("step_s", step_s), ("polling_s", polling_s)):
        if not v > 0:
            raise CapacityError(f"must be > 0, got {v!r}", field=name)
    for name, v in (("cooldown_s", cooldown_s), ("cold_start_s", cold_start_s), ("activation_rps", activation_rps)):
        if v < 0:
            raise CapacityError(f"must be >= 0, got {v!r}", field=name)
    t0, t_end = trace.times_s[0], trace.times_s[-1]
    steps = int(round((t_end - t0) / step_s))
    per_poll = max(1, int(round(polling_s / step_s)))
    gpu_s_min1 = gpu_s_zero = 0.0
    requests = waited = wait_sum = max_wait = 0.0
    zero_s = 0.0
    cold_starts = 0
    state, ready_at, last_busy = "zero", 0.0, t0
    held: list[tuple[float, float]] = []  # (arrival, requests) while at zero, waiting for activation
    for i in range(steps):
        t = t0 + i * step_s
        load = trace.at(t)
        n = max(1, math.ceil(load / replica_rps - 1e-9))
        if max_replicas is not None:
            n = min(n, max_replicas)
        busy = load > activation_rps
        arrived = load * step_s
        requests += arrived
        gpu_s_min1 += n * gpus_per_replica * step_s
        if state == "zero" and busy and i % per_poll == 0:
            state, ready_at, last_busy = "starting", t + cold_start_s, t
            cold_starts += 1
            for at, r in held:
                waited += r
                wait_sum += r * (ready_at - at)
                max_wait = max(max_wait, ready_at - at)
            held = []
        if state == "starting" and t >= ready_at:
            state = "on"
        if state == "zero":
            zero_s += step_s
            if arrived:
                held.append((t, arrived))
            continue
        if busy:
            last_busy = t
        if state == "starting":
            gpu_s_zero += gpus_per_replica * step_s
            if arrived:
                waited += arrived
                wait_sum += arrived * (ready_at - t)
                max_wait = max(max_wait, ready_at - t)
            continue
        gpu_s_zero += n * gpus_per_replica * step_s
        if t - last_busy >= cooldown_s and not busy:
            state = "zero"
    for at, r in held:  # still waiting when the trace ends: counted, with the wait so far
        waited += r
        wait_sum += r * (t_end - at)
        max_wait = max(max_wait, t_end - at)
    return ScaleToZeroResult(cooldown_s=cooldown_s, cold_start_s=cold_start_s, polling_s=polling_s,
                             gpu_hours_min1=gpu_s_min1 / 3600, gpu_hours_zero=gpu_s_zero / 3600,
                             cold_starts=cold_starts, requests=requests, requests_waited=waited,
                             mean_wait_s=wait_sum / waited if waited else 0.0, max_wait_s=max_wait,
                             time_at_zero_pct=100 * zero_s / (steps * step_s) if steps else 0.0)


def scale_to_zero_sweep(trace: Trace, cooldowns_s: Sequence[float], **kw: Any) -> list[ScaleToZeroResult]:
    """`scale_to_zero` for each cooldown: the cost/latency trade, one row per cooldown."""
    return [scale_to_zero(trace, cooldown_s=c, **kw) for c in cooldowns_s]


