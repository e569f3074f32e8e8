"""Multi-node replicas (issue 26): nodesPerReplica stated or derived, whole nodes reserved
per group, GV060-GV063 refusals, and fit placing LeaderWorkerSet groups all or nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpuvalues import build_fleet, check_fleet
from gpuvalues.checks.spec import spec_from_text
from gpuvalues.planners.scheduling.fit import fit
from gpuvalues.planners.scheduling.inventory import Inventory, Node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "multi-node-405b.yaml"

SPEC = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {{name: h100, gpu: NVIDIA H100 80GB HBM3, gpusPerNode: 8, nodes: {nodes}, groupDomainLabel: example.com/rack}}
workloads:
  - name: big
    model: meta-llama/Llama-3.1-405B-Instruct
    server: {server}
{extra}
sharing: {sharing}
autoscaling: {{engine: hpa, metric: choose, minReplicas: 1, maxReplicas: {max}}}
"""


def fleet_of(extra: str = "    memoryGB: 1000", *, nodes: int = 4, server: str = "vllm",
             sharing: str = "whole", max: int = 2):
    text = SPEC.format(nodes=nodes, server=server, extra=extra, sharing=sharing, max=max)
    return build_fleet(spec_from_text(text, "spec.yaml"))


def codes(fleet) -> list[str]:
    return [f.code for f in fleet.errors]


def test_the_example_derives_two_nodes_per_replica_from_its_memory():
    from gpuvalues.checks.spec import load_spec

    fleet = build_fleet(load_spec(EXAMPLE))
    (p,) = fleet.placements
    assert (p.mode, p.count, p.nodes, p.gpus_per_replica) == ("whole", 8, 2, 16)
    values = fleet.release("llama-405b").values
    assert values["multiNode"] == {"nodes": 2, "topologyKey": "gpu-inference.io/rack"}
    assert values["gpu"] == {"mode": "whole", "count": 8}
    # maxReplicas is what the 4 nodes hold in whole groups: 2, not 32 GPUs / 8 per pod = 4
    assert values["autoscaling"]["maxReplicas"] == 2
    assert fleet.errors == ()


def test_one_node_models_stay_single_node():
    fleet = fleet_of("    memoryGB: 500")            # 500 GB fit 8 x 79 GiB
    assert [p.nodes for p in fleet.placements] == [1]
    assert "multiNode" not in fleet.release("big").values


def test_layout_reserves_whole_nodes_per_group_and_reports_what_does_not_fit():
    fleet = fleet_of("    nodesPerReplica: 2\n    memoryGB: 1000", nodes=5, max=3)
    assert fleet.layout.units["big"] == 32                 # 2 groups x 2 nodes x 8 GPUs
    (s,) = fleet.layout.shortages
    assert (s.wanted, s.got) == (3, 2) and "2 whole nodes each" in s.why
    # maxReplicas 3 x 16 GPUs > 40: the values rule counts GPUs per pod x pods per group
    checked = check_fleet(fleet)
    assert [f.code for f in checked.errors] == ["GV005"]
    assert "maxReplicas 3 x 16 GPUs = 48 > 40" in checked.errors[0].message


@pytest.mark.parametrize(("kwargs", "code"), [
    (dict(extra="    nodesPerReplica: 5\n    memoryGB: 1000"), "GV061"),       # 4 nodes in the pool
    (dict(extra="    memoryGB: 3000", nodes=4), "GV061"),                    # derived: 5 nodes
    (dict(extra="    nodesPerReplica: 2\n    memoryGB: 1000", sharing="mig"), "GV060"),
    (dict(extra="    nodesPerReplica: 2\n    memoryGB: 1000", sharing="time-slicing"), "GV060"),
    (dict(extra="    nodesPerReplica: 2\n    memoryGB: 1000\n    modelPvc: repo", server="triton"), "GV063"),
    (dict(extra="    nodesPerReplica: 2\n    tensorParallel: 4"), "GV062"),
    (dict(extra="    nodesPerReplica: 2\n    gpus: 8"), "GV062"),
    (dict(extra="    nodesPerReplica: 2\n    memoryGB: 2000"), "GV013"),    # 2 nodes hold 1274 GiB
])
def test_refusals(kwargs, code):
    fleet = fleet_of(**kwargs)
    assert codes(fleet) == [code], fleet.findings
    assert fleet.workloads == ()


def test_explicit_counts_that_agree_are_accepted():
    fleet = fleet_of("    nodesPerReplica: 2\n    gpus: 16\n    tensorParallel: 8")
    assert fleet.errors == ()
    assert [(p.count, p.nodes) for p in fleet.placements] == [(8, 2)]


# -- fit: LeaderWorkerSet groups, all or nothing, one domain each ---------------------------

def _node(name: str, rack: str | None) -> Node:
    labels = {"example.com/rack": rack} if rack else {}
    return Node(name, labels=labels, capacity={"nvidia.com/gpu": 8}, allocatable={"nvidia.com/gpu": 8})


def _lws(replicas: int, size: int = 2, exclusive: str | None = "example.com/rack") -> list[dict]:
    pod = {"containers": [{"name": "s", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}
    meta = {"name": "big", "namespace": "ns"}
    if exclusive:
        meta["annotations"] = {"leaderworkerset.sigs.k8s.io/exclusive-topology": exclusive}
    return [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
             "spec": {"replicas": replicas, "leaderWorkerTemplate": {
                 "size": size, "leaderTemplate": {"spec": pod}, "workerTemplate": {"spec": pod}}}}]


def test_fit_places_a_group_whole_inside_one_domain_or_not_at_all():
    # rack a: 2 nodes, rack b: 1 node, one node without the label: one group fits (rack a);
    # rack b and the unlabelled node have room for 2 pods, but not a group in one domain
    inv = Inventory((_node("n1", "a"), _node("n2", "a"), _node("n3", "b"), _node("n4", None)))
    w = fit(_lws(2), inv).max.workloads[0]
    assert (w.replicas, w.scheduled, w.pending) == (2, 1, 1)
    assert dict(w.nodes) == {"n1": 1, "n2": 1}            # nothing half-placed on n3 / n4
    assert "didn't match pod affinity rules" in w.reason
    assert w.extra_replicas == 0


def test_fit_without_a_domain_still_places_groups_all_or_nothing():
    inv = Inventory((_node("n1", "a"), _node("n2", "a"), _node("n3", "b")))
    w = fit(_lws(2, exclusive=None), inv).max.workloads[0]
    assert (w.scheduled, w.pending) == (1, 1)             # 3 nodes: one group of 2, not 1.5
    assert sum(dict(w.nodes).values()) == 2


def test_fit_exclusive_domains_one_group_each():
    inv = Inventory(tuple(_node(f"n{i}", "ab"[i // 2]) for i in range(4)))
    w = fit(_lws(2), inv).max.workloads[0]
    assert (w.scheduled, w.pending) == (2, 0)
    # negative control: both racks hold 2 pods each; with 3-pod groups neither holds one
    w3 = fit(_lws(2, size=3), inv).max.workloads[0]
    assert (w3.scheduled, w3.pending) == (0, 2)


def test_a_drain_counts_a_leaderworkerset_group_as_one_disruption():
    from gpuvalues.operations.drain import disruption_unit

    def pod(name, owner, lws=None, group="0"):
        labels = {"leaderworkerset.sigs.k8s.io/name": lws,
                  "leaderworkerset.sigs.k8s.io/group-index": group} if lws else {}
        return {"metadata": {"name": name, "namespace": "ns", "uid": name, "labels": labels,
                             "ownerReferences": [{"uid": owner, "controller": True}]}}

    # a leader (owned by the leader StatefulSet) and a worker (its group's StatefulSet):
    # different controllers, one disruption; and one per set, as one per Deployment
    assert disruption_unit(pod("l", "sts-a", "big")) == disruption_unit(pod("w", "sts-b", "big", "1"))
    assert disruption_unit(pod("l", "sts-a", "big")) != disruption_unit(pod("x", "sts-a", "other"))
    # control: without the LWS label, the controller decides, as before
    assert disruption_unit(pod("p", "rs-1")) == ("ns", "rs-1")
    assert disruption_unit(pod("q", "rs-2")) != disruption_unit(pod("p", "rs-1"))
