"""The per-node remediation state machine: pure functions over frozen dataclasses, no I/O.

    healthy -> suspect -> quarantined -> draining -> drained -> recovering -> healthy

* healthy -> suspect: a fault signal is seen on the node.
* suspect -> healthy: the signal went away before it was confirmed (a transient).
* suspect -> quarantined: the signal lasted `suspect_for_s` and the circuit breaker and the
  rate limit allow it: our `NoSchedule` taint, our Node condition and an Event.
* quarantined -> draining: the controller evicts the node's GPU pods (drain.py).
* draining -> drained: no evictable GPU pod is left; optionally our reset label asks an
  external tool (GPU reset, reboot) to act.
* drained -> recovering: every signal is gone; recovering -> healthy after `hold_down_s`
  without a signal: only the taint, condition and label this controller added are removed.
  recovering -> drained when a signal returns.

The record lives in the node's annotations (`ANN_STATE`, `ANN_RECORD`), so a restarted
controller resumes where the last one stopped. Safety rules:

* Ownership: the record lists what this controller added (`owned`); it removes only that.
  A node cordoned or tainted by someone else (an operator, NVSentinel, the node lifecycle
  controller) is never acted on: its faults are reported, nothing else (NVSentinel#1424:
  a remediator uncordoned nodes others had cordoned).
* Circuit breaker: at most `breaker_max_nodes` nodes, and at most `breaker_max_percent`
  of the GPU nodes, held by us at once; further confirmed faults are reported only.
* Rate limit: at most `max_new_quarantines_per_sync` new quarantines per sync.
"""
from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

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
    RECOVERING = "recovering"


HELD = frozenset({State.QUARANTINED, State.DRAINING, State.DRAINED, State.RECOVERING})


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class Fault:
    """One fault signal on a node: `kind` (xid, dbe, row-remap, nvlink, allocatable,
    condition, exporter-missing), a detail (e.g. `xid=79 gpu=3`) and whether it acts
    (`actionable` false: warn only, e.g. a missing exporter)."""
    kind: str
    detail: str
    actionable: bool = True

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True)
class Record:
    """What the controller knows about a node, stored in its annotations."""
    state: State = State.HEALTHY
    since: float = 0.0                  # unix time the state was entered
    reason: str = ""
    owned: frozenset[str] = frozenset()  # subset of {"taint", "condition", "label"}
    evicted: tuple[str, ...] = ()        # pod UIDs evicted in this drain (no second eviction)

    def annotations(self) -> dict[str, str]:
        """The node annotations that persist this record."""
        body = {"since": round(self.since, 3), "reason": self.reason, "owned": sorted(self.owned),
                "evicted": list(self.evicted)}
        return {ANN_STATE: self.state.value, ANN_RECORD: json.dumps(body, sort_keys=True)}

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> "Record":
        """Parse a node's annotations; missing or unreadable ones mean healthy (a hand
        edit must not crash the controller; ownership then defaults to nothing owned)."""
        annotations = annotations or {}
        try:
            state = State(annotations.get(ANN_STATE, State.HEALTHY.value))
        except ValueError:
            state = State.HEALTHY
        try:
            body = json.loads(annotations.get(ANN_RECORD) or "{}")
            if not isinstance(body, dict):
                body = {}
        except ValueError:
            body = {}
        owned = frozenset(x for x in body.get("owned", []) if x in ("taint", "condition", "label"))
        evicted = tuple(str(x) for x in body.get("evicted", []) if isinstance(x, str))
        since = body.get("since", 0.0)
        return cls(state, float(since) if isinstance(since, (int, float)) else 0.0,
                   str(body.get("reason", "")), owned, evicted)


@dataclass(frozen=True)
class NodeView:
    """The parts of a Node the machine reads."""
    name: str
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    gpu_node: bool = True

    @property
    def record(self) -> Record:
        return Record.from_annotations(dict(self.annotations))

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
    reset_label: bool = False
    breaker_max_nodes: int = 2
    breaker_max_percent: float = 50.0
    max_new_quarantines_per_sync: int = 1
    ignored_taints: tuple[str, ...] = DEFAULT_IGNORED_TAINTS

    def breaker_limit(self, gpu_nodes: int) -> int:
        """Nodes we may hold at once: the lower of the count and the percentage of GPU nodes."""
        return max(0, min(self.breaker_max_nodes, math.floor(gpu_nodes * self.breaker_max_percent / 100.0)))


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


def step_node(node: NodeView, faults: Iterable[Fault], pods_left: int, now: float, cfg: Config,
              may_quarantine: bool = True) -> tuple[Decision, bool]:
    """Advance one node by one transition. `pods_left` is how many of its GPU pods still
    need evicting (the controller counts them); `may_quarantine` is the breaker's and rate
    limit's answer. Returns the decision and whether it wants a quarantine that
    `may_quarantine` refused (so the caller can count breaker trips)."""
    rec = node.record
    acting = tuple(f for f in faults if f.actionable)
    warn_only = tuple(f for f in faults if not f.actionable)
    reason = "; ".join(map(str, acting))
    acts: list[Action] = [Action("event", "GpuSignalWarning", str(f), warning=True) for f in warn_only]
    refused = False
    s = rec.state

    # Our taint gone while we think we hold the node: someone removed it by hand. Respect
    # that (the operator cancelled the quarantine, as NVSentinel treats an uncordon).
    has_taint = any(t.key == TAINT_KEY for t in node.taints)
    if s in HELD and "taint" in rec.owned and not has_taint:
        new = _enter(rec, State.HEALTHY, now, "taint removed by someone else", owned=rec.owned - {"taint"}, evicted=())
        acts += [Action("event", "QuarantineCancelled", "our taint was removed by someone else: stop")]
        acts += _release(rec.owned - {"taint"})
        return Decision(node.name, rec, new, tuple(acts) + (Action("write-record"),)), False

    holder = foreign_holder(node, cfg) if s in (State.HEALTHY, State.SUSPECT) else None
    if holder is not None:
        if acting:
            acts.append(Action("event", "HeldByOther", f"{reason}: node held by {holder}; not acting", warning=True))
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
            new = _enter(rec, State.HEALTHY, now, "")
            acts.append(Action("event", "GpuFaultCleared", f"transient: {rec.reason}"))
        elif now - rec.since >= cfg.suspect_for_s:
            if may_quarantine:
                new = _enter(rec, State.QUARANTINED, now, reason,
                             owned=rec.owned | {"taint", "condition"})
                acts += [Action("add-taint"), Action("set-condition", "Quarantined", reason),
                         Action("event", "GpuNodeQuarantined", reason, warning=True)]
            else:
                refused = True
                acts.append(Action("event", "CircuitBreakerOpen",
                                   f"{reason}: not quarantined, the circuit breaker or rate limit is open",
                                   warning=True))
    elif s is State.QUARANTINED:
        if cfg.drain:
            new = _enter(rec, State.DRAINING, now)
            acts.append(Action("event", "GpuNodeDraining", "evicting GPU pods through the Eviction API"))
    elif s is State.DRAINING:
        if pods_left > 0:
            acts.append(Action("drain"))
        else:
            owned = rec.owned | ({"label"} if cfg.reset_label else set())
            new = _enter(rec, State.DRAINED, now, owned=frozenset(owned))
            acts.append(Action("event", "GpuNodeDrained", "no GPU pod left"))
            if cfg.reset_label:
                acts.append(Action("add-label"))
    elif s is State.DRAINED:
        if not acting:
            new = _enter(rec, State.RECOVERING, now, "signals cleared")
            acts.append(Action("event", "GpuNodeRecovering", f"no fault signal; hold-down {cfg.hold_down_s:g}s"))
            if "label" in rec.owned:
                new = replace(new, owned=new.owned - {"label"})
                acts.append(Action("remove-label"))
    elif s is State.RECOVERING:
        if acting:
            new = _enter(rec, State.DRAINED, now, reason)
            acts.append(Action("event", "GpuFaultReturned", reason, warning=True))
        elif now - rec.since >= cfg.hold_down_s:
            new = _enter(rec, State.HEALTHY, now, "", owned=frozenset(), evicted=())
            acts += _release(rec.owned)
            acts.append(Action("event", "GpuNodeHealthy", "healthy for the hold-down time: released"))
    if new != rec:
        acts.append(Action("write-record"))
    return Decision(node.name, rec, new, tuple(acts)), refused


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
         now: float, cfg: Config) -> Step:
    """One sync over the fleet: every node advanced once. Confirmed suspects are promoted
    oldest first while the breaker and the rate limit allow; the rest stay suspect and are
    reported (nodes named in `breaker_tripped` / `rate_limited`)."""
    nodes = sorted(nodes, key=lambda n: n.name)
    gpu_nodes = sum(1 for n in nodes if n.gpu_node)
    limit = cfg.breaker_limit(gpu_nodes)
    records = {n.name: n.record for n in nodes}
    held = sum(1 for r in records.values() if r.state in HELD)
    # The order in which waiting suspects get a slot: the longest-suspected first.
    by_name = {n.name: n for n in nodes}
    queue = sorted((r.since, name) for name, r in records.items()
                   if r.state is State.SUSPECT and now - r.since >= cfg.suspect_for_s
                   and any(f.actionable for f in faults.get(name, ()))
                   and foreign_holder(by_name[name], cfg) is None)
    slots_breaker = max(0, limit - held)
    slots_rate = max(0, cfg.max_new_quarantines_per_sync)
    allowed: set[str] = set()
    tripped, limited = [], []
    why: dict[str, list] = {}
    for _, name in queue:
        if slots_breaker and slots_rate:
            allowed.add(name)
            slots_breaker -= 1
            slots_rate -= 1
        else:
            why[name] = tripped if not slots_breaker else limited
    decisions = []
    for n in nodes:
        if not n.gpu_node and records[n.name].state is State.HEALTHY:
            continue
        d, refused = step_node(n, faults.get(n.name, ()), pods_left.get(n.name, 0), now, cfg,
                               may_quarantine=n.name in allowed)
        if refused:
            why.get(n.name, tripped).append(n.name)
        decisions.append(d)
    return Step(tuple(decisions), limit, held, tuple(tripped), tuple(limited))
