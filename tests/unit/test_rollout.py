"""Rollout wave planning and the pure helpers (gpuvalues.operations.rollout); the executor
runs against the real control plane in tests/e2e/test_rollout.py."""
from __future__ import annotations

import json

import pytest

from gpuvalues.operations import rollout
from gpuvalues.operations.rollout import NodeChange, plan_waves


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
    from gpuvalues.planners.milp import ModelDemand, NodePool, replan
    from gpuvalues.planners.replan import CurrentLayout, CurrentNode
    cur = CurrentLayout((CurrentNode("a", "p", "all-7g", ({"7g.80gb": 1},), pods=1),
                         CurrentNode("b", "p", "all-7g", ({"7g.80gb": 1},), pods=1)))
    r = replan([ModelDemand("m", replicas=3, memory_gb=8), ModelDemand("big", replicas=1, memory_gb=60)],
               [NodePool("p", "A100-80GB", 1, 2)], cur)
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
