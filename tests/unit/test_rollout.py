"""Rollout wave planning and the pure helpers (gpuvalues.operations.rollout); the executor
runs against the real control plane in tests/e2e/test_rollout.py."""
from __future__ import annotations

import json
import re
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvalues import cli
from gpuvalues.operations import rollout
from gpuvalues.operations.rollout import NodeChange, plan_waves
from tests.conftest import write_kubeconfig


def ch(node, pool="a"):
    return NodeChange(node, pool, "old", "new", {"nvidia.com/mig-1g.10gb": 7})


def test_waves_respect_pool_limit_and_budgets():
    changes = [ch("n1"), ch("n2"), ch("n3", "b"), ch("n4", "b")]
    pods = {"n1": {"ns/web": 1}, "n2": {"ns/web": 1}, "n3": {"ns/web": 1}, "n4": {}}
    waves = plan_waves(changes, pods, {"ns/web": 1}, max_unavailable_per_pool=2)
    # ns/web allows one disruption: never two of its pods' nodes in one wave
    for w in waves:
        assert sum(pods[c.node].get("ns/web", 0) for c in w.changes) <= 1
        assert max(sum(1 for c in w.changes if c.pool == p) for p in "ab") <= 2
    assert sorted(c.node for w in waves for c in w.changes) == ["n1", "n2", "n3", "n4"]
    assert waves[0].changes[0].node == "n4"          # no pods: first
    assert len(waves) == 3


def test_pool_limit_one_by_default():
    waves = plan_waves([ch("n1"), ch("n2"), ch("n3")], {}, {})
    assert [len(w.changes) for w in waves] == [1, 1, 1]
    waves = plan_waves([ch("n1"), ch("n2"), ch("n3")], {}, {}, max_unavailable_per_pool=3, max_nodes_per_wave=2)
    assert [len(w.changes) for w in waves] == [2, 1]


def test_node_over_its_budget_goes_alone():
    waves = plan_waves([ch("n1"), ch("n2")], {"n1": {"ns/db": 3}, "n2": {}}, {"ns/db": 1},
                       max_unavailable_per_pool=5)
    assert [[c.node for c in w.changes] for w in waves] == [["n2"], ["n1"]]
    assert waves[1].pods == 3


def test_pods_without_a_budget_do_not_limit_waves():
    waves = plan_waves([ch("n1"), ch("n2")], {"n1": {"ns/(no budget)": 2}, "n2": {"ns/(no budget)": 2}}, {},
                       max_unavailable_per_pool=2)
    assert len(waves) == 1


def test_expected_resources_mixed_strategy_names():
    assert rollout.expected_resources([{"1g.10gb": 4, "3g.40gb": 1}, {"1g.10gb+me": 1}, None, {}]) == {
        "nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-1g.10gb.me": 1, "nvidia.com/mig-3g.40gb": 1}


def test_advertises_checks_exact_mig_resources():
    node = {"status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "0", "cpu": "8"}}}
    assert rollout.advertises(node, {"nvidia.com/mig-1g.10gb": 7})
    assert not rollout.advertises(node, {"nvidia.com/mig-1g.10gb": 6})
    assert not rollout.advertises(node, {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-7g.80gb": 1})


@pytest.mark.parametrize("selector, labels, want", [
    ({"matchLabels": {"app": "x"}}, {"app": "x", "b": "1"}, True),
    ({"matchLabels": {"app": "x"}}, {"app": "y"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, {"tier": "b"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {"tier": "a"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
    ({}, {"a": "b"}, True),          # an empty selector selects every pod (policy/v1)
    (None, {"a": "b"}, False),
])
def test_selector_semantics(selector, labels, want):
    assert rollout._selector_matches(selector, labels) is want


def test_changes_from_replan_and_dry_run_text(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)   # a dry run without a cluster: no pods read
    from gpuvalues.planners.mig.milp.model import ModelDemand, PlanPool
    from gpuvalues.planners.mig.replan import replan
    from gpuvalues.planners.mig.replan import CurrentLayout, CurrentNode
    cur = CurrentLayout((CurrentNode("a", "p", "all-7g", ({"7g.80gb": 1},), pods=1),
                         CurrentNode("b", "p", "all-7g", ({"7g.80gb": 1},), pods=1)))
    r = replan([ModelDemand("m", replicas=3, memory_gb=8), ModelDemand("big", replicas=1, memory_gb=60)],
               [PlanPool("p", "A100-80GB", 1, 2)], cur)
    changes = rollout.changes_from_replan(json.loads(json.dumps(r.to_dict())))
    assert [c.node for c in changes] == list(r.nodes_changed) and len(changes) == 1
    (c,) = changes
    assert c.from_config == "all-7g" and sum(c.resources.values()) >= 3
    text = rollout.describe(plan_waves(changes, {}, {}))
    assert f"{c.node} (p): all-7g -> {c.to}" in text and "nvidia.com/mig.config.state=success" in text
    f = tmp_path / "replan.json"
    f.write_text(json.dumps(r.to_dict()))
    from gpuvalues import cli
    assert cli.main(["rollout", str(f), "--dry-run"]) == 0
    assert "wave 1: 1 node(s)" in capsys.readouterr().out


def test_changes_from_replan_rejects_other_input():
    with pytest.raises(rollout.RolloutError, match="not a re-plan result"):
        rollout.changes_from_replan({"gpus_used": 3})


# --- the input, checked whole and offline before the first action (issue 24) ------------------


BASE = {
    "gpus_used": 3, "nodes_changed": 2, "solve_seconds": 0.01,
    "changes": [{"node": "gpu-a", "from": "all-1g", "to": "mixed"},
                {"node": "gpu-b.pool.example", "from": None, "to": "all-3g"}],
    "node_configs": {"gpu-a": "mixed", "gpu-b.pool.example": "all-3g"},
    "plan": {"pools": [{"name": "a100", "gpu": "NVIDIA A100-SXM4-80GB", "node_groups": [
        {"config": "mixed", "count": 1, "devices": [{"3g.40gb": 1, "1g.10gb": 4}, None]},
        {"config": "all-3g", "count": 1, "devices": [{"3g.40gb": 2}, {"3g.40gb": 2}]}]}],
        "mig_parted_config": {"version": "v1", "mig-configs": {
            "mixed": [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "1g.10gb": 4}},
                      {"devices": [1], "mig-enabled": False}],
            "all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}}},
}


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No cluster reachable and none importable: any kubeconfig read or API call fails the test
    (the kubernetes package cannot be imported; $KUBECONFIG names a server nothing listens on)."""
    kc = write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1", token=None)
    monkeypatch.setenv("KUBECONFIG", str(kc))
    for mod in [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    return tmp_path


def _write(tmp_path, data, name="replan.json"):
    f = tmp_path / name
    f.write_text(json.dumps(data, indent=1) if not isinstance(data, str) else data)
    return f


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    lines = [x for x in err if x.startswith("gpuvalues: error:")]
    assert len(lines) == 1 and "Traceback" not in "".join(err), err
    return lines[0]


def test_base_replan_is_valid_and_dry_run_never_touches_the_cluster(offline, capsys):
    f = _write(offline, BASE)
    assert cli.main(["rollout", str(f), "--dry-run"]) == 0
    out = capsys.readouterr()
    assert "wave 2: 1 node(s)" in out.out and "gpu-b.pool.example (a100): (unconfigured) -> all-3g" in out.out
    assert "the cluster is not contacted" in out.err
    assert cli.main(["rollout", str(f), "--dry-run", "--kubeconfig", str(offline / "absent")]) == 0


def test_a_bad_to_label_is_refused_before_anything_runs(offline, capsys):
    """Today's code cordoned and evicted, then failed with 422 and a traceback. Now: refused
    offline, placed at the value (line:col computed here from the text, not by the code)."""
    bad = json.loads(json.dumps(BASE))
    bad["changes"][0]["to"] = "mixed 3g!"
    f = _write(offline, bad)
    text = f.read_text()
    i = text.index('"mixed 3g!"')
    line, col = text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i)
    assert cli.main(["rollout", str(f)]) == 2           # not a dry run: still nothing contacted
    msg = _one_error(capsys)
    assert msg.startswith(f"gpuvalues: error: {f}:{line}:{col}: changes[0].to: 'mixed 3g!' cannot be") and \
        msg.endswith("[GV037]"), msg


@pytest.mark.parametrize("mutate, field, code", [
    (lambda d: d["changes"][1].update(node="GPU_B"), "changes[1].node", "GV037"),
    (lambda d: d["changes"][1].update(node="n" * 254), "changes[1].node", "GV037"),
    (lambda d: d["changes"][1].update(node="gpu-a"), "changes[1].node", "GV046"),        # listed twice
    (lambda d: d["changes"][0].update(to="all-7g"), "changes[0].to", "GV046"),           # not in the plan
    (lambda d: d["changes"][0].update({"from": "x" * 64}), "changes[0].from", "GV037"),
    (lambda d: d["plan"]["pools"][0]["node_groups"][0].update(devices={"3g.40gb": 1}),
     "plan.pools[0].node_groups[0].devices", "GV046"),
    (lambda d: d["plan"]["pools"][0]["node_groups"][0]["devices"][0].update({"3g.40gb": 8}),
     "plan.pools[0].node_groups[0].devices[0].3g.40gb", "GV046"),
    (lambda d: d["plan"]["pools"][0]["node_groups"][0]["devices"][0].update({"3g.40gb": 1.5}),
     "plan.pools[0].node_groups[0].devices[0].3g.40gb", "GV046"),
    (lambda d: d["plan"]["pools"][0]["node_groups"][0]["devices"][0].update({"9z.1tb": 1}),
     "plan.pools[0].node_groups[0].devices[0].9z.1tb", "GV046"),
    (lambda d: d.update(solve_seconds=10 ** 400), "solve_seconds", "GV046"),
    (lambda d: d.update(gpus_used=float("nan")), "gpus_used", "GV046"),                  # the NaN token
    (lambda d: d.update(changes={"gpu-a": "mixed"}), "changes", "GV046"),
    (lambda d: d.pop("plan"), "(root)", "GV046"),
])
def test_every_refusal_is_one_placed_line_with_a_code(offline, capsys, mutate, field, code):
    d = json.loads(json.dumps(BASE))
    mutate(d)
    f = _write(offline, d)
    assert cli.main(["rollout", str(f), "--dry-run"]) == 2
    msg = _one_error(capsys)
    assert re.match(rf"gpuvalues: error: {re.escape(str(f))}:\d+:\d+: {re.escape(field)}: .* \[{code}\]$", msg), msg


def test_configmap_needs_every_target_config(offline, capsys):
    d = json.loads(json.dumps(BASE))
    del d["plan"]["mig_parted_config"]["mig-configs"]["all-3g"]
    f = _write(offline, d)
    assert cli.main(["rollout", str(f), "--dry-run"]) == 0      # without --configmap it is not needed
    capsys.readouterr()
    assert cli.main(["rollout", str(f), "--dry-run", "--configmap", "gpu-operator/default-mig-parted-config"]) == 2
    assert "changes[1].to: config 'all-3g' is not in plan.mig_parted_config" in _one_error(capsys)
    assert cli.main(["rollout", str(f), "--dry-run", "--configmap", "no-slash"]) == 2
    assert "--configmap" in _one_error(capsys)


@pytest.mark.parametrize("option, value", [
    ("--timeout", "nan"), ("--timeout", "-1"), ("--timeout", "inf"), ("--timeout", "0"),
    ("--poll", "nan"), ("--poll", "-0.5"), ("--poll", "1e9"),
    ("--max-unavailable-per-pool", "0"), ("--max-nodes-per-wave", "-3"),
])
def test_options_out_of_range_are_refused_offline(offline, capsys, option, value):
    f = _write(offline, BASE)
    assert cli.main(["rollout", str(f), option, value]) == 2
    msg = _one_error(capsys)
    assert msg.startswith(f"gpuvalues: error: {option}: ") and msg.endswith("[GV046]"), msg


def test_a_plan_without_changes_says_so(offline, capsys):
    d = json.loads(json.dumps(BASE))
    d["changes"] = []
    f = _write(offline, d)
    for extra in (["--dry-run"], []):
        assert cli.main(["rollout", str(f), *extra]) == 0
        out = capsys.readouterr()
        assert out.out == "no node changes: nothing to roll out\n" and "nothing to roll out" in out.err
    assert cli.main(["--output", "json", "rollout", str(f), "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {"waves": []}


def test_file_problems_are_placed_and_coded(offline, capsys):
    text = json.dumps(BASE, indent=1)
    cases = {"truncated": text[:200], "nul": text[:50] + "\0" + text[50:],
             "dup": text.replace('"gpus_used": 3', '"gpus_used": 3, "gpus_used": 4'),
             "deep": "[" * 100_000 + "]" * 100_000, "yaml": "changes: [\n"}
    for name, body in cases.items():
        f = _write(offline, body, f"{name}.json")
        assert cli.main(["rollout", str(f), "--dry-run"]) == 2, name
        msg = _one_error(capsys)
        assert re.match(rf"gpuvalues: error: {re.escape(str(f))}:\d+:\d+: .*\[GV046\]$", msg), msg
    f = offline / "bad-utf8.json"
    f.write_bytes(text.encode()[:30] + b"\xff" + text.encode()[30:])
    assert cli.main(["rollout", str(f), "--dry-run"]) == 2
    assert re.match(rf"gpuvalues: error: {re.escape(str(f))}:\d+:\d+: \(root\): not UTF-8.*\[GV046\]$", _one_error(capsys))


# --- what the cluster says, checked before any action -------------------------------------------

def _node(name, config, annotation=None):
    meta = {"name": name, "uid": "u", "resourceVersion": "1", "labels": {rollout.MIG_CONFIG_LABEL: config}}
    if annotation is not None:
        meta["annotations"] = {rollout.ROLLOUT_ANNOTATION: annotation}
    return {"metadata": meta}


def test_check_cluster_places_a_missing_or_changed_node():
    text = json.dumps(BASE, indent=1)
    rp = rollout.replan_changes(json.loads(text), source="r.json", text=text)
    rollout.check_cluster({"gpu-a": _node("gpu-a", "all-1g"), "gpu-b.pool.example": _node("gpu-b.pool.example", None)},
                          rp)
    with pytest.raises(rollout.RolloutInputError) as e:
        rollout.check_cluster({"gpu-a": _node("gpu-a", "all-1g")}, rp)
    i = text.index('"gpu-b.pool.example"')
    assert (e.value.code, e.value.line, e.value.field) == ("GV048", text.count("\n", 0, i) + 1, "changes[1].node")
    with pytest.raises(rollout.RolloutInputError, match="runs nvidia.com/mig.config=all-3g, the re-plan expected"):
        rollout.check_cluster({"gpu-a": _node("gpu-a", "all-3g"), "gpu-b.pool.example": _node("x", None)}, rp)


@pytest.mark.parametrize("annotation", [
    '{"owned": null}', "{", "[]", '"done"', '{"target": "mixed", "step": "bogus"}',
    '{"target": "mixed", "step": "cordoned", "since": ' + "9" * 400 + "}",
    '{"target": "mixed", "step": "cordoned", "since": 1e400}',
    '{"target": "mixed", "step": "cordoned", "since": NaN}',
    '{"target": "mixed", "step": "cordoned", "since": "yesterday"}',
    '{"target": "bad label!", "step": "done"}', "x" * 5000,
])
def test_a_malformed_state_annotation_is_reported_with_the_way_out(annotation):
    """The remediation controller's annotations once stopped every sync with a traceback; a
    rollout state is as untrusted: one GV048 naming the node and how to restart it."""
    text = json.dumps(BASE)
    rp = rollout.replan_changes(json.loads(text), source="r.json", text=text)
    nodes = {"gpu-a": _node("gpu-a", "mixed", annotation), "gpu-b.pool.example": _node("gpu-b.pool.example", None)}
    with pytest.raises(rollout.RolloutInputError) as e:
        rollout.check_cluster(nodes, rp)
    assert e.value.code == "GV048" and e.value.source == "node/gpu-a"
    assert f"kubectl annotate node gpu-a {rollout.ROLLOUT_ANNOTATION}-" in str(e.value)
    ok = '{"target": "mixed", "step": "cordoned", "since": 1764600000.5, "at": 1764600000}'
    assert rollout.parse_state(_node("gpu-a", "mixed", ok))["step"] == "cordoned"


# --- fuzz: any hostile re-plan is one placed, coded line, or a valid plan ---------------------


FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _paths(d, path=()):
    yield path
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _paths(v, path + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _paths(v, path + (i,))


PATHS = [p for p in _paths(BASE) if p]
HOSTILE = st.one_of(
    st.sampled_from([None, True, 0, -1, 8, 1.5, float("nan"), float("inf"), -float("inf"), 10 ** 30, 10 ** 400,
                     "", " ", "UPPER", "a" * 64, "a" * 254, "a/b", "-x", "x-", "ü", "null", [], {}, [None],
                     {"a": 1}, [[[]]]]),
    st.integers(-(10 ** 20), 10 ** 20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=70), st.lists(st.integers(0, 9), max_size=3),
)


def _set(d, path, value):
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = value


@st.composite
def hostile_replans(draw):
    """A mutated BASE as file bytes: a value replaced somewhere, or the bytes cut, or a bad byte."""
    kind = draw(st.sampled_from(["value", "value", "value", "cut", "byte"]))
    data = json.loads(json.dumps(BASE))
    if kind == "value":
        _set(data, draw(st.sampled_from(PATHS)), draw(HOSTILE))
        return json.dumps(data, indent=draw(st.sampled_from([None, 1]))).encode()
    raw = json.dumps(data, indent=1).encode()
    i = draw(st.integers(0, len(raw) - 1))
    if kind == "cut":
        return raw[:i]
    return raw[:i] + draw(st.sampled_from([b"\x00", b"\xff", b"\xc3", b"}", b",", b'"'])) + raw[i:]


@FUZZ
@given(body=hostile_replans())
def test_fuzz_hostile_replans_are_refused_in_one_placed_coded_line(offline, capsys, body):
    f = offline / "fuzz.json"
    f.write_bytes(body)
    capsys.readouterr()
    rc = cli.main(["rollout", str(f), "--dry-run"])   # any other exception escapes and fails here
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    if rc == 0:
        assert out.out.startswith(("wave 1:", "no node changes")), out.out
        return
    assert rc == 2 and out.out == ""
    (line,) = [x for x in out.err.splitlines() if x.startswith("gpuvalues: error:")]
    assert re.match(rf"gpuvalues: error: {re.escape(str(f))}:\d+:\d+: \S.*: .* \[(?:GV046|GV037)\]$", line), line


# --- waves: the first-fit planner is the old wave-by-wave scan, without its rescans -----------

def scan_waves_reference(changes, pods, allowance, max_unavailable_per_pool=1, max_nodes_per_wave=None):
    """The planner before issue 24 (quadratic), kept as the reference the fast one must equal
    (bench/bench_rollout.py times it beside the new one)."""
    from collections import Counter
    todo = sorted(changes, key=lambda c: (sum(pods.get(c.node, {}).values()), c.pool, c.node))
    waves = []
    while todo:
        wave, per_pool, used, rest = [], Counter(), Counter(), []
        for c in todo:
            mine = pods.get(c.node, {})
            fits = per_pool[c.pool] < max_unavailable_per_pool \
                and (max_nodes_per_wave is None or len(wave) < max_nodes_per_wave) \
                and all(used[b] + n <= allowance.get(b, 0) for b, n in mine.items() if b in allowance)
            if not wave and not fits and per_pool[c.pool] < max_unavailable_per_pool:
                fits = True
            if fits:
                wave.append(c)
                per_pool[c.pool] += 1
                used.update(mine)
            else:
                rest.append(c)
        waves.append([c.node for c in wave])
        todo = rest
    return waves


@st.composite
def wave_cases(draw):
    n = draw(st.integers(1, 30))
    pools = draw(st.integers(1, 4))
    budgets = [f"ns/b{i}" for i in range(draw(st.integers(0, 4)))]
    changes = [ch(f"n{i:02d}", f"p{draw(st.integers(0, pools - 1))}") for i in range(n)]
    pods = {}
    for c in changes:
        pods[c.node] = {b: k for b in budgets + ["ns/(no budget)"] if (k := draw(st.integers(0, 3)))}
    allowance = {b: draw(st.integers(0, 4)) for b in budgets}
    return changes, pods, allowance, draw(st.integers(1, 3)), draw(st.one_of(st.none(), st.integers(1, 5)))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(case=wave_cases())
def test_waves_equal_the_wave_by_wave_scan(case):
    changes, pods, allowance, per_pool, per_wave = case
    fast = plan_waves(changes, pods, allowance, max_unavailable_per_pool=per_pool, max_nodes_per_wave=per_wave)
    assert [[c.node for c in w.changes] for w in fast] == scan_waves_reference(changes, pods, allowance, per_pool, per_wave)
    for w in fast:                                   # and PDB-safe: a budget over its allowance only alone
        for b, allow in allowance.items():
            used = sum(pods[c.node].get(b, 0) for c in w.changes)
            assert used <= allow or any(pods[c.node].get(b, 0) > allow for c in w.changes)


@pytest.mark.parametrize("indent", [None, 1])
def test_positions_point_at_the_value_deep_in_the_file(offline, capsys, indent):
    d = json.loads(json.dumps(BASE))
    d["plan"]["pools"][0]["node_groups"][1]["devices"][1]["3g.40gb"] = 99
    f = offline / "deep.json"
    f.write_text(json.dumps(d, indent=indent))
    text = f.read_text()
    i = text.index("99")                              # the one 99 in the file
    line, col = text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i)
    assert cli.main(["rollout", str(f), "--dry-run"]) == 2
    assert _one_error(capsys).startswith(
        f"gpuvalues: error: {f}:{line}:{col}: plan.pools[0].node_groups[1].devices[1].3g.40gb: ")
    y = offline / "deep.yaml"                         # the YAML form is placed too
    y.write_text(yaml.safe_dump(d))
    text = y.read_text()
    i = text.index("99")
    assert cli.main(["rollout", str(y), "--dry-run"]) == 2
    assert _one_error(capsys).startswith(
        f"gpuvalues: error: {y}:{text.count(chr(10), 0, i) + 1}:{i - text.rfind(chr(10), 0, i)}: ")


# --- waves move disruption units: a LeaderWorkerSet group's nodes together (issue 26) -------

def _nodes(w):
    return [c.node for c in w.changes]


def test_a_groups_nodes_move_in_one_wave_and_count_once_per_pool():
    """Two pools, two groups each (two nodes per group) and lone nodes: each group's nodes in
    one wave (drained apart, the group would go down once per wave), and the per-pool limit
    counts units: one group, or one lone node, per pool per wave at the default limit 1."""
    changes = [ch(n, p) for p in "ab" for n in (f"{p}1", f"{p}2", f"{p}3", f"{p}4", f"{p}5")]
    groups = [["a1", "a2"], ["a3", "a4"], ["b1", "b2"], ["b3", "b4"]]
    waves = plan_waves(changes, {}, {}, groups=groups)
    where = {c.node: w.index for w in waves for c in w.changes}
    for g in groups:
        assert len({where[n] for n in g}) == 1, (g, [_nodes(w) for w in waves])
    unit_of = {n: tuple(g) for g in groups for n in g}
    for w in waves:
        for p in "ab":
            assert len({unit_of.get(c.node, c.node) for c in w.changes if c.pool == p}) <= 1, _nodes(w)
    assert len(waves) == 3 and sorted(where) == sorted(c.node for c in changes)
    # control: without the groups the same changes are planned node by node (5 waves, a group split)
    alone = plan_waves(changes, {}, {})
    assert len(alone) == 5
    assert len({w.index for w in alone for c in w.changes if c.node in ("a1", "a2")}) == 2


def test_groups_sharing_a_node_make_one_unit_and_unchanged_nodes_do_not_join():
    changes = [ch("n1"), ch("n2"), ch("n3"), ch("n4")]
    units = rollout.disruption_units(changes, [["n1", "n2"], ["n2", "n3"], ["n4", "elsewhere"]])
    assert [[c.node for c in u] for u in units] == [["n1", "n2", "n3"], ["n4"]]


def test_a_unit_over_a_limit_moves_whole_alone_and_says_so():
    """A 2-node group with --max-nodes-per-wave 1, and a group whose pods exceed its budget:
    never split, never left waiting; alone in its wave, with the reason in the plan."""
    changes = [ch("g1"), ch("g2"), ch("x", "b"), ch("h1", "c"), ch("h2", "c")]
    pods = {"g1": {"ns/big": 1}, "g2": {"ns/big": 1}, "h1": {"ns/huge": 1}, "h2": {"ns/huge": 1}}
    waves = plan_waves(changes, pods, {"ns/big": 2, "ns/huge": 1}, max_unavailable_per_pool=2,
                       max_nodes_per_wave=1, groups=[["g1", "g2"], ["h1", "h2"]])
    assert [_nodes(w) for w in waves] == [["x"], ["g1", "g2"], ["h1", "h2"]]
    assert waves[0].notes == ()
    assert waves[1].notes == ("LeaderWorkerSet group unit g1, g2 moves whole in its own wave: "
                              "2 nodes, over --max-nodes-per-wave 1",)
    assert "2 pods of PodDisruptionBudget ns/huge, which allows 1 disruption(s)" in waves[2].notes[0]
    text = rollout.describe(waves)
    assert "  note: LeaderWorkerSet group unit g1, g2 moves whole" in text
    # a lone node over its budget is said too (it always moved alone)
    (w,) = plan_waves([ch("n")], {"n": {"ns/db": 3}}, {"ns/db": 1})
    assert w.notes == ("node n moves whole in its own wave: 3 pods of PodDisruptionBudget ns/db, "
                       "which allows 1 disruption(s)",)


def scan_units_reference(units, pods, allowance, max_unavailable_per_pool=1, max_nodes_per_wave=None):
    """The wave-by-wave scan over units (the reference above, a unit in place of a node)."""
    from collections import Counter

    def load(u):
        total = Counter()
        for c in u:
            total.update(pods.get(c.node, {}))
        return total
    todo = sorted(units, key=lambda u: (sum(load(u).values()), u[0].pool, u[0].node))
    waves = []
    while todo:
        wave, per_pool, used, rest = [], Counter(), Counter(), []
        for u in todo:
            pools = {c.pool for c in u}
            ok_pools = all(per_pool[p] < max_unavailable_per_pool for p in pools)
            fits = ok_pools and (max_nodes_per_wave is None or len(wave) + len(u) <= max_nodes_per_wave) \
                and all(used[b] + n <= allowance.get(b, 0) for b, n in load(u).items() if b in allowance)
            if not wave and not fits and ok_pools:
                fits = True
            if fits:
                wave += u
                per_pool.update(pools)
                used.update(load(u))
            else:
                rest.append(u)
        waves.append([c.node for c in wave])
        todo = rest
    return waves


@st.composite
def unit_cases(draw):
    changes, pods, allowance, per_pool, per_wave = draw(wave_cases())
    nodes = [c.node for c in changes]
    groups = [draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=4, unique=True))
              for _ in range(draw(st.integers(0, 4)))]
    return changes, pods, allowance, per_pool, per_wave, groups


@settings(max_examples=300, deadline=None, derandomize=True)
@given(case=unit_cases())
def test_unit_waves_equal_the_wave_by_wave_scan_over_units(case):
    changes, pods, allowance, per_pool, per_wave, groups = case
    fast = plan_waves(changes, pods, allowance, max_unavailable_per_pool=per_pool, max_nodes_per_wave=per_wave,
                      groups=groups)
    units = rollout.disruption_units(changes, groups)
    assert [_nodes(w) for w in fast] == scan_units_reference(units, pods, allowance, per_pool, per_wave)
    where = {c.node: w.index for w in fast for c in w.changes}
    for u in units:                                  # never split
        assert len({where[c.node] for c in u}) == 1
