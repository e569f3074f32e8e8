"""Sizing: how many replicas each workload needs and what it scales on.

The capacity model (M/M/c with the SLO as the queueing budget, `planners.autoscaling`)
gives a workload's replicas at base and at peak; `peak_replicas` is what the fleet
lays out GPUs for, `autoscaling_values` the chart's autoscaling block once the layout
says how many replicas the GPUs hold.
"""
from __future__ import annotations

import math
from typing import Any

from gpuvalues.errors import CapacityError, GpuValuesError
from gpuvalues.fleet.placement import Placement, spec_error
from gpuvalues.fleet.spec import Spec, Workload
from gpuvalues.planners.autoscaling import capacity as autoscaling

__all__ = ["DEFAULT_MIN_REPLICAS", "DEFAULT_MAX_REPLICAS", "peak_replicas", "queue_budget",
           "autoscaling_values"]

# Default replicas when the spec gives no load model (chart defaults: 2..10).
DEFAULT_MIN_REPLICAS = 2
DEFAULT_MAX_REPLICAS = 10


def peak_replicas(spec: Spec, w: Workload, gpu_mode: str) -> int:
    """Replicas at peak: autoscaling.maxReplicas, else the capacity model's max replicas
    (M/M/c with headroom), else the default: what the fleet lays out GPUs for."""
    a = spec.autoscaling
    if a.max_replicas is not None:
        return a.max_replicas
    if a.engine != "none" and w.load and w.throughput_per_replica:
        base = w.load.base if w.load.base is not None else w.load.peak / 4
        try:
            return autoscaling.plan_capacity(base, w.load.peak, w.throughput_per_replica,
                                             gpu_mode=gpu_mode, server_type=w.server,
                                             max_queue_wait_s=queue_budget(w)).max_replicas
        except GpuValuesError:
            return DEFAULT_MAX_REPLICAS     # the per-workload build reports it, placed
    return DEFAULT_MAX_REPLICAS


def queue_budget(w: Workload) -> float:
    """Mean queueing delay the replica count must keep: the latency SLO when the spec
    gives one (throughputPerReplica is already measured within it, so waiting in the
    queue must not by itself use up the SLO), else the capacity model's 1 s default."""
    return w.slo.latency_ms / 1000 if w.slo.latency_ms else 1.0


def autoscaling_values(spec: Spec, wi: int, placement: Placement,
                       inventory_units: float) -> tuple[dict[str, Any], list[str], list[str]]:
    """The chart's autoscaling values for workload `wi`, its decisions and warnings
    (capacity model + metric choice); maxReplicas is capped by `inventory_units` (the
    resource units the fleet's layout gives it) unless the spec sets it."""
    w = spec.workloads[wi]

    a = spec.autoscaling
    out: dict[str, Any] = {"engine": a.engine}
    decisions: list[str] = []
    warnings: list[str] = []
    if a.engine == "none":
        return out, decisions, warnings
    server_metric = None if a.metric == "choose" or a.metric.startswith("DCGM_") else a.metric
    prefer = "auto"
    if a.metric != "choose":
        prefer = "gpu" if a.metric.startswith("DCGM_") else "server"
    units_per_replica = placement.gpus_per_replica / placement.units_per_gpu
    try:
        if w.load and w.throughput_per_replica:
            plan = autoscaling.plan_capacity(
                w.load.base if w.load.base is not None else w.load.peak / 4, w.load.peak,
                w.throughput_per_replica, gpus_per_replica=units_per_replica,
                gpu_mode=placement.mode, server_type=w.server, prefer=prefer,
                server_metric=server_metric, max_queue_wait_s=queue_budget(w),
                request_latency_s=w.slo.latency_ms / 1000 if w.slo.latency_ms else None)
            metric = plan.metric
            companion = plan.companion if a.metric == "choose" else None
            lo, hi = plan.min_replicas, plan.max_replicas
            if a.min_replicas is None or a.max_replicas is None:
                decisions.append(f"replicas {lo}..{hi} from the M/M/c model (peak "
                                 f"{w.load.peak:g} req/s, {w.throughput_per_replica:g} req/s "
                                 f"per replica, mean queue wait <= {queue_budget(w):g} s)")
            warnings.extend(plan.warnings)
        else:
            metric = autoscaling.choose_metric(placement.mode, w.server, prefer=prefer,
                                               server_metric=server_metric)
            companion = None
            lo, hi = DEFAULT_MIN_REPLICAS, DEFAULT_MAX_REPLICAS
            if a.min_replicas is None or a.max_replicas is None:
                decisions.append(f"replicas {lo}..{hi}: defaults (give load and "
                                 "throughputPerReplica to size them)")
    except CapacityError as exc:
        at = ("autoscaling", "metric") if a.metric != "choose" else ("workloads", wi)
        raise spec_error(CapacityError, exc.message, spec, *at,
                         code="GV003" if exc.field == "prefer" else None) from None
    if a.metric != "choose" and metric.name != a.metric:
        raise spec_error(CapacityError, f"{a.metric} cannot scale gpu.mode {placement.mode}: "
                         f"{metric.reason}", spec, "autoscaling", "metric", code="GV003")
    # inventory_units and placement.count are both in pods' units (GPUs, MIG instances,
    # shared replicas)
    fit = math.floor(inventory_units / placement.gpus_per_replica + 1e-9) if inventory_units else None
    if a.max_replicas is None and fit is not None and hi > fit:
        hi = max(fit, 1)
        decisions.append(f"maxReplicas capped at {hi}: what the {placement.pool.name} "
                         "inventory holds")
    if a.max_replicas is not None:
        hi = a.max_replicas
    lo = a.min_replicas if a.min_replicas is not None else min(lo, hi)
    if a.max_replicas is None:
        hi = max(hi, lo)
    if a.min_replicas is not None or a.max_replicas is not None:
        decisions.append(f"replicas {lo}..{hi}" + (" as the spec sets" if a.min_replicas
                         is not None and a.max_replicas is not None else " (spec and model)"))
    metrics = [{"name": metric.name, "target": a.target or metric.target}]
    decisions.append(f"scale on {metric.name} (target {a.target or metric.target}): "
                     f"{metric.reason}")
    if companion is not None:
        # The waiting queue is 0 while capacity suffices; without the running count the
        # HPA drifts to minReplicas under steady load and saws (see `gpuvalues simulate`).
        metrics.append({"name": companion.name, "target": companion.target})
        decisions.append(f"and on {companion.name} (target {companion.target}): {companion.reason}")
    out.update({"minReplicas": lo, "maxReplicas": hi, "metrics": metrics})
    if a.engine == "keda":
        # KEDA's fallback (replicas while Prometheus is unreachable) must lie within
        # min..max; the chart's default is 2.
        out["keda"] = {"fallback": {"replicas": min(hi, max(lo, 2))}}
        if a.prometheus_address:
            out["keda"]["serverAddress"] = a.prometheus_address
    return out, decisions, warnings
