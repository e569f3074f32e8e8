"""The remediation state machine (gpuvalues.operations.remediation), table-driven: every
transition, the circuit breaker, the rate limit, ownership, and resume from annotations.
Also the pure parts of signals (PromQL results -> faults) and drain (which pods go)."""
from __future__ import annotations

import pytest

from gpuvalues.operations import drain, signals
from gpuvalues.operations.remediation import (ANN_RECORD, ANN_STATE, CONDITION_TYPE, TAINT_KEY, Config, Fault,
                                              NodeView, Record, State, Taint, foreign_holder, step, step_node)

XID = Fault("xid", "Xid 79 on GPU 0")
WARN = Fault("exporter-missing", "no series", actionable=False)
OURS = Taint(TAINT_KEY, "NoSchedule", "true")
GPU_PRESENT = Taint("nvidia.com/gpu", "NoSchedule", "present")
CFG = Config(suspect_for_s=10, hold_down_s=60, breaker_max_nodes=10, breaker_max_percent=100,
             max_new_quarantines_per_sync=10)
T0 = 1_000_000.0


def node(state: State = State.HEALTHY, since: float = T0, owned=(), taints=(GPU_PRESENT,), evicted=(), **kw) -> NodeView:
    rec = Record(state, since, "r", frozenset(owned), tuple(evicted))
    ann = tuple(sorted({**rec.annotations(), **dict(kw.pop("annotations", ()))}.items()))
    return NodeView("n1", taints=tuple(taints), annotations=ann, **kw)


HELD_OWNED = ("taint", "condition")

# (id, node, faults, pods_left, now, cfg, expected state, expected action kinds (subset, in order))
TRANSITIONS = [
    ("healthy stays healthy", node(), [], 0, T0 + 5, CFG, State.HEALTHY, []),
    ("healthy -> suspect on a fault", node(), [XID], 0, T0 + 5, CFG, State.SUSPECT, ["event", "write-record"]),
    ("warn-only signal: event, no transition", node(), [WARN], 0, T0 + 5, CFG, State.HEALTHY, ["event"]),
    ("suspect -> healthy when the fault goes (transient)", node(State.SUSPECT), [], 0, T0 + 5, CFG,
     State.HEALTHY, ["event", "write-record"]),
    ("suspect stays suspect before suspectFor", node(State.SUSPECT), [XID], 0, T0 + 9, CFG, State.SUSPECT, []),
    ("suspect -> quarantined once confirmed", node(State.SUSPECT), [XID], 0, T0 + 10, CFG, State.QUARANTINED,
     ["add-taint", "set-condition", "event", "write-record"]),
    ("quarantined -> draining", node(State.QUARANTINED, owned=HELD_OWNED, taints=(GPU_PRESENT, OURS)), [XID], 3,
     T0 + 11, CFG, State.DRAINING, ["event", "write-record"]),
    ("quarantined stays when drain is off", node(State.QUARANTINED, owned=HELD_OWNED, taints=(OURS,)), [XID], 3,
     T0 + 11, Config(drain=False), State.QUARANTINED, []),
    ("draining evicts while pods are left", node(State.DRAINING, owned=HELD_OWNED, taints=(OURS,)), [XID], 2,
     T0 + 12, CFG, State.DRAINING, ["drain"]),
    ("draining -> drained when no pod is left", node(State.DRAINING, owned=HELD_OWNED, taints=(OURS,)), [XID], 0,
     T0 + 12, CFG, State.DRAINED, ["event", "write-record"]),
    ("draining -> drained adds the reset label when asked", node(State.DRAINING, owned=HELD_OWNED, taints=(OURS,)),
     [XID], 0, T0 + 12, Config(reset_label=True), State.DRAINED, ["event", "add-label", "write-record"]),
    ("drained stays while the fault persists", node(State.DRAINED, owned=HELD_OWNED, taints=(OURS,)), [XID], 0,
     T0 + 13, CFG, State.DRAINED, []),
    ("drained -> recovering when signals clear", node(State.DRAINED, owned=HELD_OWNED, taints=(OURS,)), [], 0,
     T0 + 13, CFG, State.RECOVERING, ["event", "write-record"]),
    ("drained -> recovering removes our reset label", node(State.DRAINED, owned=HELD_OWNED + ("label",),
                                                           taints=(OURS,)), [], 0, T0 + 13, CFG,
     State.RECOVERING, ["event", "remove-label", "write-record"]),
    ("recovering stays during the hold-down", node(State.RECOVERING, owned=HELD_OWNED, taints=(OURS,)), [], 0,
     T0 + 59, CFG, State.RECOVERING, []),
    ("recovering -> drained when the fault returns", node(State.RECOVERING, owned=HELD_OWNED, taints=(OURS,)),
     [XID], 0, T0 + 30, CFG, State.DRAINED, ["event", "write-record"]),
    ("recovering -> healthy after the hold-down: removes what it owns",
     node(State.RECOVERING, owned=HELD_OWNED, taints=(OURS,)), [], 0, T0 + 60, CFG, State.HEALTHY,
     ["remove-taint", "clear-condition", "event", "write-record"]),
    ("our taint removed by an operator: stop, clear only the condition",
     node(State.DRAINING, owned=HELD_OWNED, taints=(GPU_PRESENT,)), [XID], 2, T0 + 12, CFG, State.HEALTHY,
     ["event", "clear-condition", "write-record"]),
]


@pytest.mark.parametrize("case", TRANSITIONS, ids=[c[0] for c in TRANSITIONS])
def test_transition(case):
    _, n, faults, pods, now, cfg, want, kinds = case
    d, _ = step_node(n, faults, pods, now, cfg)
    assert d.after.state is want
    got = [a.kind for a in d.actions]
    it = iter(got)
    assert all(k in it for k in kinds), f"{got} does not contain {kinds} in order"
    if want is d.before.state and not kinds:
        assert got == [] and d.after == d.before
    # every change is persisted, nothing unchanged is written
    assert ("write-record" in got) == (d.after != d.before)


def test_every_state_and_transition_is_covered():
    pairs = set()
    for _, n, faults, pods, now, cfg, want, _k in TRANSITIONS:
        pairs.add((n.record.state, want))
    edges = {(State.HEALTHY, State.SUSPECT), (State.SUSPECT, State.HEALTHY), (State.SUSPECT, State.QUARANTINED),
             (State.QUARANTINED, State.DRAINING), (State.DRAINING, State.DRAINED), (State.DRAINED, State.RECOVERING),
             (State.RECOVERING, State.DRAINED), (State.RECOVERING, State.HEALTHY)}
    assert edges <= pairs, edges - pairs


def test_healthy_only_owned_things_released():
    # The condition was never ours (owned has only the taint): only the taint goes.
    n = node(State.RECOVERING, owned=("taint",), taints=(OURS,))
    d, _ = step_node(n, [], 0, T0 + 60, CFG)
    kinds = [a.kind for a in d.actions]
    assert "remove-taint" in kinds and "clear-condition" not in kinds
    assert d.after.owned == frozenset()


# --- ownership: never act on a node someone else holds ---------------------------------------

FOREIGN = [
    ("cordoned by an operator", dict(unschedulable=True), "cordoned"),
    ("another taint", dict(taints=(GPU_PRESENT, Taint("example.com/maintenance", "NoSchedule"))), "taint"),
    ("NoExecute lifecycle taint", dict(taints=(Taint("node.kubernetes.io/unreachable", "NoExecute"),)), "taint"),
    ("NVSentinel annotation", dict(annotations=(("quarantineHealthEvent", "{}"),)), "NVSentinel"),
    ("NVSentinel state label", dict(labels=(("dgxc.nvidia.com/nvsentinel-state", "draining"),)), "NVSentinel"),
    ("DRA driver taint", dict(taints=(Taint("gpu.nvidia.com/unhealthy", "NoSchedule"),)), "DRA"),
]


@pytest.mark.parametrize("case", FOREIGN, ids=[c[0] for c in FOREIGN])
def test_foreign_node_is_reported_never_touched(case):
    _, kw, who = case
    for state in (State.HEALTHY, State.SUSPECT):
        n = node(state, **kw)
        assert who in foreign_holder(n, CFG)
        d, _ = step_node(n, [XID], 0, T0 + 100, CFG)
        kinds = {a.kind for a in d.actions}
        assert not kinds & {"add-taint", "remove-taint", "set-condition", "clear-condition", "drain", "add-label"}
        assert d.after.state is State.HEALTHY
        assert any(a.reason == "HeldByOther" for a in d.actions)


def test_prefer_no_schedule_and_ignored_taints_are_not_foreign():
    n = node(taints=(GPU_PRESENT, Taint("example.com/soft", "PreferNoSchedule")))
    assert foreign_holder(n, CFG) is None
    assert foreign_holder(node(taints=(Taint("x/y", "NoSchedule"),)), Config(ignored_taints=("x/y",))) is None


def test_operator_cordon_while_we_hold_the_node_is_kept():
    # We quarantined (taint); then an operator cordoned. Recovery removes only our taint:
    # the decision has no uncordon action at all (the machine never cordons or uncordons).
    n = node(State.RECOVERING, owned=HELD_OWNED, taints=(OURS,), unschedulable=True)
    d, _ = step_node(n, [], 0, T0 + 60, CFG)
    assert d.after.state is State.HEALTHY
    assert {a.kind for a in d.actions} == {"remove-taint", "clear-condition", "event", "write-record"}


# --- fleet: breaker and rate limit -----------------------------------------------------------

def fleet(states: list[State], since: float = T0) -> list[NodeView]:
    out = []
    for i, s in enumerate(states):
        rec = Record(s, since + i, "", frozenset(HELD_OWNED) if s not in (State.HEALTHY, State.SUSPECT) else frozenset())
        out.append(NodeView(f"n{i}", taints=(OURS,) if rec.owned else (), annotations=tuple(sorted(rec.annotations().items()))))
    return out


BREAKER = [
    # (id, states, faulty indices, cfg, expected quarantined now, expected tripped, expected rate-limited)
    ("3 of 5 fail, 40% of 5 = 2", [State.SUSPECT] * 3 + [State.HEALTHY] * 2, [0, 1, 2],
     Config(breaker_max_nodes=10, breaker_max_percent=40, max_new_quarantines_per_sync=10), 2, 1, 0),
    ("count limit wins over percent", [State.SUSPECT] * 4 + [State.HEALTHY] * 6, [0, 1, 2, 3],
     Config(breaker_max_nodes=1, breaker_max_percent=50, max_new_quarantines_per_sync=10), 1, 3, 0),
    ("already held nodes use the budget", [State.DRAINED, State.SUSPECT, State.SUSPECT, State.HEALTHY], [0, 1, 2],
     Config(breaker_max_nodes=2, breaker_max_percent=100, max_new_quarantines_per_sync=10), 1, 1, 0),
    ("rate limit: one new quarantine per sync", [State.SUSPECT] * 3 + [State.HEALTHY] * 7, [0, 1, 2],
     Config(breaker_max_nodes=10, breaker_max_percent=100, max_new_quarantines_per_sync=1), 1, 0, 2),
    ("breaker at zero nodes: report only", [State.SUSPECT, State.HEALTHY], [0],
     Config(breaker_max_nodes=0, breaker_max_percent=100), 0, 1, 0),
]


@pytest.mark.parametrize("case", BREAKER, ids=[c[0] for c in BREAKER])
def test_breaker(case):
    _, states, faulty, cfg, quarantined, tripped, limited = case
    nodes = fleet(states)
    faults = {f"n{i}": [XID] for i in faulty}
    res = step(nodes, faults, {}, T0 + 1000, cfg)
    newly = [d.node for d in res.decisions if d.after.state is State.QUARANTINED]
    assert len(newly) == quarantined
    assert len(res.breaker_tripped) == tripped
    assert len(res.rate_limited) == limited
    # the oldest suspects go first
    suspects = sorted((n for n in nodes if n.record.state is State.SUSPECT), key=lambda n: n.record.since)
    assert newly == [n.name for n in suspects[:quarantined]]
    held = sum(1 for d in res.decisions if d.after.state in (State.QUARANTINED, State.DRAINING, State.DRAINED,
                                                             State.RECOVERING))
    assert held <= res.breaker_limit
    refused = [d for d in res.decisions if d.node in res.breaker_tripped]
    assert all(d.after.state is State.SUSPECT for d in refused)
    assert all(any(a.reason == "CircuitBreakerOpen" for a in d.actions) for d in refused)


def test_breaker_limit_rounds_down():
    assert Config(breaker_max_nodes=100, breaker_max_percent=50).breaker_limit(5) == 2
    assert Config(breaker_max_nodes=100, breaker_max_percent=50).breaker_limit(1) == 0
    assert Config(breaker_max_nodes=3, breaker_max_percent=100).breaker_limit(10) == 3


def test_unconfirmed_suspects_do_not_take_breaker_slots():
    nodes = fleet([State.SUSPECT, State.SUSPECT])
    nodes[0] = NodeView("n0", annotations=tuple(sorted(Record(State.SUSPECT, T0 + 995).annotations().items())))
    cfg = Config(suspect_for_s=10, breaker_max_nodes=1, breaker_max_percent=100)
    res = step(nodes, {"n0": [XID], "n1": [XID]}, {}, T0 + 1000, cfg)
    states = {d.node: d.after.state for d in res.decisions}
    assert states == {"n0": State.SUSPECT, "n1": State.QUARANTINED}
    assert res.breaker_tripped == ()


def test_non_gpu_nodes_are_ignored():
    res = step([NodeView("cpu", gpu_node=False)], {"cpu": [XID]}, {}, T0, CFG)
    assert res.decisions == ()


# --- resume: the record round-trips through annotations ---------------------------------------

def test_record_round_trip_and_resume():
    rec = Record(State.DRAINING, T0, "xid: Xid 79", frozenset({"taint", "condition"}), ("uid-1", "uid-2"))
    ann = rec.annotations()
    assert ann[ANN_STATE] == "draining"
    assert Record.from_annotations(ann) == rec
    # A restarted controller sees the same node and keeps draining (no new quarantine).
    n = NodeView("n1", taints=(OURS,), annotations=tuple(sorted(ann.items())))
    d, _ = step_node(n, [XID], 2, T0 + 1, CFG)
    assert d.after.state is State.DRAINING and [a.kind for a in d.actions] == ["drain"]
    assert d.after.evicted == ("uid-1", "uid-2")


@pytest.mark.parametrize("ann", [{}, {ANN_STATE: "bogus"}, {ANN_STATE: "draining", ANN_RECORD: "not json"},
                                 {ANN_STATE: "drained", ANN_RECORD: "[1]"},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"owned": ["cordon", "taint"], "since": "x"}'}])
def test_unreadable_annotations_are_safe(ann):
    rec = Record.from_annotations(ann)
    assert rec.owned <= {"taint"}
    assert isinstance(rec.since, float)


def test_condition_type_is_ours():
    assert CONDITION_TYPE.startswith("GpuInference")


# --- signals: PromQL results -> faults ---------------------------------------------------------

def test_queries_cover_each_enabled_signal():
    q = signals.SignalConfig().queries()
    assert set(q) == {"xid", "dbe", "row-remap", "nvlink", "exporter"}
    assert 'xid=~"46|48|64|74|79|95|119|120"' in q["xid"]
    assert not set(signals.CRITICAL_XIDS) & set(signals.APPLICATION_XIDS)
    off = signals.SignalConfig(enabled=frozenset({"dbe"})).queries()
    assert set(off) == {"dbe"}


def test_faults_from_results():
    cfg = signals.SignalConfig()
    res = {"xid": [{"metric": {"Hostname": "a", "gpu": "3", "xid": "79"}, "value": [0, "1"]}],
           "dbe": [{"metric": {"Hostname": "b", "gpu": "0"}, "value": [0, "2"]}],
           "row-remap": [], "nvlink": [{"metric": {"gpu": "1"}, "value": [0, "1"]}],   # no node label: ignored
           "exporter": [{"metric": {"Hostname": "a"}, "value": [0, "8"]}, {"metric": {"Hostname": "b"}, "value": [0, "8"]}]}
    out = signals.faults_from_results(res, cfg, ["a", "b", "c"])
    assert [f.kind for f in out["a"]] == ["xid"] and "Xid 79 on GPU 3" in out["a"][0].detail
    assert [f.kind for f in out["b"]] == ["dbe"]
    assert [(f.kind, f.actionable) for f in out["c"]] == [("exporter-missing", False)]
    act = signals.faults_from_results(res, signals.SignalConfig(exporter_missing_acts=True), ["c"])
    assert act["c"][0].actionable


def test_node_faults():
    cfg = signals.SignalConfig(conditions=("NVLinkDown",))
    n = {"status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64"}, "allocatable": {"nvidia.com/gpu": "7"},
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "NVLinkDown", "status": "True",
                                                                            "reason": "NPD"},
                                   {"type": "GpuUnhealthy", "status": "True"}]}}
    kinds = [f.kind for f in signals.node_faults(n, cfg)]
    assert kinds == ["allocatable", "condition"]
    n["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    n["status"]["conditions"][1]["status"] = "False"
    assert signals.node_faults(n, cfg) == []
    assert signals.node_faults(n, signals.SignalConfig(enabled=frozenset())) == []


# --- drain: which pods go ------------------------------------------------------------------

def pod(**kw):
    p = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", **kw.pop("meta", {})},
         "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
         "status": {"phase": "Running"}}
    p["spec"].update(kw.pop("spec", {}))
    p["status"].update(kw.pop("status", {}))
    return p


@pytest.mark.parametrize("p,why", [
    (pod(), None),
    (pod(meta={"deletionTimestamp": "2026-01-01T00:00:00Z"}), "terminating"),
    (pod(status={"phase": "Succeeded"}), "finished"),
    (pod(meta={"annotations": {drain.MIRROR_ANNOTATION: "x"}}), "mirror pod"),
    (pod(meta={"ownerReferences": [{"kind": "DaemonSet", "name": "dp", "controller": True}]}), "DaemonSet pod"),
    (pod(meta={"ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]}), None),
])
def test_skip_reason(p, why):
    assert drain.skip_reason(p) == why


def test_is_gpu_pod():
    assert drain.is_gpu_pod(pod())
    assert drain.is_gpu_pod(pod(spec={"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu"}]}))
    assert not drain.is_gpu_pod(pod(spec={"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}))


@pytest.mark.parametrize("ann,want", [
    ({}, drain.NamespacePolicy("Evict")),
    ({drain.DRAIN_MODE_ANNOTATION: "Skip"}, drain.NamespacePolicy("Skip")),
    ({drain.DRAIN_MODE_ANNOTATION: "DeleteAfterTimeout", drain.DELETE_AFTER_ANNOTATION: "120"},
     drain.NamespacePolicy("DeleteAfterTimeout", 120.0)),
    ({drain.DRAIN_MODE_ANNOTATION: "Delete"}, drain.NamespacePolicy("Evict")),   # unknown: never delete
])
def test_namespace_policy(ann, want):
    assert drain.NamespacePolicy.from_namespace({"metadata": {"annotations": ann}}) == want


def test_backoff_doubles_and_caps():
    t = [0.0]
    b = drain.Backoff(base=1, cap=5, clock=lambda: t[0])
    assert [b.failed("p") for _ in range(5)] == [1, 2, 4, 5, 5]
    assert not b.ready("p")
    t[0] = 100
    assert b.ready("p")
    b.forget("p")
    assert b.failed("p") == 1


def test_owners_annotation():
    n = {"metadata": {"annotations": {drain.OWNER_ANNOTATION: '{"a": ["cordon"], "b": ["taint:x"]}'}}}
    assert drain.owners(n) == {"a": ["cordon"], "b": ["taint:x"]}
    assert drain.owners({"metadata": {"annotations": {drain.OWNER_ANNOTATION: "garbage"}}}) == {}
    assert drain._with_owner(n, "a", "cordon", False) == '{"b": ["taint:x"]}'
