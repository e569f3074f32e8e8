"""Autoscaling planner: which metric to scale on, and how many replicas a load needs.

- `choose_metric(gpu_mode, server_type)`: the one place the metric rules live (used by the
  values builder and the chart defaults); every answer carries its reason in words.
- `erlang_c(servers, offered_load)`: probability of waiting in M/M/c, stable for any size.
- `plan_capacity(...)`: min/max replicas, the HPA target for the chosen metric and the GPUs
  needed, from base and peak request rates and the per-replica throughput at the SLO.

The HPA controller's own arithmetic lives in `gpuvalues.planners.autoscaling.hpa`; its public names
(`PodSample`, `pods_metric_replicas`, `HPA`) are re-exported here.

Sources for the metric rules (see /work/shared/reference/metrics-autoscaling.md):
NVIDIA/DCGM#80 and NVIDIA/dcgm-exporter#216, #430 (GPU_UTIL is not reported per MIG
instance; use DCGM_FI_PROF_GR_ENGINE_ACTIVE, a 0-1 ratio); dcgm-exporter
internal/pkg/transformation/kubernetes.go and #151, #582 (time-sliced pods share one
device-level value or lose their labels); llm-d "Workload Autoscaling" and GKE's
inference autoscaling best practices (GPU utilisation sits near 100% under continuous
batching; scale LLM servers on queue size).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuvalues.errors import CapacityError
from gpuvalues.planners.autoscaling.hpa import HPA, PodSample, format_milli, pods_metric_replicas

__all__ = [
    "GPU_MODES", "SERVER_TYPES", "MetricChoice", "choose_metric", "erlang_b", "erlang_c",
    "mmc_mean_wait", "replicas_for_load", "CapacityPlan", "plan_capacity",
    "recommended_behavior", "PodSample", "pods_metric_replicas", "HPA",
]

GPU_MODES = ("whole", "mig", "shared", "dra")
SERVER_TYPES = ("vllm", "triton", "custom")

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_RUNNING = "vllm:num_requests_running"
TRITON_QUEUE = "nv_inference_queue_duration_us"


@dataclass(frozen=True)
class MetricChoice:
    """The metric an HPA (or KEDA trigger) should scale on, with its target and why.

    `name` is the Prometheus series; `adapter_name` the name the custom-metrics API serves
    it under: the series with ':' -> '_', as the chart's HPA and adapter rules name it; `kind` the HPA metric source type; `target` the AverageValue
    Quantity per pod (`target_milli` the same in milli-units); `unit` what the value means.
    """

    name: str
    target: str
    kind: str
    reason: str
    target_milli: int = 0
    unit: str = ""
    source: str = ""  # "dcgm" (GPU metric) or "server" (the model server's own metric)

    @property
    def adapter_name(self) -> str:
        """The custom-metrics API name: the series with ':' -> '_' (`vllm_num_requests_waiting`)."""
        return self.name.replace(":", "_")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise CapacityError(f"{value!r} is not one of {', '.join(allowed)}", field=name)


def _gpu_metric(gpu_mode: str, utilization: float) -> MetricChoice:
    if gpu_mode == "mig":
        milli = int(round(utilization * 1000))
        return MetricChoice(
            GR_ENGINE_ACTIVE, format_milli(milli), "Pods",
            "MIG: DCGM_FI_DEV_GPU_UTIL is not reported per MIG instance (NVIDIA/DCGM#80, "
            "dcgm-exporter#216, #430); DCGM_FI_PROF_GR_ENGINE_ACTIVE is, as a 0-1 ratio of "
            f"the instance's graphics engine, so the target is {format_milli(milli)} "
            "(needs Volta or newer and SYS_ADMIN for the exporter).",
            milli, "ratio 0-1", "dcgm")
    percent = int(round(utilization * 100))
    why = ("whole GPU: DCGM_FI_DEV_GPU_UTIL (0-100, the GPU's busy duty cycle) is reported "
           f"per GPU and attributed to the pod that holds it, so a target of {percent} works")
    if gpu_mode == "dra":
        why += (" once dcgm-exporter maps DRA claims to pods (kubernetesDRA.enabled); if the "
                "claim selects a MIG device, choose gpu_mode=mig instead")
    return MetricChoice(GPU_UTIL, str(percent), "Pods", why + ".",
                        percent * 1000, "percent 0-100", "dcgm")


# server type -> (its load metric, default target per pod, why it scales, the target's unit)
_SERVER_METRICS = {
    "vllm": (VLLM_WAITING, 5.0,
             "vLLM: requests waiting for a batch slot rise as soon as a replica is saturated, "
             "while GPU utilisation sits near 100% under continuous batching at any load "
             "(llm-d autoscaling docs, GKE inference best practices). Pair it with "
             "vllm:num_requests_running (plan_capacity's companion metric): the waiting queue is "
             "0 whenever capacity suffices, so on its own it saws between minReplicas and overload.",
             "requests waiting per pod"),
    "triton": (TRITON_QUEUE, 50_000.0,
               "Triton: the average time a request waits in the queue (the rate of "
               "nv_inference_queue_duration_us over the rate of nv_inference_request_success, "
               "in microseconds) grows as soon as the model instances are saturated, unlike GPU "
               "utilisation under dynamic batching.",
               "microseconds queued per request"),
}


def _server_metric(server_type: str, queue_target: float | None, server_metric: str | None) -> MetricChoice:
    if server_type in _SERVER_METRICS:
        metric, default, why, unit = _SERVER_METRICS[server_type]
    elif server_metric:
        metric, default, why, unit = (server_metric, 1.0, f"custom server: scaling on its own load metric "
                                      f"{server_metric}.", "server metric per pod")
    else:
        raise CapacityError("a custom server has no known load metric: set server_metric (the "
                            "Prometheus series of its queue depth or in-flight requests)",
                            field="server_metric")
    milli = int(round((queue_target if queue_target is not None else default) * 1000))
    return MetricChoice(metric, format_milli(milli), "Pods", why, milli, unit, "server")


def choose_metric(gpu_mode: str, server_type: str, *, prefer: str = "auto",
                  server_metric: str | None = None, target_utilization: float = 0.7,
                  queue_target: float | None = None) -> MetricChoice:
    """Pick the HPA metric for a GPU mode and server type, with the reason in words.

    Rules:
    - `mig`: DCGM_FI_PROF_GR_ENGINE_ACTIVE (0-1 ratio, target like 700m); GPU_UTIL is not
      reported per MIG instance. This holds for every server type; `prefer="server"`
      picks the server's queue metric instead (better for LLM servers, as on whole GPUs).
    - `whole` (and `dra`): DCGM_FI_DEV_GPU_UTIL (0-100, target like 70) is allowed; for
      vLLM the queue depth `vllm:num_requests_waiting` is recommended and chosen by default.
    - `shared` (time-slicing, MPS): GPU metrics are not attributable per pod, so only the
      server's own metric; asking for a GPU metric is an error.

    `prefer`: "auto" (the rules above), "gpu" or "server". `target_utilization` (0-1) sets
    the GPU target; `queue_target` the server target (waiting requests per pod for vLLM,
    microseconds for Triton; defaults 5 and 50000).
    """
    _check_choice("gpu_mode", gpu_mode, GPU_MODES)
    _check_choice("server_type", server_type, SERVER_TYPES)
    _check_choice("prefer", prefer, ("auto", "gpu", "server"))
    if not 0 < target_utilization <= 1:
        raise CapacityError(f"must be in (0, 1], got {target_utilization}", field="target_utilization")
    if queue_target is not None and not queue_target > 0:
        raise CapacityError(f"must be > 0, got {queue_target}", field="queue_target")

    if gpu_mode == "shared":
        if prefer == "gpu":
            raise CapacityError(
                "GPU metrics cannot drive an HPA under time-slicing or MPS: dcgm-exporter "
                "reports one device-level value for all pods sharing a GPU (or labels it with "
                "one of them), so no per-pod value exists; scale on the server's metric",
                field="prefer")
        choice = _server_metric(server_type, queue_target, server_metric)
        return _with_reason(choice, "shared GPU (time-slicing/MPS): GPU metrics are not "
                                    "attributable per pod (dcgm-exporter reports the whole "
                                    "device's value for every sharing pod), so only server "
                                    "metrics can scale it. ")
    if prefer == "server" or (prefer == "auto" and gpu_mode != "mig" and server_type == "vllm"):
        choice = _server_metric(server_type, queue_target, server_metric)
        if gpu_mode != "mig" and server_type == "vllm" and prefer == "auto":
            return _with_reason(choice, "whole GPU with an LLM server: DCGM_FI_DEV_GPU_UTIL is "
                                        "allowed but queue depth is recommended. ")
        return choice
    return _gpu_metric(gpu_mode, target_utilization)


def _with_reason(choice: MetricChoice, prefix: str) -> MetricChoice:
    return MetricChoice(choice.name, choice.target, choice.kind, prefix + choice.reason,
                        choice.target_milli, choice.unit, choice.source)


def recommended_behavior(startup_s: float = 120.0) -> dict[str, Any]:
    """The autoscaling/v2 `behavior` we recommend for GPU inference (the seed's cool-down,
    made concrete; `gpuvalues simulate` measures it against the alternatives).

    - scale up at once (window 0, the API defaults: +4 pods or +100% per 15 s): new
      replicas need `startup_s` to load the model, so any delay adds to it;
    - scale down only after the highest recommendation of the last
      max(300 s, 3 x startup) (rounded up to a minute, at most 3600 s) allows it, and then
      by at most one pod or 10% a minute: a replica removed too early costs a model load
      to bring back, and bursty load would otherwise flap.
    """
    if not (math.isfinite(startup_s) and startup_s >= 0):
        raise CapacityError(f"must be >= 0 seconds, got {startup_s!r}", field="startup_s")
    window = min(3600, max(300, 60 * math.ceil(3 * startup_s / 60)))
    return {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                 {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": window, "selectPolicy": "Max",
                      "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60},
                                   {"type": "Percent", "value": 10, "periodSeconds": 60}]},
    }


# --------------------------------------------------------------------------- queueing

def _check_load(servers: int, offered_load: float) -> None:
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise CapacityError(f"servers must be an integer >= 1, got {servers!r}")
    if not (isinstance(offered_load, (int, float)) and math.isfinite(offered_load) and offered_load >= 0):
        raise CapacityError(f"offered load must be a finite number >= 0, got {offered_load!r}")


# The most load (in Erlangs: requests/s over one replica's requests/s) sized: a million
# replicas' worth is far past any cluster, and past it a typo such as
# `throughputPerReplica: 1e-6` is far likelier than real demand.
MAX_LOAD_ERLANGS = 1_000_000.0
# Below this many servers the exact recursion is cheap; above it, _erlang_b_direct.
_RECURSION_SERVERS = 2000


def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang B blocking probability B(c, A).

    Small c: the recursion B(k) = A B(k-1) / (k + A B(k-1)), which stays within [0, 1]
    at every step (no factorials, no overflow). Large c: `_erlang_b_direct`, the same
    number in O(sqrt(A) + |c - A|) steps instead of O(c).
    """
    _check_load(servers, offered_load)
    a = float(offered_load)
    if servers <= _RECURSION_SERVERS or a == 0:
        b = 1.0
        for k in range(1, servers + 1):
            b = a * b / (k + a * b)
        return b
    return _erlang_b_direct(servers, a)


def _erlang_b_direct(c: int, a: float) -> float:
    """B(c, A) = 1 / sum_{j=0..c} prod_{i<j} (c - i) / A: the Poisson(A) probability of c
    over that of at most c, summed in log space from j = 0 (the k = c term) downwards and
    stopped once the terms fall 40 e-folds below the largest (they shrink faster than
    geometrically past the mode, so the rest is < 1e-17 of the sum)."""
    log_t = 0.0
    peak = 0.0
    total = 1.0                    # sum of exp(log_t - peak)
    log_a = math.log(a)
    for j in range(c):
        log_t += math.log(c - j) - log_a
        if log_t > peak:
            total = total * math.exp(peak - log_t) + 1.0
            peak = log_t
        else:
            total += math.exp(log_t - peak)
            if log_t < peak - 40.0 and c - j - 1 < a:
                break
    return math.exp(-peak) / total


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang C), with c = `servers`
    and A = `offered_load` = lambda / mu in Erlangs.

    Computed from Erlang B as C = c B / (c - A (1 - B)), numerically stable for thousands
    of servers. Returns 1.0 when A >= c (the queue grows without bound).
    """
    _check_load(servers, offered_load)
    if offered_load == 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    b = erlang_b(servers, offered_load)
    return servers * b / (servers - offered_load * (1.0 - b))


def mmc_mean_wait(servers: int, arrival_rate: float, service_rate: float) -> float:
    """Mean time in queue W_q = C(c, A) / (c mu - lambda) for M/M/c (inf when unstable)."""
    if not service_rate > 0:
        raise CapacityError(f"service rate must be > 0, got {service_rate!r}")
    load = arrival_rate / service_rate
    if load >= servers:
        return math.inf
    return erlang_c(servers, load) / (servers * service_rate - arrival_rate)


def _halfin_whitt_start(load: float, max_wait_probability: float) -> int:
    """A replica count close to the smallest with P(wait) <= target: the Halfin-Whitt
    square-root staffing c = A + beta sqrt(A), beta solving
    alpha = 1 / (1 + beta Phi(beta) / phi(beta)) (Halfin & Whitt 1981), by bisection."""
    def p_wait(beta: float) -> float:
        phi = math.exp(-beta * beta / 2) / math.sqrt(2 * math.pi)
        big_phi = 0.5 * (1 + math.erf(beta / math.sqrt(2)))
        return 1.0 / (1.0 + beta * big_phi / phi)
    lo, hi = 0.0, 40.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if p_wait(mid) > max_wait_probability:
            lo = mid
        else:
            hi = mid
    return max(1, math.floor(load + hi * math.sqrt(load)))


def replicas_for_load(rate_rps: float, replica_rps: float, *, max_wait_probability: float = 0.2,
                      max_queue_wait_s: float | None = None) -> int:
    """The smallest replica count c with P(wait) <= `max_wait_probability` and, if given,
    mean queue wait <= `max_queue_wait_s`, treating each replica as one M/M/c server.

    Exact (Erlang C from Erlang B) and bounded: the search starts at the Halfin-Whitt
    square-root staffing estimate, computes B there directly (O(sqrt(A)) steps) and walks
    with the O(1) recursion B(k+1) = A B(k) / (k + 1 + A B(k)) (and its inverse down) to
    the exact answer, a few steps away. Loads above MAX_LOAD_ERLANGS are refused with a
    CapacityError (they come from a mistyped throughput, and would size millions of pods).
    """
    if not (math.isfinite(rate_rps) and rate_rps >= 0):
        raise CapacityError(f"request rate must be a finite number >= 0, got {rate_rps!r}")
    if not (math.isfinite(replica_rps) and replica_rps > 0):
        raise CapacityError(f"per-replica throughput must be > 0, got {replica_rps!r}", field="replica_rps")
    if not 0 < max_wait_probability <= 1:
        raise CapacityError(f"must be in (0, 1], got {max_wait_probability}", field="max_wait_probability")
    if max_queue_wait_s is not None and not (math.isfinite(max_queue_wait_s) and max_queue_wait_s > 0):
        raise CapacityError(f"must be a finite number > 0, got {max_queue_wait_s!r}",
                            field="max_queue_wait_s")
    if rate_rps == 0:
        return 1
    load = rate_rps / replica_rps
    if not load <= MAX_LOAD_ERLANGS:
        raise CapacityError(
            f"load {rate_rps:g} req/s over {replica_rps:g} req/s per replica needs more than "
            f"{MAX_LOAD_ERLANGS:,.0f} replicas; check throughputPerReplica (requests/s ONE "
            "replica serves within the SLO) and the load", field="throughputPerReplica")

    def ok(c: int, b: float) -> bool:
        p_wait = c * b / (c - load * (1.0 - b))
        if p_wait > max_wait_probability:
            return False
        return max_queue_wait_s is None or p_wait / (c * replica_rps - rate_rps) <= max_queue_wait_s

    floor_c = math.floor(load) + 1                   # the smallest stable count
    c = max(floor_c, _halfin_whitt_start(load, max_wait_probability))
    b = erlang_b(c, load)
    # Down while the count below still qualifies (the estimate was high) ...
    while c > floor_c:
        below = c * b / (load * (1.0 - b))           # B(c-1) from B(c)
        if not ok(c - 1, below):
            break
        c, b = c - 1, below
    if ok(c, b):
        return c
    # ... else up until it does (bounded: P(wait) falls like exp(-beta^2 / 2)).
    for _ in range(int(20 * math.sqrt(load)) + 1000):
        c += 1
        b = load * b / (c + load * b)
        if ok(c, b):
            return c
    raise CapacityError(f"no replica count up to {c} meets a queue wait of {max_queue_wait_s} s "
                        f"at {rate_rps:g} req/s; raise the wait SLO", field="max_queue_wait_s")


# --------------------------------------------------------------------------- capacity

@dataclass(frozen=True)
class CapacityPlan:
    """Replica bounds, the HPA target and the GPUs a workload needs.

    `design_utilization` is the per-replica load (lambda / (c mu)) at peak with the
    Erlang-C-sized replica count: the utilisation the HPA should hold.
    """

    min_replicas: int
    max_replicas: int
    metric: MetricChoice
    gpus_per_replica: float
    gpus_at_min: float
    gpus_at_max: float
    design_utilization: float
    wait_probability_at_peak: float
    mean_queue_wait_s_at_peak: float
    warnings: tuple[str, ...] = field(default_factory=tuple)
    companion: MetricChoice | None = None  # a second metric the HPA should also scale on

    def as_dict(self) -> dict[str, Any]:
        """Plain data (camelCase keys) for `--output yaml|json` and the simulate report."""
        return {
            "minReplicas": self.min_replicas, "maxReplicas": self.max_replicas,
            "metric": {"name": self.metric.name, "adapterName": self.metric.adapter_name,
                       "type": self.metric.kind, "target": self.metric.target,
                       "unit": self.metric.unit, "reason": self.metric.reason},
            "gpusPerReplica": self.gpus_per_replica, "gpusAtMin": self.gpus_at_min,
            "gpusAtMax": self.gpus_at_max, "designUtilization": round(self.design_utilization, 4),
            "waitProbabilityAtPeak": round(self.wait_probability_at_peak, 4),
            "meanQueueWaitSecondsAtPeak": round(self.mean_queue_wait_s_at_peak, 4),
            "warnings": list(self.warnings),
            **({"companionMetric": {"name": self.companion.name, "adapterName": self.companion.adapter_name,
                                    "type": self.companion.kind, "target": self.companion.target,
                                    "reason": self.companion.reason}} if self.companion else {}),
        }


def plan_capacity(base_rps: float, peak_rps: float, replica_rps: float, *,
                  gpus_per_replica: float = 1, gpu_mode: str = "whole", server_type: str = "vllm",
                  prefer: str = "auto", server_metric: str | None = None,
                  max_wait_probability: float = 0.2, max_queue_wait_s: float | None = 1.0,
                  headroom: float = 0.2, min_replicas_floor: int = 2,
                  inventory_gpus: float | None = None,
                  request_latency_s: float | None = None) -> CapacityPlan:
    """Size an autoscaled inference Deployment with an M/M/c (Erlang C) model.

    Inputs: `base_rps` and `peak_rps` (requests/s), `replica_rps` = mu, the throughput one
    replica sustains while meeting the latency SLO (measure it: "goodput").
    - min replicas = max(`min_replicas_floor` (2 keeps a PDB with minAvailable 1 drainable),
      Erlang C size at base load);
    - max replicas = Erlang C size at peak x (1 + `headroom`);
    - HPA target: the utilisation lambda/(c mu) at peak with the Erlang C size, expressed
      in the chosen metric (GPU: percent or 0-1 ratio; vLLM queue: the waiting requests a
      replica drains within `max_queue_wait_s` by Little's law L = mu W; Triton: that
      wait in microseconds);
    - GPUs = replicas x `gpus_per_replica` (MIG or shared slices count as the unit the
      inventory uses); a warning when max replicas x GPUs per replica exceeds
      `inventory_gpus`.
    - With the vLLM queue metric and `request_latency_s` (mean end-to-end latency at mu),
      a companion metric `vllm:num_requests_running` with target mu x latency x the design
      utilisation (Little's law): the waiting queue is 0 whenever capacity suffices, so on
      its own it lets the HPA drift to minReplicas under steady load and scale back up
      once a queue forms (the simulator shows the sawtooth); the HPA takes the larger.

    Limits of the model: M/M/c assumes Poisson arrivals, exponential service times and one
    request per server at a time. An LLM server batches continuously, so a replica is
    modelled as one fast server of rate mu (its measured goodput at the SLO); the queueing
    delay of a batching server with many concurrent slots is lower than M/M/c predicts at
    moderate load and rises more sharply near saturation, and token-length variance is not
    modelled. Treat the result as a starting point, to be checked with a load test and the
    `simulate` trace replay.
    """
    for name, v in (("base_rps", base_rps), ("peak_rps", peak_rps)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise CapacityError(f"must be a finite number >= 0, got {v!r}", field=name)
    if peak_rps < base_rps:
        raise CapacityError(f"peak ({peak_rps}) is below base ({base_rps}); swap them", field="peak_rps")
    if not (isinstance(replica_rps, (int, float)) and math.isfinite(replica_rps) and replica_rps > 0):
        raise CapacityError(f"must be > 0 requests/s, got {replica_rps!r}", field="replica_rps")
    if not (isinstance(gpus_per_replica, (int, float)) and gpus_per_replica > 0):
        raise CapacityError(f"must be > 0, got {gpus_per_replica!r}", field="gpus_per_replica")
    if not (headroom >= 0 and math.isfinite(headroom)):
        raise CapacityError(f"must be >= 0, got {headroom!r}", field="headroom")
    if isinstance(min_replicas_floor, bool) or not isinstance(min_replicas_floor, int) or min_replicas_floor < 1:
        raise CapacityError(f"must be an integer >= 1, got {min_replicas_floor!r}", field="min_replicas_floor")
    if max_queue_wait_s is not None and not max_queue_wait_s > 0:
        raise CapacityError(f"must be > 0 seconds, got {max_queue_wait_s!r}", field="max_queue_wait_s")

    def size(rate: float) -> int:
        return replicas_for_load(rate, replica_rps, max_wait_probability=max_wait_probability,
                                              max_queue_wait_s=max_queue_wait_s)
    c_base = size(base_rps)
    c_peak = size(peak_rps)
    min_replicas = max(min_replicas_floor, c_base)
    max_replicas = max(min_replicas, size(peak_rps * (1 + headroom)))
    utilization = peak_rps / (c_peak * replica_rps) if peak_rps > 0 else 0.0
    # Round the target down to a whole percent / milli so the HPA acts at or before the design point.
    target_util = max(0.01, math.floor(utilization * 100) / 100)
    wait_budget = max_queue_wait_s if max_queue_wait_s is not None else 1.0 / replica_rps
    if server_type == "vllm":
        queue_target = max(1.0, math.floor(replica_rps * wait_budget * 1000) / 1000)
    elif server_type == "triton":
        queue_target = wait_budget * 1e6
    else:
        queue_target = None
    metric = choose_metric(gpu_mode, server_type, prefer=prefer, server_metric=server_metric,
                           target_utilization=target_util, queue_target=queue_target)
    load = peak_rps / replica_rps
    p_wait = erlang_c(c_peak, load) if peak_rps > 0 else 0.0
    w_q = mmc_mean_wait(c_peak, peak_rps, replica_rps) if peak_rps > 0 else 0.0

    warnings: list[str] = []
    gpus_max = max_replicas * gpus_per_replica
    if inventory_gpus is not None:
        if inventory_gpus < 0:
            raise CapacityError(f"must be >= 0, got {inventory_gpus!r}", field="inventory_gpus")
        if gpus_max > inventory_gpus:
            fit = math.floor(inventory_gpus / gpus_per_replica)
            warnings.append(
                f"maxReplicas {max_replicas} x {gpus_per_replica:g} GPUs per replica = {gpus_max:g} "
                f"exceeds the {inventory_gpus:g} GPUs in the inventory: at most {fit} replicas fit; "
                "add GPUs, lower the peak or headroom, or raise per-replica throughput")
    if metric.source == "dcgm" and server_type == "vllm":
        warnings.append("GPU utilisation saturates under continuous batching; prefer the vLLM "
                        "queue metric (prefer='server') if the target is rarely reached")
    companion = None
    if metric.name == VLLM_WAITING and request_latency_s is not None:
        if not (math.isfinite(request_latency_s) and request_latency_s > 0):
            raise CapacityError(f"must be > 0 seconds, got {request_latency_s!r}", field="request_latency_s")
        milli = max(1000, math.floor(target_util * replica_rps * request_latency_s * 1000))
        companion = MetricChoice(
            VLLM_RUNNING, format_milli(milli), "Pods",
            "requests running per pod at the design utilisation (Little's law: mu x latency x "
            "utilisation): sizes the steady state, which the waiting queue (0 while capacity "
            "suffices) cannot; the HPA scales on the larger of the two.",
            milli, "requests running per pod", "server")
    return CapacityPlan(min_replicas, max_replicas, metric, gpus_per_replica,
                        min_replicas * gpus_per_replica, gpus_max, utilization, p_wait, w_q,
                        tuple(warnings), companion)
