"""The per-node remediation state machine: pure functions over frozen dataclasses, no I/O.

    healthy -> suspect -> quarantined -> draining -> drained -> recovering -> healthy

* healthy -> suspect: a fault signal is seen on the node.
* suspect -> healthy: the signal went away before it was confirmed (a transient), and the
  node's signals are present and clean (`evidence`): no data is not health.
* suspect -> quarantined: the signal lasted `suspect_for_s` and the circuit breaker and the
  rate limit allow it: our `NoSchedule` taint, our Node condition and an Event.
* quarantined -> draining: the controller evicts the node's GPU pods (drain.py). With
  `drain` off the node stays quarantined until it recovers (quarantined -> recovering).
* draining -> drained: no evictable GPU pod is left; optionally our reset label asks an
  external tool (GPU reset, reboot) to act. draining -> drain-timed-out after
  `drain_timeout_s` with pods left (a PDB that never allows eviction): evictions stop, an
  Event names the pods, the taint stays. draining -> recovering: the fault cleared mid-drain.
* drained / drain-timed-out -> recovering: every signal gone, with evidence of health;
  recovering -> healthy after `hold_down_s` of evidence without a signal: only the taint,
  condition and label this controller added are removed. recovering -> drained (or
  quarantined) when a signal returns or the evidence goes missing.
* recovering -> needs-attention instead of healthy when the node was quarantined
  `flap_max_quarantines` times within `flap_window_s` (flap damping): held, an Event.
* any held state -> cancelled when our taint was removed by someone else (an operator):
  recorded on the node, nothing re-quarantined for that fault episode; cancelled ->
  healthy once the node's signals are present and clean.

The record lives in the node's annotations (`ANN_STATE`, `ANN_RECORD`), so a restarted
controller resumes where the last one stopped. The annotations are untrusted: a record
that does not parse (`Record.parse`) makes the controller skip that node and say so,
never the fleet. Safety rules:

* Ownership: the record lists what this controller added (`owned`); it removes only that.
  A node cordoned or tainted by someone else (an operator, NVSentinel, the node lifecycle
  controller) is never acted on: its faults are reported, nothing else (NVSentinel#1424:
  a remediator uncordoned nodes others had cordoned).
* Circuit breaker: at most `breaker_max_nodes` nodes, and at most `breaker_max_percent`
  (rounded up) of the GPU nodes of a pool (`breaker_pool_label`; the whole fleet when
  empty), held by us at once; a refused quarantine latches the pool's breaker open until
  an explicit reset. Drains obey the same limit, so forged records cannot drain past it.
* Rate limit: at most `max_new_quarantines_per_sync` new quarantines per sync.
"""
from __future__ import annotations

import enum
import functools
import json
import math
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

# a node taint, the one class the scheduler model (fit, doctor) and this controller share
from gpuvalues.planners.scheduling.inventory import Taint

PREFIX = "remediation.gpu-inference.io"
TAINT_KEY = f"{PREFIX}/gpu-unhealthy"
TAINT_EFFECT = "NoSchedule"
CONDITION_TYPE = "GpuInferenceQuarantined"
RESET_LABEL = f"{PREFIX}/reset-requested"
ANN_STATE = f"{PREFIX}/state"
ANN_RECORD = f"{PREFIX}/record"

# Taints that say nothing about another remediator: the GPU node presence taint
# (GKE / the device plugin's convention) and our own.
DEFAULT_IGNORED_TAINTS = ("nvidia.com/gpu",)

# Markers of other remediators, recognised by name so Events say who holds the node.
# NVSentinel: docs/runbooks (cordoned nodes) and docs/cancelling-breakfix.md: the
# `quarantineHealthEvent` annotation, the `dgxc.nvidia.com/nvsentinel-state` label and
# the opt-out label `k8saas.nvidia.com/ManagedByNVSentinel`; its taints are configured
# per rule, so any taint we did not add counts as foreign anyway.
NVSENTINEL_ANNOTATIONS = ("quarantineHealthEvent",)
NVSENTINEL_LABELS = ("dgxc.nvidia.com/nvsentinel-state",)
# The NVIDIA DRA driver (k8s-dra-driver-gpu) marks unhealthy devices with device taints
# (resource.k8s.io DeviceTaintRule, KEP-5055) and node taints under gpu.nvidia.com/.
DRA_TAINT_PREFIXES = ("gpu.nvidia.com/", "resource.kubernetes.io/")


class State(str, enum.Enum):
    """States of a node; the value is what the annotation holds."""
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    QUARANTINED = "quarantined"
    DRAINING = "draining"
    DRAINED = "drained"
    DRAIN_TIMED_OUT = "drain-timed-out"
    RECOVERING = "recovering"
    NEEDS_ATTENTION = "needs-attention"
    CANCELLED = "cancelled"


# States in which we hold the node (our taint is on it); they count against the breaker.
HELD = frozenset({State.QUARANTINED, State.DRAINING, State.DRAINED, State.DRAIN_TIMED_OUT, State.RECOVERING,
                  State.NEEDS_ATTENTION})

# Bounds on what a record may hold (node annotations are at most 256 KiB together, and a
# record is untrusted input: anyone who may edit a node may write it).
MAX_REASON = 1024          # characters of a reason (annotation, condition message, Event)
MAX_FAULT_DETAIL = 200     # characters of one fault in a reason
MAX_EVICTED = 200          # pod UIDs remembered per drain
MAX_HISTORY = 20           # quarantine times remembered (flap damping)
MAX_RECORD_CHARS = 64 * 1024
MAX_SINCE = 1e11           # unix seconds (year 5138): a bigger `since` is not a time


@dataclass(frozen=True)
class Fault:
    """One fault signal on a node: `kind` (xid, dbe, row-remap, nvlink, allocatable,
    condition, exporter-missing), a detail (e.g. `xid=79 gpu=3`) and whether it acts
    (`actionable` false: warn only, e.g. a missing exporter)."""
    kind: str
    detail: str
    actionable: bool = True

    def __str__(self) -> str:
        return f"{self.kind}: {clip(self.detail, MAX_FAULT_DETAIL)}"


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying so."""
    return text if len(text) <= limit else text[:max(0, limit - 14)] + " [truncated]"


def reason_of(faults: Iterable[Fault]) -> str:
    """The reason a set of faults gives, bounded (MAX_REASON): a condition message or a
    series label set by someone else can be any size (a 256 KiB one made every node update
    fail with 422)."""
    faults = list(faults)
    parts = [str(f) for f in faults[:8]]
    if len(faults) > 8:
        parts.append(f"and {len(faults) - 8} more")
    return clip("; ".join(parts), MAX_REASON)


class BadRecord(ValueError):
    """A node's remediation annotations that do not parse (hand-edited or forged)."""


@dataclass(frozen=True)
class Record:
    """What the controller knows about a node, stored in its annotations."""
    state: State = State.HEALTHY
    since: float = 0.0                  # unix time the state was entered
    reason: str = ""
    owned: frozenset[str] = frozenset()  # subset of {"taint", "condition", "label"}
    evicted: tuple[str, ...] = ()        # pod UIDs evicted in this drain (no second eviction)
    history: tuple[float, ...] = ()      # when the node was quarantined (flap damping)

    def annotations(self) -> dict[str, str]:
        """The node annotations that persist this record."""
        body = {"since": round(self.since, 3), "reason": clip(self.reason, MAX_REASON), "owned": sorted(self.owned),
                "evicted": list(self.evicted[-MAX_EVICTED:])}
        if self.history:
            body["history"] = [round(t, 3) for t in self.history[-MAX_HISTORY:]]
        return {ANN_STATE: self.state.value, ANN_RECORD: json.dumps(body, sort_keys=True)}

    @classmethod
    def parse(cls, annotations: Mapping[str, str] | None) -> "Record":
        """Parse a node's annotations strictly; BadRecord says what is wrong. No
        annotations at all is a healthy node."""
        annotations = annotations or {}
        if ANN_STATE not in annotations and ANN_RECORD not in annotations:
            return _HEALTHY
        raw_state, raw = annotations.get(ANN_STATE, State.HEALTHY.value), annotations.get(ANN_RECORD) or "{}"
        try:
            state = State(raw_state)
        except ValueError:
            raise BadRecord(f"{ANN_STATE}: unknown state {clip(str(raw_state), 40)!r}") from None
        if len(raw) > MAX_RECORD_CHARS:
            raise BadRecord(f"{ANN_RECORD}: {len(raw)} characters (at most {MAX_RECORD_CHARS})")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise BadRecord(f"{ANN_RECORD}: not JSON") from None
        if not isinstance(body, dict):
            raise BadRecord(f"{ANN_RECORD}: not a JSON object")
        since = body.get("since", 0.0)
        if isinstance(since, bool) or not isinstance(since, (int, float)) or not _finite_time(since):
            raise BadRecord(f"{ANN_RECORD}: since must be a unix time in seconds")
        owned, evicted, history = body.get("owned", []), body.get("evicted", []), body.get("history", [])
        if not isinstance(owned, list) or any(x not in ("taint", "condition", "label") for x in owned):
            raise BadRecord(f"{ANN_RECORD}: owned must be a list of taint, condition, label")
        if not isinstance(evicted, list) or len(evicted) > 10 * MAX_EVICTED \
                or any(not isinstance(x, str) or len(x) > 64 for x in evicted):
            raise BadRecord(f"{ANN_RECORD}: evicted must be a list of pod UIDs")
        if not isinstance(history, list) or len(history) > 10 * MAX_HISTORY \
                or any(isinstance(t, bool) or not isinstance(t, (int, float)) or not _finite_time(t) for t in history):
            raise BadRecord(f"{ANN_RECORD}: history must be a list of unix times")
        reason = body.get("reason", "")
        if not isinstance(reason, str):
            raise BadRecord(f"{ANN_RECORD}: reason must be a string")
        return cls(state, float(since), clip(reason, MAX_REASON), frozenset(owned), tuple(evicted[-MAX_EVICTED:]),
                   tuple(float(t) for t in history[-MAX_HISTORY:]))

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> "Record | None":
        """Like parse, but None for a record that does not parse."""
        try:
            return cls.parse(annotations)
        except BadRecord:
            return None


def _finite_time(t) -> bool:
    try:
        return math.isfinite(t) and 0 <= t < MAX_SINCE
    except OverflowError:      # a 400-digit integer
        return False


_HEALTHY = Record()


@dataclass(frozen=True)
class NodeView:
    """The parts of a Node the machine reads."""
    name: str
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    gpu_node: bool = True

    @functools.cached_property
    def parsed(self) -> tuple[Record, str | None]:
        """(record, None), or (a healthy record, why the annotations do not parse)."""
        try:
            return Record.parse(dict(self.annotations)), None
        except BadRecord as e:
            return _HEALTHY, str(e)

    @property
    def record(self) -> Record:
        """The record in the annotations (parsed once per view; healthy if it does not parse)."""
        return self.parsed[0]

    @property
    def record_error(self) -> str | None:
        return self.parsed[1]

    @classmethod
    def from_k8s(cls, node: Mapping, gpu_resource_prefix: str = "nvidia.com/") -> "NodeView":
        """From a Node as a JSON dict (kubectl / the API)."""
        meta, spec, status = node.get("metadata", {}), node.get("spec") or {}, node.get("status") or {}
        cap = status.get("capacity") or {}
        labels = meta.get("labels") or {}
        gpu = any(k.startswith(gpu_resource_prefix) and _qty(v) > 0 for k, v in cap.items()) \
            or labels.get("nvidia.com/gpu.present") == "true"
        return cls(meta["name"], bool(spec.get("unschedulable")),
                   tuple(Taint(t["key"], t.get("effect", ""), t.get("value") or "") for t in spec.get("taints") or []),
                   tuple(sorted(labels.items())), tuple(sorted((meta.get("annotations") or {}).items())), gpu)


def _qty(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


@dataclass(frozen=True)
class Config:
    """Tunables of the machine (the chart's platform.remediation values)."""
    suspect_for_s: float = 0.0
    hold_down_s: float = 300.0
    drain: bool = True
    drain_timeout_s: float = 3600.0        # 0: never give up
    reset_label: bool = False
    breaker_max_nodes: int = 2
    breaker_max_percent: float = 50.0
    breaker_pool_label: str = ""           # empty: one breaker for the fleet
    max_new_quarantines_per_sync: int = 1
    flap_window_s: float = 3600.0
    flap_max_quarantines: int = 3          # 0: never escalate
    ignored_taints: tuple[str, ...] = DEFAULT_IGNORED_TAINTS

    def breaker_limit(self, gpu_nodes: int) -> int:
        """Nodes we may hold at once in a pool of `gpu_nodes`: the lower of the count and
        the percentage, rounded up (a 1-node pool at 50% may still be remediated)."""
        share = math.ceil(round(gpu_nodes * self.breaker_max_percent / 100.0, 9))
        return max(0, min(self.breaker_max_nodes, share))

    def pool(self, node: NodeView) -> str:
        """The breaker pool of a node ("" for the whole fleet)."""
        return dict(node.labels).get(self.breaker_pool_label, "") if self.breaker_pool_label else ""


# --- actions the controller carries out -------------------------------------------------

@dataclass(frozen=True)
class Action:
    """One side effect: `kind` is one of add-taint, remove-taint, set-condition,
    clear-condition, add-label, remove-label, drain, event, write-record."""
    kind: str
    reason: str = ""
    message: str = ""
    warning: bool = False


@dataclass(frozen=True)
class Decision:
    """What to do with one node this sync."""
    node: str
    before: Record
    after: Record
    actions: tuple[Action, ...] = ()

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclass(frozen=True)
class Step:
    """One sync's decisions over the fleet, with the breaker's view."""
    decisions: tuple[Decision, ...]
    breaker_limit: int
    held: int
    breaker_tripped: tuple[str, ...] = ()   # nodes whose quarantine the breaker refused
    rate_limited: tuple[str, ...] = ()
    latched: frozenset[str] = frozenset()   # breaker pools open after this sync (latched)
    invalid: tuple[str, ...] = ()           # nodes skipped: their record does not parse
    no_evidence: tuple[str, ...] = ()       # nodes whose state waits for evidence of health

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in State}
        for d in self.decisions:
            out[d.after.state.value] += 1
        return out


def foreign_holder(node: NodeView, cfg: Config) -> str | None:
    """Who else holds the node (cordon, a taint we did not add, NVSentinel's markers), or None."""
    labels, ann = dict(node.labels), dict(node.annotations)
    if any(a in ann for a in NVSENTINEL_ANNOTATIONS) or any(lab in labels for lab in NVSENTINEL_LABELS):
        return "NVSentinel"
    if node.unschedulable:
        return "cordoned by someone else"
    for t in node.taints:
        if t.key == TAINT_KEY or t.key in cfg.ignored_taints:
            continue
        if t.key.startswith(DRA_TAINT_PREFIXES):
            return f"the DRA driver's taint {t.key}"
        if t.effect in ("NoSchedule", "NoExecute"):
            return f"taint {t.key}:{t.effect}"
    return None


def _enter(rec: Record, state: State, now: float, reason: str | None = None, **kw) -> Record:
    return replace(rec, state=state, since=now, reason=rec.reason if reason is None else reason, **kw)


NO_EVIDENCE = "NoHealthEvidence"


def step_node(node: NodeView, faults: Iterable[Fault], pods_left: int, now: float, cfg: Config,
              may_quarantine: bool = True, evidence: bool = True, may_drain: bool = True) -> tuple[Decision, bool]:
    """Advance one node by one transition. `pods_left` is how many of its GPU pods still
    need evicting (the controller counts them); `may_quarantine` is the breaker's and rate
    limit's answer, `may_drain` the breaker's answer for evictions; `evidence` says the
    node's signals are present and clean (its exporter scraped, its series there): without
    it no transition that assumes health is taken. Returns the decision and whether it
    wants a quarantine that `may_quarantine` refused (so the caller can count breaker trips)."""
    rec = node.record
    faults = tuple(faults)
    acting = tuple(f for f in faults if f.actionable)
    warn_only = tuple(f for f in faults if not f.actionable)
    reason = reason_of(acting)
    acts: list[Action] = [Action("event", "GpuSignalWarning", clip(str(f), MAX_REASON), warning=True)
                          for f in warn_only]
    refused = False
    s = rec.state
    # the state a held node rests in while its fault lasts
    rest = State.DRAINED if cfg.drain else State.QUARANTINED
    no_data = Action("event", NO_EVIDENCE, f"{s.value}: no evidence of health (series missing or stale, or exporter "
                     "not scraped); keeping the state", warning=True)

    # Our taint gone while we hold the node: someone removed it by hand. That cancels this
    # fault episode (as NVSentinel treats a manual uncordon: docs/cancelling-breakfix.md);
    # recorded on the node, so no re-quarantine while the same fault lasts.
    has_taint = any(t.key == TAINT_KEY for t in node.taints)
    if s in HELD and not has_taint:
        new = _enter(rec, State.CANCELLED, now, clip(f"our taint was removed by someone else while {s.value}; "
                                                     f"cancelled until the fault clears ({rec.reason})", MAX_REASON),
                     owned=rec.owned - {"taint"}, evicted=())
        acts += [Action("event", "QuarantineCancelled", "our taint was removed by someone else: no action on this "
                        "node until its fault clears")]
        acts += _release(rec.owned - {"taint"})
        return Decision(node.name, rec, new, tuple(acts) + (Action("write-record"),)), False
    if s is State.CANCELLED:
        if not acting and evidence:
            new = _enter(rec, State.HEALTHY, now, "", owned=frozenset(), evicted=())
            acts.append(Action("event", "GpuFaultCleared", "the cancelled fault episode is over"))
            return Decision(node.name, rec, new, tuple(acts) + (Action("write-record"),)), False
        return Decision(node.name, rec, rec, tuple(acts) + (() if acting else (no_data,))), False

    holder = foreign_holder(node, cfg) if s in (State.HEALTHY, State.SUSPECT) else None
    if holder is not None:
        if acting:
            acts.append(Action("event", "HeldByOther", clip(f"{reason}: node held by {holder}; not acting", MAX_REASON),
                               warning=True))
        if s is State.SUSPECT:
            new = _enter(rec, State.HEALTHY, now, "")
            return Decision(node.name, rec, new, tuple(acts) + (Action("write-record"),)), False
        return Decision(node.name, rec, rec, tuple(acts)), False

    new = rec
    if s is State.HEALTHY:
        if acting:
            new = _enter(rec, State.SUSPECT, now, reason, evicted=())
            acts.append(Action("event", "GpuFaultSuspected", reason, warning=True))
    elif s is State.SUSPECT:
        if not acting:
            if evidence:
                new = _enter(rec, State.HEALTHY, now, "")
                acts.append(Action("event", "GpuFaultCleared", clip(f"transient: {rec.reason}", MAX_REASON)))
            else:
                acts.append(no_data)
        elif now - rec.since >= cfg.suspect_for_s:
            if may_quarantine:
                history = tuple(t for t in rec.history if now - t < cfg.flap_window_s)[-(MAX_HISTORY - 1):] + (now,)
                new = _enter(rec, State.QUARANTINED, now, reason, owned=rec.owned | {"taint", "condition"},
                             history=history)
                acts += [Action("add-taint"), Action("set-condition", "Quarantined", reason),
                         Action("event", "GpuNodeQuarantined", reason, warning=True)]
            else:
                refused = True
                acts.append(Action("event", "CircuitBreakerOpen",
                                   clip(f"{reason}: not quarantined, the circuit breaker or rate limit is open",
                                        MAX_REASON), warning=True))
    elif s is State.QUARANTINED:
        if cfg.drain:
            new = _enter(rec, State.DRAINING, now)
            acts.append(Action("event", "GpuNodeDraining", "evicting GPU pods through the Eviction API"))
        elif not acting:
            new, more = _recover(rec, now, cfg, evidence, no_data)
            acts += more
    elif s is State.DRAINING:
        if not acting and evidence:
            new = _enter(rec, State.RECOVERING, now, "signals cleared during the drain: drain stopped")
            acts.append(Action("event", "GpuNodeRecovering", f"fault cleared during the drain; evictions stopped, "
                               f"hold-down {cfg.hold_down_s:g}s"))
        elif pods_left > 0:
            if cfg.drain_timeout_s and now - rec.since >= cfg.drain_timeout_s:
                new = _enter(rec, State.DRAIN_TIMED_OUT, now, clip(f"drain gave up after {cfg.drain_timeout_s:g}s: "
                                                                   f"{pods_left} GPU pod(s) could not be evicted "
                                                                   f"({rec.reason})", MAX_REASON))
                acts.append(Action("event", "GpuNodeDrainTimedOut",
                                   f"{pods_left} GPU pod(s) still on the node after {cfg.drain_timeout_s:g}s "
                                   "(a PodDisruptionBudget allows no eviction?); evictions stopped, the node stays "
                                   "tainted", warning=True))
            elif may_drain:
                acts.append(Action("drain"))
            else:
                acts.append(Action("event", "CircuitBreakerOpen", "more nodes are draining than the circuit "
                                   "breaker allows: not evicting from this one", warning=True))
        else:
            owned = rec.owned | ({"label"} if cfg.reset_label else set())
            new = _enter(rec, State.DRAINED, now, owned=frozenset(owned))
            acts.append(Action("event", "GpuNodeDrained", "no GPU pod left"))
            if cfg.reset_label:
                acts.append(Action("add-label"))
    elif s in (State.DRAINED, State.DRAIN_TIMED_OUT):
        if not acting:
            new, more = _recover(rec, now, cfg, evidence, no_data)
            acts += more
    elif s is State.RECOVERING:
        if acting:
            new = _enter(rec, rest, now, reason)
            acts.append(Action("event", "GpuFaultReturned", reason, warning=True))
        elif not evidence:
            new = _enter(rec, rest, now, "no evidence of health during the hold-down; it restarts with evidence")
            acts.append(no_data)
        elif now - rec.since >= cfg.hold_down_s:
            recent = [t for t in rec.history if now - t < cfg.flap_window_s]
            if cfg.flap_max_quarantines and len(recent) >= cfg.flap_max_quarantines:
                new = _enter(rec, State.NEEDS_ATTENTION, now,
                             f"quarantined {len(recent)} times in {cfg.flap_window_s:g}s: held for a person")
                acts.append(Action("event", "GpuNodeNeedsAttention",
                                   f"the fault came back {len(recent)} times within {cfg.flap_window_s:g}s; the "
                                   f"node stays tainted until someone removes the taint {TAINT_KEY}", warning=True))
            else:
                new = _enter(rec, State.HEALTHY, now, "", owned=frozenset(), evicted=())
                acts += _release(rec.owned)
                acts.append(Action("event", "GpuNodeHealthy", "healthy for the hold-down time: released"))
    if new != rec:
        acts.append(Action("write-record"))
    return Decision(node.name, rec, new, tuple(acts)), refused


def _recover(rec: Record, now: float, cfg: Config, evidence: bool, no_data: Action) -> tuple[Record, list[Action]]:
    """Held, no fault: start the hold-down if the node shows evidence of health."""
    if not evidence:
        return rec, [no_data]
    new = _enter(rec, State.RECOVERING, now, "signals cleared")
    acts = [Action("event", "GpuNodeRecovering", f"no fault signal; hold-down {cfg.hold_down_s:g}s")]
    if "label" in rec.owned:
        new = replace(new, owned=new.owned - {"label"})
        acts.append(Action("remove-label"))
    return new, acts


def _release(owned: frozenset[str]) -> list[Action]:
    """Remove only what we added."""
    out = []
    if "taint" in owned:
        out.append(Action("remove-taint"))
    if "condition" in owned:
        out.append(Action("clear-condition"))
    if "label" in owned:
        out.append(Action("remove-label"))
    return out


def step(nodes: Iterable[NodeView], faults: Mapping[str, Iterable[Fault]], pods_left: Mapping[str, int],
         now: float, cfg: Config, evidence: Mapping[str, bool] | None = None,
         latched: frozenset[str] = frozenset()) -> Step:
    """One sync over the fleet: every node advanced once. Confirmed suspects are promoted
    oldest first while their pool's breaker and the rate limit allow; the rest stay suspect
    and are reported (nodes named in `breaker_tripped` / `rate_limited`). A refused
    quarantine latches its pool's breaker (`Step.latched`, given back as `latched` next
    sync) until someone resets it. `evidence[node]` (default: True for every node) says the
    node's signals are present and clean. A node whose record does not parse is skipped
    (`Step.invalid`) and counts as held."""
    nodes = sorted(nodes, key=lambda n: n.name)
    evidence = evidence if evidence is not None else {}
    pools: dict[str, list[NodeView]] = {}
    for n in nodes:
        if n.gpu_node or n.record.state is not State.HEALTHY or n.record_error:
            pools.setdefault(cfg.pool(n), []).append(n)
    limits = {p: cfg.breaker_limit(sum(1 for n in ns if n.gpu_node)) for p, ns in pools.items()}
    held = {p: sum(1 for n in ns if n.record.state in HELD or n.record_error) for p, ns in pools.items()}

    def confirmed(n: NodeView) -> bool:
        r = n.record
        return (r.state is State.SUSPECT and not n.record_error and now - r.since >= cfg.suspect_for_s
                and any(f.actionable for f in faults.get(n.name, ())) and foreign_holder(n, cfg) is None)

    # Quarantine slots, the longest-suspected first, per pool; drains likewise (forged
    # `draining` records must not drain more nodes than the breaker allows).
    queue = sorted((n.record.since, n.name, cfg.pool(n)) for n in nodes if confirmed(n))
    slots = {p: max(0, limits[p] - held[p]) for p in pools}
    slots_rate = max(0, cfg.max_new_quarantines_per_sync)
    allowed: set[str] = set()
    why: dict[str, str] = {}
    latched_now = set(latched)
    for _, name, p in queue:
        if p in latched_now:
            why[name] = "tripped"
        elif slots[p] and slots_rate:
            allowed.add(name)
            slots[p] -= 1
            slots_rate -= 1
        elif not slots[p]:
            why[name] = "tripped"
            latched_now.add(p)
        else:
            why[name] = "limited"
    # Only `limit` held nodes of a pool may evict: held nodes past the limit (records forged
    # or hand-written) wait. Nodes already drained keep their slots (their `since` moves on
    # each transition, so it cannot order them), then the longest-draining.
    past = (State.DRAINED, State.DRAIN_TIMED_OUT, State.RECOVERING, State.NEEDS_ATTENTION)
    held_nodes = sorted((n.record.state not in past, n.record.since, n.name, cfg.pool(n)) for n in nodes
                        if n.record.state in HELD and not n.record_error)
    drain_ok: set[str] = set()
    drain_slots = dict(limits)
    for _, _, name, p in held_nodes:
        if drain_slots[p] > 0:
            drain_ok.add(name)
            drain_slots[p] -= 1
    decisions, tripped, limited, invalid, waiting = [], [], [], [], []
    for n in nodes:
        if n.record_error:
            invalid.append(n.name)
            decisions.append(Decision(n.name, n.record, n.record, (Action(
                "event", "InvalidRemediationRecord", clip(f"{n.record_error}; this node is skipped until the "
                                                          "annotation is fixed or removed", MAX_REASON),
                warning=True),)))
            continue
        if not n.gpu_node and n.record.state is State.HEALTHY:
            continue
        ev = evidence.get(n.name, True)
        d, refused = step_node(n, faults.get(n.name, ()), pods_left.get(n.name, 0), now, cfg,
                               may_quarantine=n.name in allowed, evidence=ev, may_drain=n.name in drain_ok)
        if refused:
            (limited if why.get(n.name) == "limited" else tripped).append(n.name)
        if any(a.reason == NO_EVIDENCE for a in d.actions):
            waiting.append(n.name)
        decisions.append(d)
    total_limit = sum(limits.values())
    return Step(tuple(decisions), total_limit, sum(held.values()), tuple(tripped), tuple(limited),
                frozenset(latched_now), tuple(invalid), tuple(waiting))
