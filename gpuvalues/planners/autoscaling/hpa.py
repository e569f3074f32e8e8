"""The Kubernetes HPA controller's arithmetic, ported to Python for planning and simulation.

Source: kubernetes/kubernetes v1.35.4, `pkg/controller/podautoscaler/replica_calculator.go`
(replica counts from Pods, Object and External metrics), `horizontal.go` (several metrics,
stabilization, scaling policies, min/max clamping) and `pkg/apis/autoscaling/v2/defaults.go`
(the `behavior` defaults the API server fills in). Values are integer milli-units as in the
controller (a Quantity's `MilliValue()`), averages use Go's truncating integer division,
ratios are float64 like Go's, so results match the controller exactly, rounding included.

Only the arithmetic is ported: no clients, no informers. Times are plain seconds (floats)
on the caller's clock; the controller uses `time.Now()`, with the same strict comparisons.
Resource (CPU/memory utilization) metrics are not ported: GPU inference scales on custom
metrics, and for those the controller ignores pod readiness timing (only CPU uses it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gpuvalues.errors import CapacityError
from gpuvalues.kube import parse_quantity

# Controller flags (kube-controller-manager defaults).
DEFAULT_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
DEFAULT_DOWNSCALE_STABILIZATION_S = 300  # --horizontal-pod-autoscaler-downscale-stabilization
DEFAULT_SYNC_PERIOD_S = 15  # --horizontal-pod-autoscaler-sync-period

# horizontal.go: the no-behavior scale-up limit is max(2 x current, 4).
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0

# pkg/apis/autoscaling/validation: bounds the API server enforces on behavior.
MAX_PERIOD_SECONDS = 1800
MAX_STABILIZATION_WINDOW_SECONDS = 3600

MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
MIN_INT32 = -(2**31)

POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


class MetricUnavailable(CapacityError):
    """The controller could not compute a replica count from a metric (it would not scale)."""


# --------------------------------------------------------------------------- quantities

def milli_value(value: Any, field: str = "quantity") -> int:
    """`Quantity.MilliValue()`: the value in milli-units, rounded up as Kubernetes does."""
    return math.ceil(parse_quantity(value, field) * 1000)


def format_milli(milli: int) -> str:
    """The canonical Quantity string for a milli-value: 700 -> "700m", 70000 -> "70"."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


# --------------------------------------------------------------------------- tolerances

def _tolerances(tolerance: float | tuple[float, float]) -> tuple[float, float]:
    """Normalise to (scale_down, scale_up), as the controller's `Tolerances` struct."""
    if type(tolerance) is tuple and len(tolerance) == 2 and type(tolerance[0]) is float \
            and type(tolerance[1]) is float and 0.0 <= tolerance[0] < math.inf and 0.0 <= tolerance[1] < math.inf:
        return tolerance  # already normalised (the simulator's hot path)
    if isinstance(tolerance, tuple):
        if len(tolerance) != 2:
            raise CapacityError("tolerance must be a number or a (scale_down, scale_up) pair")
        down, up = float(tolerance[0]), float(tolerance[1])
    else:
        down = up = float(tolerance)
    if not (down >= 0 and up >= 0) or math.isinf(down) or math.isinf(up):
        raise CapacityError(f"tolerance must be finite and >= 0, got {tolerance!r}")
    return down, up


def _within(tol: tuple[float, float], ratio: float) -> bool:
    # Tolerances.isWithin: (1 - down) <= ratio <= (1 + up); NaN is never within.
    return (1.0 - tol[0]) <= ratio <= (1.0 + tol[1])


def _ratio(numerator: int | float, denominator: float) -> float:
    """float64 division with Go's IEEE results for a zero denominator (Inf or NaN)."""
    if denominator == 0:
        if numerator == 0:
            return math.nan
        return math.inf if numerator > 0 else -math.inf
    return float(numerator) / denominator


def _ceil_int32(x: float) -> int:
    # Guards the controller added for overflow: anything above MaxInt32 is MaxInt32.
    if x != x:  # NaN: Go's int32(NaN) is undefined; treat as no pods
        return 0
    if x > MAX_INT32:
        return MAX_INT32
    return int(math.ceil(x))


def _div_trunc(a: int, b: int) -> int:
    # Go integer division truncates toward zero.
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# --------------------------------------------------------------------------- pods

@dataclass(frozen=True)
class PodSample:
    """One pod selected by the HPA and its metric value (None: no metric reported).

    `phase` is the pod phase (Pending, Running, Succeeded, Failed, Unknown), `ready` its
    Ready condition, `deleting` whether it has a deletion timestamp.
    """

    value_milli: int | None
    phase: str = "Running"
    ready: bool = True
    deleting: bool = False

    def __post_init__(self) -> None:
        if self.phase not in POD_PHASES:
            raise CapacityError(f"pod phase {self.phase!r} is not one of {', '.join(POD_PHASES)}")
        if self.value_milli is not None and (isinstance(self.value_milli, bool) or not isinstance(self.value_milli, int)):
            raise CapacityError(f"value_milli must be an int (milli-units) or None, got {self.value_milli!r}")


@dataclass(frozen=True)
class PodGroups:
    """`groupPods` for a non-CPU metric: what the controller counts, drops and fills in."""

    ready_values: tuple[int, ...]  # metrics of counted pods
    unready: int  # Pending pods (their metric is dropped; 0 on a scale-up)
    missing: int  # pods without a metric
    ignored: int  # deleting or Failed pods


def group_pods(samples: Sequence[PodSample]) -> PodGroups:
    """Classify pods as the controller does for custom metrics.

    Deleting or Failed pods are ignored; Pending pods are unready; pods without a metric
    are missing; every other pod counts, whether Ready or not (readiness and start-time
    rules apply to CPU only).
    """
    values: list[int] = []
    unready = missing = ignored = 0
    for pod in samples:
        if pod.deleting or pod.phase == "Failed":
            ignored += 1
        elif pod.phase == "Pending":
            unready += 1
        elif pod.value_milli is None:
            missing += 1
        else:
            values.append(pod.value_milli)
    return PodGroups(tuple(values), unready, missing, ignored)


def ready_pod_count(samples: Sequence[PodSample]) -> int:
    """`getReadyPodsCount`: Running pods whose Ready condition is true (deleting included)."""
    return sum(1 for p in samples if p.phase == "Running" and p.ready)


def plain_metric_replicas(current_replicas: int, metrics_sum: int, metrics_count: int,
                          unready: int, missing: int, target_milli: int,
                          tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """`calcPlainMetricReplicas` on counts: the sum of the counted pods' metrics, their number,
    and the numbers of unready and missing pods. Every pod counted has the same weight, so the
    controller's answer depends only on these; the simulator calls this directly."""
    tol = _tolerances(tolerance)
    if metrics_count + unready + missing == 0:
        raise MetricUnavailable("no pods returned by selector while calculating replica count")
    if metrics_count == 0:
        raise MetricUnavailable("did not receive metrics for targeted pods (pods might be unready)")
    if target_milli <= 0:
        raise CapacityError(f"target must be > 0 milli-units, got {target_milli}")
    usage_ratio = _div_trunc(metrics_sum, metrics_count) / float(target_milli)
    scale_up_with_unready = unready > 0 and usage_ratio > 1.0
    if not scale_up_with_unready and missing == 0:
        if _within(tol, usage_ratio):
            return current_replicas
        return _ceil_int32(usage_ratio * float(metrics_count))

    total, count = metrics_sum, metrics_count
    if missing > 0:
        if usage_ratio < 1.0:
            total += missing * target_milli  # scale-down: missing pods use exactly the target
            count += missing
        elif usage_ratio > 1.0:
            count += missing  # scale-up: missing pods use 0
    if scale_up_with_unready:
        count += unready  # scale-up: unready pods use 0
    new_ratio = _div_trunc(total, count) / float(target_milli)
    if (_within(tol, new_ratio) or (usage_ratio < 1.0 and new_ratio > 1.0)
            or (usage_ratio > 1.0 and new_ratio < 1.0)):
        return current_replicas  # too small a change, or the direction would reverse
    new_replicas = _ceil_int32(new_ratio * float(count))
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (new_ratio > 1.0 and new_replicas < current_replicas):
        return current_replicas  # the changed pod count would reverse the direction
    return new_replicas


def pods_metric_replicas(current_replicas: int, samples: Sequence[PodSample], target_milli: int,
                         tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """Desired replicas for a Pods metric with an AverageValue target (`GetMetricReplicas`).

    `tolerance` is one number or a (scale_down, scale_up) pair (KEP-4951). Raises
    MetricUnavailable when the controller would fail (no pods, no usable metrics).
    """
    g = group_pods(samples)
    if not samples:
        raise MetricUnavailable("no pods returned by selector while calculating replica count")
    return plain_metric_replicas(current_replicas, sum(g.ready_values), len(g.ready_values),
                                 g.unready, g.missing, target_milli, tolerance)


def _usage_ratio_replicas(current_replicas: int, usage_ratio: float, ready_pods: int | None,
                          tol: tuple[float, float]) -> int:
    # getUsageRatioReplicaCount: current 0 skips tolerance and ready pods (scale from zero).
    if current_replicas != 0:
        if _within(tol, usage_ratio):
            return current_replicas
        if ready_pods is None:
            raise MetricUnavailable("unable to calculate ready pods: no pods returned by selector while calculating replica count")
        return _ceil_int32(usage_ratio * float(ready_pods))
    return _ceil_int32(usage_ratio)


def object_metric_replicas(spec_replicas: int, value_milli: int, target_milli: int,
                           pods: Sequence[PodSample],
                           tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """Object metric with a Value target (`GetObjectMetricReplicas`): ceil(ratio x ready pods)."""
    tol = _tolerances(tolerance)
    ratio = _ratio(value_milli, float(target_milli))
    return _usage_ratio_replicas(spec_replicas, ratio, ready_pod_count(pods) if pods else None, tol)


def object_per_pod_metric_replicas(status_replicas: int, value_milli: int, average_target_milli: int,
                                   tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """Object metric with an AverageValue target (`GetObjectPerPodMetricReplicas`)."""
    return _per_pod_replicas(status_replicas, value_milli, average_target_milli, _tolerances(tolerance))


def _per_pod_replicas(status_replicas: int, usage_milli: int, average_target_milli: int,
                      tol: tuple[float, float]) -> int:
    """The AverageValue rule the Object and External per-pod paths share: keep the
    replicas within the tolerance, else ceil(usage / target)."""
    ratio = _ratio(usage_milli, float(average_target_milli) * float(status_replicas))
    if _within(tol, ratio):
        return status_replicas
    return _ceil_int32(math.ceil(float(usage_milli) / float(average_target_milli)))


def _external_sum(values_milli: Sequence[int]) -> int:
    total = 0
    for v in values_milli:
        if v > 0 and total > MAX_INT64 - v:  # the controller caps a positive overflow
            return MAX_INT64
        total += v
    return total


def _external_sum_per_pod(values_milli: Sequence[int]) -> int:
    # GetExternalPerPodMetricReplicas detects int64 overflow as a negative running sum
    # (so a sum that turns negative for any reason also becomes MaxInt64).
    total = 0
    for v in values_milli:
        total += v
        if total < 0 or total > MAX_INT64:
            return MAX_INT64
    return total


def external_metric_replicas(spec_replicas: int, values_milli: Sequence[int], target_milli: int,
                             pods: Sequence[PodSample],
                             tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """External metric with a Value target (`GetExternalMetricReplicas`): the series are summed."""
    tol = _tolerances(tolerance)
    ratio = _ratio(_external_sum(values_milli), float(target_milli))
    return _usage_ratio_replicas(spec_replicas, ratio, ready_pod_count(pods) if pods else None, tol)


def external_per_pod_metric_replicas(status_replicas: int, values_milli: Sequence[int],
                                     average_target_milli: int,
                                     tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """External metric with an AverageValue target (`GetExternalPerPodMetricReplicas`):
    ceil(sum / target) once outside the tolerance (KEDA's default)."""
    return _per_pod_replicas(status_replicas, _external_sum_per_pod(values_milli),
                             average_target_milli, _tolerances(tolerance))


# --------------------------------------------------------------------------- several metrics

@dataclass(frozen=True)
class PodsMetric:
    """A Pods metric (type: Pods, target AverageValue) and each pod's current value."""

    samples: tuple[PodSample, ...]
    target_milli: int


@dataclass(frozen=True)
class ObjectMetric:
    """An Object metric: one value; target Value (`target_milli`) or AverageValue."""

    value_milli: int
    target_milli: int | None = None
    average_target_milli: int | None = None


@dataclass(frozen=True)
class ExternalMetric:
    """An External metric: the values of all matching series (summed by the controller)."""

    values_milli: tuple[int, ...]
    target_milli: int | None = None
    average_target_milli: int | None = None


Metric = PodsMetric | ObjectMetric | ExternalMetric


def metric_replicas(metric: Metric, spec_replicas: int, status_replicas: int,
                    pods: Sequence[PodSample],
                    tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """One metric's proposal (`computeReplicasForMetric`). Pods metrics use spec replicas as
    the current count; AverageValue targets use the status replica count, as upstream."""
    if isinstance(metric, PodsMetric):
        return pods_metric_replicas(spec_replicas, metric.samples, metric.target_milli, tolerance)
    if isinstance(metric, ObjectMetric):
        if metric.target_milli is not None:
            return object_metric_replicas(spec_replicas, metric.value_milli, metric.target_milli, pods, tolerance)
        if metric.average_target_milli is not None:
            return object_per_pod_metric_replicas(status_replicas, metric.value_milli, metric.average_target_milli, tolerance)
        raise MetricUnavailable("invalid object metric source: neither a value target nor an average value target was set")
    if isinstance(metric, ExternalMetric):
        if metric.average_target_milli is not None:
            return external_per_pod_metric_replicas(status_replicas, metric.values_milli, metric.average_target_milli, tolerance)
        if metric.target_milli is not None:
            return external_metric_replicas(spec_replicas, metric.values_milli, metric.target_milli, pods, tolerance)
        raise MetricUnavailable("invalid external metric source: neither a value target nor an average value target was set")
    raise CapacityError(f"unknown metric source {type(metric).__name__}")


def current_usage_milli(metric: Metric, status_replicas: int) -> int:
    """The current value the controller reports in the HPA status for a metric (milli-units):
    the truncated pod average, the object value, the external sum (capped at MaxInt64),
    or, for AverageValue targets on Object/External metrics, that divided by the replicas."""
    if isinstance(metric, PodsMetric):
        g = group_pods(metric.samples)
        if not g.ready_values:
            raise MetricUnavailable("did not receive metrics for targeted pods (pods might be unready)")
        return _div_trunc(sum(g.ready_values), len(g.ready_values))
    if isinstance(metric, ObjectMetric):
        usage = metric.value_milli
    elif metric.average_target_milli is not None:
        usage = _external_sum_per_pod(metric.values_milli)
    else:
        usage = _external_sum(metric.values_milli)
    if metric.average_target_milli is None:
        return usage
    if isinstance(metric, ExternalMetric) and float(usage) >= float(MAX_INT64):
        return MAX_INT64
    return int(math.ceil(float(usage) / float(status_replicas)))


def combine_proposals(spec_replicas: int, proposals: Sequence[int | None]) -> int:
    """`computeReplicasForMetrics`: the largest proposal; None marks a metric that failed.

    Raises MetricUnavailable (no scaling this sync) when every metric failed, or when some
    failed and the others would scale down.
    """
    replicas = 0
    invalid = 0
    for p in proposals:
        if p is None:
            invalid += 1
            continue
        if replicas == 0 or p > replicas:
            replicas = p
    if invalid >= len(proposals) or (invalid > 0 and replicas < spec_replicas):
        raise MetricUnavailable(f"invalid metrics ({invalid} invalid out of {len(proposals)})")
    return replicas


def metrics_replicas(metrics: Sequence[Metric], spec_replicas: int, pods: Sequence[PodSample] = (),
                     status_replicas: int | None = None,
                     tolerance: float | tuple[float, float] = DEFAULT_TOLERANCE) -> int:
    """Desired replicas over several metrics: each metric's proposal, then the maximum."""
    status = spec_replicas if status_replicas is None else status_replicas
    proposals: list[int | None] = []
    for m in metrics:
        try:
            proposals.append(metric_replicas(m, spec_replicas, status, pods, tolerance))
        except MetricUnavailable:
            proposals.append(None)
    return combine_proposals(spec_replicas, proposals)


# --------------------------------------------------------------------------- behavior

@dataclass(frozen=True)
class ScalingPolicy:
    """One HPAScalingPolicy: `type` Pods or Percent, `value`, `period_seconds`."""

    type: str
    value: int
    period_seconds: int


@dataclass(frozen=True)
class ScalingRules:
    """HPAScalingRules after defaulting. `stabilization_window_seconds` None (scale-down
    only) means the controller's --horizontal-pod-autoscaler-downscale-stabilization."""

    stabilization_window_seconds: int | None
    select_policy: str
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None = None

    @property
    def longest_period(self) -> int:
        """The longest policy period in seconds (how far back scale events matter)."""
        return max((p.period_seconds for p in self.policies), default=0)


@dataclass(frozen=True)
class Behavior:
    """A defaulted autoscaling/v2 `spec.behavior`."""

    scale_up: ScalingRules
    scale_down: ScalingRules


# pkg/apis/autoscaling/v2/defaults.go
DEFAULT_SCALE_UP = ScalingRules(0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)))
DEFAULT_SCALE_DOWN = ScalingRules(None, "Max", (ScalingPolicy("Percent", 100, 15),))


def _int_field(raw: Any, field: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise CapacityError(f"must be an integer, got {raw!r}", field=field)
    return raw


def _rules(raw: Any, default: ScalingRules, path: str) -> ScalingRules:
    """`copyHPAScalingRules` over the defaults, then the API server's validation."""
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        raise CapacityError("must be a mapping with stabilizationWindowSeconds, selectPolicy, policies, tolerance", field=path)
    unknown = set(raw) - {"stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"}
    if unknown:
        raise CapacityError(f"unknown field(s) {', '.join(sorted(unknown))}", field=path)
    window = default.stabilization_window_seconds
    if raw.get("stabilizationWindowSeconds") is not None:
        window = _int_field(raw["stabilizationWindowSeconds"], f"{path}.stabilizationWindowSeconds")
        if not 0 <= window <= MAX_STABILIZATION_WINDOW_SECONDS:
            raise CapacityError(f"must be between 0 and {MAX_STABILIZATION_WINDOW_SECONDS}, got {window}",
                                field=f"{path}.stabilizationWindowSeconds")
    select = default.select_policy
    if raw.get("selectPolicy") is not None:
        select = raw["selectPolicy"]
        if select not in ("Max", "Min", "Disabled"):
            raise CapacityError(f"must be Max, Min or Disabled, got {select!r}", field=f"{path}.selectPolicy")
    policies = default.policies
    if raw.get("policies") is not None:
        items = raw["policies"]
        if not isinstance(items, list) or not items:
            raise CapacityError("must specify at least one Policy", field=f"{path}.policies")
        parsed = []
        for i, p in enumerate(items):
            f = f"{path}.policies[{i}]"
            if not isinstance(p, Mapping):
                raise CapacityError("must be a mapping with type, value, periodSeconds", field=f)
            ptype = p.get("type")
            if ptype not in ("Pods", "Percent"):
                raise CapacityError(f"type must be Pods or Percent, got {ptype!r}", field=f"{f}.type")
            value = _int_field(p.get("value"), f"{f}.value")
            if value <= 0:
                raise CapacityError("must be greater than zero", field=f"{f}.value")
            period = _int_field(p.get("periodSeconds"), f"{f}.periodSeconds")
            if not 0 < period <= MAX_PERIOD_SECONDS:
                raise CapacityError(f"must be between 1 and {MAX_PERIOD_SECONDS}", field=f"{f}.periodSeconds")
            parsed.append(ScalingPolicy(ptype, value, period))
        policies = tuple(parsed)
    tolerance = default.tolerance
    if raw.get("tolerance") is not None:
        q = parse_quantity(raw["tolerance"], f"{path}.tolerance")
        if q < 0:
            raise CapacityError("must be greater than or equal to 0", field=f"{path}.tolerance")
        tolerance = float(q)
    return ScalingRules(window, select, policies, tolerance)


def fill_behavior(behavior: Mapping[str, Any] | None) -> Behavior | None:
    """The `spec.behavior` mapping with every unset field defaulted as the API server does
    (`SetDefaults_HorizontalPodAutoscalerBehavior`); None stays None (the legacy path)."""
    if behavior is None:
        return None
    if not isinstance(behavior, Mapping):
        raise CapacityError("must be a mapping with scaleUp and/or scaleDown", field="behavior")
    unknown = set(behavior) - {"scaleUp", "scaleDown"}
    if unknown:
        raise CapacityError(f"unknown field(s) {', '.join(sorted(unknown))}", field="behavior")
    return Behavior(_rules(behavior.get("scaleUp"), DEFAULT_SCALE_UP, "behavior.scaleUp"),
                    _rules(behavior.get("scaleDown"), DEFAULT_SCALE_DOWN, "behavior.scaleDown"))


def scale_up_limit(current_replicas: int) -> int:
    """`calculateScaleUpLimit` (no behavior): max(2 x current, 4)."""
    return int(max(SCALE_UP_LIMIT_FACTOR * float(current_replicas), SCALE_UP_LIMIT_MINIMUM))


def convert_desired_replicas_with_rules(current_replicas: int, desired_replicas: int,
                                        min_replicas: int, max_replicas: int) -> tuple[int, str]:
    """`convertDesiredReplicasWithRules` (no behavior): clamp to [min, min(max, scale-up limit)].
    Returns (replicas, condition reason)."""
    limit = scale_up_limit(current_replicas)
    if max_replicas > limit:
        maximum, reason = limit, "ScaleUpLimit"
    else:
        maximum, reason = max_replicas, "TooManyReplicas"
    if desired_replicas < min_replicas:
        return min_replicas, "TooFewReplicas"
    if desired_replicas > maximum:
        return maximum, reason
    return desired_replicas, "DesiredWithinRange"


class _Event:
    __slots__ = ("at", "change", "outdated")

    def __init__(self, at: float, change: int) -> None:
        self.at, self.change, self.outdated = at, change, False


def _change_in_period(events: list[_Event], now: float, period: int) -> int:
    # getReplicasChangePerPeriod: events strictly after now - period.
    cutoff = now - period
    return sum(e.change for e in events if e.at > cutoff)


class HPA:
    """One HorizontalPodAutoscaler's controller state: past recommendations and scale events.

    `behavior` is the autoscaling/v2 `spec.behavior` mapping (defaults filled as the API
    server does) or None for the legacy path: 5-minute highest-recommendation stabilization
    and a scale-up limit of max(2 x current, 4).

    `recommend(now_s, current, desired)` is the controller's normalization step
    (stabilization, which records `desired` as the controller does, then the rate limits
    and min/max). It does not record a scale event: call `record_scale(at_s, delta)` for
    the scale actually applied (kept only with a behavior, as upstream), or use
    `reconcile`, which runs a whole sync (guards, normalization, scale event).
    `record_recommendation` adds history, e.g. recommendations from before `now_s`.
    """

    def __init__(self, min_replicas: int, max_replicas: int, behavior: Mapping[str, Any] | None = None,
                 *, tolerance: float = DEFAULT_TOLERANCE,
                 downscale_stabilization_s: int = DEFAULT_DOWNSCALE_STABILIZATION_S) -> None:
        min_replicas = _int_field(min_replicas, "minReplicas")
        max_replicas = _int_field(max_replicas, "maxReplicas")
        if min_replicas < 0:
            raise CapacityError(f"must be >= 0 (0 needs the HPAScaleToZero gate), got {min_replicas}", field="minReplicas")
        if max_replicas < max(min_replicas, 1):
            raise CapacityError(f"must be >= minReplicas ({min_replicas}) and >= 1, got {max_replicas}", field="maxReplicas")
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.behavior = fill_behavior(behavior)
        self.downscale_stabilization_s = downscale_stabilization_s
        down, up = _tolerances(tolerance)
        if self.behavior is not None:  # KEP-4951, beta and on by default since 1.35
            if self.behavior.scale_down.tolerance is not None:
                down = self.behavior.scale_down.tolerance
            if self.behavior.scale_up.tolerance is not None:
                up = self.behavior.scale_up.tolerance
        self.tolerances: tuple[float, float] = (down, up)
        self._recs: list[tuple[float, int]] = []  # (at_s, replicas), slots reused like upstream
        self._recs_set = False  # upstream: recommendations[key] != nil (an empty log counts)
        self._up: list[_Event] = []
        self._down: list[_Event] = []
        self.last_reason = ""

    # ---- state, as the controller keeps it
    @property
    def recommendations(self) -> list[tuple[float, int]]:
        """Recorded (time, desired replicas) recommendations, oldest first."""
        return [(at, int(r)) for at, r in self._recs]

    @property
    def scale_up_events(self) -> list[tuple[float, int, bool]]:
        """Recorded scale-up events as (time, replicas added, outdated)."""
        return [(e.at, e.change, e.outdated) for e in self._up]

    @property
    def scale_down_events(self) -> list[tuple[float, int, bool]]:
        """Recorded scale-down events as (time, replicas removed, outdated)."""
        return [(e.at, e.change, e.outdated) for e in self._down]

    def load_state(self, recommendations: Sequence[tuple[float, int]] = (),
                   scale_up_events: Sequence[tuple[float, int, bool]] = (),
                   scale_down_events: Sequence[tuple[float, int, bool]] = ()) -> None:
        """Replace the controller state: recommendations as (at_s, replicas), scale events
        as (at_s, replicas changed (> 0), outdated). For resuming a run and for tests."""
        self._recs = [(float(at), int(r)) for at, r in recommendations]
        self._recs_set = True
        self._up, self._down = [], []
        for target, events in ((self._up, scale_up_events), (self._down, scale_down_events)):
            for at, change, outdated in events:
                e = _Event(float(at), int(change))
                e.outdated = bool(outdated)
                target.append(e)

    def record_recommendation(self, at_s: float, replicas: int) -> None:
        """Add a past (unstabilized) recommendation to the history."""
        self._recs.append((float(at_s), int(replicas)))
        self._recs_set = True

    def record_scale(self, at_s: float, delta: int) -> None:
        """`storeScaleEvent`: remember a scale by `delta` replicas at `at_s` (reusing an
        outdated slot). Without a behavior nothing is stored, as upstream."""
        if self.behavior is None or delta == 0:
            return
        if delta > 0:
            events, longest = self._up, self.behavior.scale_up.longest_period
        else:
            events, longest = self._down, self.behavior.scale_down.longest_period
        cutoff = at_s - longest
        slot = -1
        for i, e in enumerate(events):  # markScaleEventsOutdated, then the last outdated slot
            if e.at < cutoff:
                e.outdated = True
            if e.outdated:
                slot = i
        event = _Event(float(at_s), abs(int(delta)))
        if slot >= 0:
            events[slot] = event
        else:
            events.append(event)

    # ---- the legacy path
    def _stabilize_legacy(self, now: float, desired: int) -> int:
        best = desired
        cutoff = now - self.downscale_stabilization_s
        slot = -1
        for i, rec in enumerate(self._recs):
            if rec[0] < cutoff:
                slot = i
            elif rec[1] > best:
                best = int(rec[1])
        self._store(slot, now, desired)
        return best

    # ---- the behavior path
    def stabilize(self, now_s: float, current_replicas: int, desired_replicas: int) -> int:
        """`stabilizeRecommendationWithBehaviors` (or the legacy max-over-window): the
        stabilized recommendation; records `desired_replicas` in the history."""
        if self.behavior is None:
            return self._stabilize_legacy(now_s, desired_replicas)
        up_window = self.behavior.scale_up.stabilization_window_seconds or 0
        down_window = self.behavior.scale_down.stabilization_window_seconds
        if down_window is None:
            down_window = self.downscale_stabilization_s
        up_cut, down_cut = now_s - up_window, now_s - down_window
        up_rec = down_rec = desired_replicas
        slot = -1
        if up_window == 0 and down_window >= 0:  # the common case, one comparison per entry
            for i, (at, r) in enumerate(self._recs):
                if at > down_cut:
                    if at > now_s and r < up_rec:
                        up_rec = r
                    if r > down_rec:
                        down_rec = r
                elif at < down_cut:
                    slot = i
        else:
            for i, (at, r) in enumerate(self._recs):
                if at > up_cut and r < up_rec:
                    up_rec = r
                if at > down_cut and r > down_rec:
                    down_rec = r
                if at < up_cut and at < down_cut:
                    slot = i
        rec = current_replicas
        if rec < up_rec:
            rec = up_rec
        if rec > down_rec:
            rec = down_rec
        self._store(slot, now_s, desired_replicas)
        return rec

    def _store(self, slot: int, now_s: float, desired: int) -> None:
        """Record this sync's recommendation in the outdated `slot` (reused, as upstream), else
        at the end (both stabilization paths)."""
        if slot >= 0:
            self._recs[slot] = (now_s, desired)
        else:
            self._recs.append((now_s, desired))
        self._recs_set = True

    def _limit(self, rules: ScalingRules, now: float, current: int, up: bool) -> int:
        # calculateScaleUpLimitWithScalingRules / calculateScaleDownLimitWithBehaviors
        if rules.select_policy == "Disabled":
            return current
        pick_max = (rules.select_policy == "Min") != up  # up+Max or down+Min take the max
        result = MIN_INT32 if pick_max else MAX_INT32
        for p in rules.policies:
            start = current - _change_in_period(self._up, now, p.period_seconds) \
                + _change_in_period(self._down, now, p.period_seconds)
            if p.type == "Pods":
                proposed = start + p.value if up else start - p.value
            elif up:  # round up, or a small target would never grow
                proposed = int(math.ceil(float(start) * (1 + float(p.value) / 100)))
            else:  # Go's int32() truncates toward zero
                proposed = int(float(start) * (1 - float(p.value) / 100))
            result = max(result, proposed) if pick_max else min(result, proposed)
        return result

    def limit_rate(self, now_s: float, current_replicas: int, desired_replicas: int) -> tuple[int, str]:
        """`convertDesiredReplicasWithBehaviorRate`: apply the policies over their periods
        (using past scale events) and min/max. Returns (replicas, condition reason)."""
        if self.behavior is None:
            return convert_desired_replicas_with_rules(current_replicas, desired_replicas,
                                                       self.min_replicas, self.max_replicas)
        if desired_replicas > current_replicas:
            limit = max(self._limit(self.behavior.scale_up, now_s, current_replicas, True), current_replicas)
            if self.max_replicas > limit:
                maximum, reason = limit, "ScaleUpLimit"
            else:
                maximum, reason = self.max_replicas, "TooManyReplicas"
            if desired_replicas > maximum:
                return maximum, reason
        elif desired_replicas < current_replicas:
            limit = min(self._limit(self.behavior.scale_down, now_s, current_replicas, False), current_replicas)
            if self.min_replicas < limit:
                minimum, reason = limit, "ScaleDownLimit"
            else:
                minimum, reason = self.min_replicas, "TooFewReplicas"
            if desired_replicas < minimum:
                return minimum, reason
        return desired_replicas, "DesiredWithinRange"

    def recommend(self, now_s: float, current_replicas: int, desired_replicas: int) -> int:
        """The controller's normalization of the metrics' desired replicas: stabilization
        (recording `desired_replicas`), then the scale rate limits and min/max clamping."""
        stabilized = self.stabilize(now_s, current_replicas, desired_replicas)
        replicas, self.last_reason = self.limit_rate(now_s, current_replicas, stabilized)
        return replicas

    def reconcile(self, now_s: float, current_replicas: int, metric_desired: int | None) -> int:
        """One sync (`reconcileAutoscaler`): guards, normalization, and the scale event.

        `metric_desired` is the metrics' proposal, None when they failed (no scaling).
        Returns the replica count the controller sets (the current one when unchanged).
        """
        if not self._recs_set:  # recordInitialRecommendation
            self._recs.append((now_s, current_replicas))
            self._recs_set = True
        if current_replicas == 0 and self.min_replicas != 0:
            self.last_reason = "ScalingDisabled"
            return 0
        if current_replicas > self.max_replicas:
            desired = self.max_replicas
        elif current_replicas < self.min_replicas:
            desired = self.min_replicas
        elif metric_desired is None:
            self.last_reason = "FailedComputeMetricsReplicas"
            return current_replicas
        else:
            desired = self.recommend(now_s, current_replicas, max(metric_desired, 0))
        if desired != current_replicas:
            self.record_scale(now_s, desired - current_replicas)
        return desired
