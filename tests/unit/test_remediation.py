"""The remediation state machine (gpuvalues.operations.remediation), table-driven: every
transition, the circuit breaker, the rate limit, ownership, and resume from annotations.
Also the pure parts of signals (PromQL results -> faults) and drain (which pods go)."""
from __future__ import annotations

import pytest

from dataclasses import replace

from gpuvalues.operations import drain, signals
import json

from gpuvalues.operations.remediation import (ANN_RECORD, ANN_STATE, CONDITION_TYPE, TAINT_KEY, BadRecord, Config, Fault,
                                              NodeView, Record, State, foreign_holder, step, step_node)
from gpuvalues.planners.scheduling.inventory import Taint

XID = Fault("xid", "Xid 79 on GPU 0")
WARN = Fault("exporter-missing", "no series", actionable=False)
OURS = Taint(TAINT_KEY, "NoSchedule", "true")
GPU_PRESENT = Taint("nvidia.com/gpu", "NoSchedule", "present")
CFG = Config(suspect_for_s=10, hold_down_s=60, breaker_max_nodes=10, breaker_max_percent=100,
             max_new_quarantines_per_sync=10)
T0 = 1_000_000.0


def node(state: State = State.HEALTHY, since: float = T0, owned=(), taints=(GPU_PRESENT,), evicted=(), history=(),
         **kw) -> NodeView:
    rec = Record(state, since, "r", frozenset(owned), tuple(evicted), tuple(history))
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
    ("our taint removed by an operator: cancelled, clear only the condition",
     node(State.DRAINING, owned=HELD_OWNED, taints=(GPU_PRESENT,)), [XID], 2, T0 + 12, CFG, State.CANCELLED,
     ["event", "clear-condition", "write-record"]),
    ("cancelled stays while the same fault lasts: no re-quarantine",
     node(State.CANCELLED), [XID], 0, T0 + 12, CFG, State.CANCELLED, []),
    ("cancelled -> healthy once the fault clears, with evidence", node(State.CANCELLED), [], 0, T0 + 12, CFG,
     State.HEALTHY, ["event", "write-record"]),
    ("drain off: quarantined -> recovering when the fault clears",
     node(State.QUARANTINED, owned=HELD_OWNED, taints=(OURS,)), [], 0, T0 + 11, Config(drain=False),
     State.RECOVERING, ["event", "write-record"]),
    ("drain off: a returning fault sends recovering back to quarantined",
     node(State.RECOVERING, owned=HELD_OWNED, taints=(OURS,)), [XID], 0, T0 + 11, Config(drain=False),
     State.QUARANTINED, ["event", "write-record"]),
    ("draining -> recovering when the fault clears mid-drain (evictions stop)",
     node(State.DRAINING, owned=HELD_OWNED, taints=(OURS,)), [], 2, T0 + 12, CFG, State.RECOVERING,
     ["event", "write-record"]),
    ("draining -> drain-timed-out after drainTimeoutSeconds with pods left",
     node(State.DRAINING, owned=HELD_OWNED, taints=(OURS,)), [XID], 2, T0 + 100,
     Config(drain_timeout_s=100), State.DRAIN_TIMED_OUT, ["event", "write-record"]),
    ("drain-timed-out -> recovering when the fault clears",
     node(State.DRAIN_TIMED_OUT, owned=HELD_OWNED, taints=(OURS,)), [], 2, T0 + 101, CFG, State.RECOVERING,
     ["event", "write-record"]),
    ("recovering -> needs-attention after repeated quarantines (flap damping)",
     node(State.RECOVERING, owned=HELD_OWNED, taints=(OURS,), history=(T0 - 50, T0 - 20, T0 - 5)), [], 0, T0 + 60,
     CFG, State.NEEDS_ATTENTION, ["event", "write-record"]),
    ("needs-attention -> cancelled when an operator removes the taint",
     node(State.NEEDS_ATTENTION, owned=HELD_OWNED, taints=()), [], 0, T0 + 60, CFG, State.CANCELLED,
     ["event", "clear-condition", "write-record"]),
]

# No evidence of health (series missing, exporter not scraped, Prometheus down): no
# transition that assumes health; the state is kept and reported.
NO_DATA = [
    ("suspect stays suspect", node(State.SUSPECT), State.SUSPECT),
    ("drained stays drained", node(State.DRAINED, owned=HELD_OWNED, taints=(OURS,)), State.DRAINED),
    ("recovering goes back to drained (the hold-down restarts with evidence)",
     node(State.RECOVERING, owned=HELD_OWNED, taints=(OURS,)), State.DRAINED),
    ("draining keeps draining", node(State.DRAINING, owned=HELD_OWNED, taints=(OURS,)), State.DRAINING),
    ("cancelled stays cancelled", node(State.CANCELLED), State.CANCELLED),
    ("drain off: quarantined stays quarantined", node(State.QUARANTINED, owned=HELD_OWNED, taints=(OURS,)),
     State.QUARANTINED),
]


@pytest.mark.parametrize("case", NO_DATA, ids=[c[0] for c in NO_DATA])
def test_no_evidence_is_not_health(case):
    _, n, want = case
    cfg = replace(CFG, drain=n.record.state is not State.QUARANTINED)
    d, _ = step_node(n, [], 2, T0 + 500, cfg, evidence=False)
    assert d.after.state is want
    assert not {a.kind for a in d.actions} & {"remove-taint", "clear-condition"}
    if want is n.record.state and want is not State.DRAINING:
        assert any(a.reason == "NoHealthEvidence" for a in d.actions)
    # control: with evidence the same node moves on
    d2, _ = step_node(n, [], 2, T0 + 500, cfg, evidence=True)
    assert d2.after.state is not want or want is State.DRAINING


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
    for _, n, _faults, _pods, _now, _cfg, want, _k in TRANSITIONS:
        pairs.add((n.record.state, want))
    edges = {(State.HEALTHY, State.SUSPECT), (State.SUSPECT, State.HEALTHY), (State.SUSPECT, State.QUARANTINED),
             (State.QUARANTINED, State.DRAINING), (State.DRAINING, State.DRAINED), (State.DRAINED, State.RECOVERING),
             (State.RECOVERING, State.DRAINED), (State.RECOVERING, State.HEALTHY),
             (State.DRAINING, State.CANCELLED), (State.CANCELLED, State.HEALTHY), (State.QUARANTINED, State.RECOVERING),
             (State.DRAINING, State.RECOVERING), (State.DRAINING, State.DRAIN_TIMED_OUT),
             (State.DRAIN_TIMED_OUT, State.RECOVERING), (State.RECOVERING, State.NEEDS_ATTENTION),
             (State.NEEDS_ATTENTION, State.CANCELLED)}
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


def test_breaker_limit_rounds_up():
    assert Config(breaker_max_nodes=100, breaker_max_percent=50).breaker_limit(5) == 3
    assert Config(breaker_max_nodes=100, breaker_max_percent=50).breaker_limit(1) == 1   # a 1-node pool heals
    assert Config(breaker_max_nodes=100, breaker_max_percent=40).breaker_limit(5) == 2   # no float fuzz
    assert Config(breaker_max_nodes=100, breaker_max_percent=0).breaker_limit(5) == 0
    assert Config(breaker_max_nodes=3, breaker_max_percent=100).breaker_limit(10) == 3


def test_breaker_per_pool_and_latched():
    cfg = Config(breaker_max_nodes=10, breaker_max_percent=50, breaker_pool_label="pool", max_new_quarantines_per_sync=10)
    pools = ["a", "a", "b", "b"]
    nodes = [replace(n, labels=(("pool", p),)) for n, p in zip(fleet([State.SUSPECT, State.SUSPECT, State.SUSPECT,
                                                                      State.HEALTHY]), pools)]
    res = step(nodes, {n.name: [XID] for n in nodes[:3]}, {}, T0 + 1000, cfg)
    states = {d.node: d.after.state for d in res.decisions}
    # pool a (2 nodes, 50% = 1): one quarantined, one refused; pool b is not held back by a
    assert states == {"n0": State.QUARANTINED, "n1": State.SUSPECT, "n2": State.QUARANTINED, "n3": State.HEALTHY}
    assert res.breaker_tripped == ("n1",) and res.latched == {"a"}
    # latched: the held node of pool a is released, the breaker stays open until reset
    nodes2 = [replace(nodes[0], annotations=tuple(sorted(Record().annotations().items())), taints=()), nodes[1]]
    res2 = step(nodes2, {"n1": [XID]}, {}, T0 + 2000, cfg, latched=res.latched)
    assert {d.node: d.after.state for d in res2.decisions}["n1"] is State.SUSPECT and res2.latched == {"a"}
    res3 = step(nodes2, {"n1": [XID]}, {}, T0 + 2000, cfg, latched=frozenset())   # reset
    assert {d.node: d.after.state for d in res3.decisions}["n1"] is State.QUARANTINED


def test_forged_draining_records_cannot_drain_past_the_breaker():
    nodes = fleet([State.DRAINING] * 10)
    cfg = Config(breaker_max_nodes=2, breaker_max_percent=100)
    res = step(nodes, {n.name: [XID] for n in nodes}, {n.name: 1 for n in nodes}, T0 + 10, cfg)
    draining = [d.node for d in res.decisions if any(a.kind == "drain" for a in d.actions)]
    assert draining == ["n0", "n1"]      # the oldest two; the others are reported
    # the oldest two drained: their slots stay taken, the third still waits
    done = fleet([State.DRAINED, State.DRAINED] + [State.DRAINING] * 8, since=T0 + 1000)   # drained later
    done = [replace(n, annotations=tuple(sorted(Record(State.DRAINING, T0 + i, "", frozenset(HELD_OWNED)).annotations()
                                                .items()))) if i >= 2 else n for i, n in enumerate(done)]
    res = step(done, {n.name: [XID] for n in done}, {n.name: 1 for n in done}, T0 + 10, cfg)
    assert not [d for d in res.decisions if any(a.kind == "drain" for a in d.actions)]
    # forged without our taint: nothing drains at all, each is recorded as cancelled
    bare = [replace(n, taints=()) for n in nodes]
    res = step(bare, {n.name: [XID] for n in bare}, {n.name: 1 for n in bare}, T0 + 10, cfg)
    assert not [d for d in res.decisions if any(a.kind == "drain" for a in d.actions)]
    assert {d.after.state for d in res.decisions} == {State.CANCELLED}


def test_flap_damping_holds_a_node_that_keeps_failing():
    """A fault 4 s on / 20 s off: each episode is quarantined, but after flap_max the node
    is held (needs-attention) instead of being released and filled again."""
    cfg = Config(suspect_for_s=0, hold_down_s=4, breaker_max_nodes=10, breaker_max_percent=100,
                 max_new_quarantines_per_sync=10, flap_window_s=600, flap_max_quarantines=2)
    n, t, releases, quarantines = node(), T0, 0, 0
    for sec in range(0, 120, 2):
        fault = [XID] if sec % 24 < 4 else []
        res = step([n], {"n1": fault}, {"n1": 0}, t + sec, cfg)
        [d] = res.decisions
        quarantines += d.after.state is State.QUARANTINED and d.before.state is State.SUSPECT
        releases += d.after.state is State.HEALTHY and d.before.state is State.RECOVERING
        taints = (OURS,) if "taint" in d.after.owned else ()
        n = NodeView("n1", taints=taints, annotations=tuple(sorted(d.after.annotations().items())))
    assert n.record.state is State.NEEDS_ATTENTION
    assert (quarantines, releases) == (2, 1)


def test_invalid_record_skips_that_node_only():
    bad = [NodeView("bad1", annotations=((ANN_STATE, "drained"), (ANN_RECORD, '{"owned": null}'))),
           NodeView("bad2", annotations=((ANN_STATE, "drained"), (ANN_RECORD, '{"since": ' + "9" * 400 + "}"))),
           NodeView("bad3", annotations=((ANN_STATE, "exploded"),))]
    good = NodeView("good")
    res = step(bad + [good], {n: [XID] for n in ("bad1", "bad2", "bad3", "good")}, {}, T0, CFG)
    by = {d.node: d for d in res.decisions}
    assert res.invalid == ("bad1", "bad2", "bad3")
    for name in res.invalid:
        assert [a.reason for a in by[name].actions] == ["InvalidRemediationRecord"] and not by[name].changed
    assert by["good"].after.state is State.SUSPECT


def test_reasons_are_bounded():
    huge = Fault("condition", "x" * 300_000)
    d, _ = step_node(node(), [huge] * 50, 0, T0, CFG)
    assert len(d.after.reason) <= 1024
    assert all(len(a.message) <= 1024 for a in d.actions)
    assert len(json.dumps(d.after.annotations())) < 4096


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


@pytest.mark.parametrize("ann", [{ANN_STATE: "bogus"}, {ANN_STATE: "draining", ANN_RECORD: "not json"},
                                 {ANN_STATE: "drained", ANN_RECORD: "[1]"},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"owned": ["cordon", "taint"]}'},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"since": "x"}'},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"owned": null}'},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"since": NaN}'},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"since": 1e400}'},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"evicted": [1]}'},
                                 {ANN_STATE: "drained", ANN_RECORD: '{"history": [true]}'},
                                 {ANN_STATE: "drained", ANN_RECORD: "[" * 100_000}])
def test_unreadable_annotations_are_refused_with_a_reason(ann):
    with pytest.raises(BadRecord):
        Record.parse(ann)
    assert Record.from_annotations(ann) is None
    assert NodeView("n", annotations=tuple(ann.items())).record_error


def test_condition_type_is_ours():
    assert CONDITION_TYPE.startswith("GpuInference")


# --- signals: PromQL results -> faults ---------------------------------------------------------

def test_queries_cover_each_enabled_signal():
    q = signals.SignalConfig().queries()
    assert set(q) == {"xid", "dbe", "row-remap", "nvlink", "presence"}
    assert 'xid=~"46|48|64|74|79|95|119|120"' in q["xid"]
    assert not set(signals.CRITICAL_XIDS) & set(signals.APPLICATION_XIDS)
    off = signals.SignalConfig(enabled=frozenset({"dbe"})).queries()
    assert set(off) == {"dbe", "presence"}     # evidence of health is always read


def test_queries_select_the_exporter_job_and_escape():
    cfg = signals.SignalConfig(exporter_job='dc"gm\\', exporter_namespace="gpu\nops")
    for q in cfg.queries().values():
        assert 'job="dc\\"gm\\\\"' in q
        assert 'and on (instance) (up{job="dc\\"gm\\\\",namespace="gpu\\nops"} == 1)' in q
    assert signals.promql_string('a"} or vector(1) #') == '"a\\"} or vector(1) #"'
    for bad in ({"node_label": 'Hostname"'}, {"node_label": "1x"}, {"window": "5m]"}, {"window": ""}):
        with pytest.raises(ValueError):
            signals.SignalConfig(**bad)


def test_faults_from_results():
    cfg = signals.SignalConfig()
    res = {"xid": [{"metric": {"Hostname": "a", "gpu": "3", "xid": "79"}, "value": [0, "1"]}],
           "dbe": [{"metric": {"Hostname": "b", "gpu": "0"}, "value": [0, "2"]}],
           "row-remap": [], "nvlink": [{"metric": {"gpu": "1"}, "value": [0, "1"]}],   # no node label: ignored
           "presence": [{"metric": {"Hostname": "a"}, "value": [0, "8"]}, {"metric": {"Hostname": "b"}, "value": [0, "8"]}]}
    out = signals.faults_from_results(res, cfg, ["a", "b", "c"])
    assert [f.kind for f in out["a"]] == ["xid"] and "Xid 79 on GPU 3" in out["a"][0].detail
    assert [f.kind for f in out["b"]] == ["dbe"]
    assert [(f.kind, f.actionable) for f in out["c"]] == [("exporter-missing", False)]
    act = signals.faults_from_results(res, signals.SignalConfig(exporter_missing_acts=True), ["c"])
    assert act["c"][0].actionable
    assert signals.evidence_from_results(res, cfg, ["a", "b", "c"]) == {"a": True, "b": True, "c": False}
    assert signals.evidence_from_results(None, cfg, ["a"]) == {"a": False}     # Prometheus down: no evidence


def test_both_hostname_spellings():
    """dcgm-exporter renamed Hostname to hostname (NVIDIA/dcgm-exporter#655, d5e5f51)."""
    cfg = signals.SignalConfig()
    res = {"xid": [{"metric": {"hostname": "new", "gpu": "0", "xid": "48"}, "value": [0, "1"]},
                   {"metric": {"Hostname": "old", "gpu": "0", "xid": "48"}, "value": [0, "1"]}],
           "presence": [{"metric": {"hostname": "new"}, "value": [0, "1"]}]}
    out = signals.faults_from_results(res, cfg, ["new", "old"])
    assert [f.kind for f in out["new"]] == ["xid"] and [f.kind for f in out["old"]] == ["exporter-missing", "xid"]
    assert "Hostname, hostname" in cfg.queries()["presence"]
    assert "by (node)" in signals.SignalConfig(node_label="node").queries()["presence"]


@pytest.mark.parametrize("metric,value", [
    ({"xid": "0"}, "1"), ({"xid": "-79"}, "1"), ({"xid": "79.0"}, "1"), ({"xid": "13"}, "1"),   # not a critical Xid
    ({"xid": "79"}, "0"), ({"xid": "79"}, "NaN"), ({"xid": "79"}, "-1"), ({"xid": "79"}, "+Inf"), ({"xid": "79"}, "x"),
])
def test_values_have_metric_semantics(metric, value):
    res = {"xid": [{"metric": {"Hostname": "a", "gpu": "0", **metric}, "value": [0, value]}]}
    assert signals.faults_from_results(res, signals.SignalConfig(), ["a"]) == {}
    # control: the same series with a real fault is one
    ok = {"xid": [{"metric": {"Hostname": "a", "gpu": "0", "xid": "79"}, "value": [0, "2"]}]}
    assert [f.kind for f in signals.faults_from_results(ok, signals.SignalConfig(), ["a"])["a"]] == ["xid"]


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
