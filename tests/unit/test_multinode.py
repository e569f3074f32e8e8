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


class _Core:
    """An in-memory stand-in for CoreV1Api's node, pod and eviction calls (JSON merge patch,
    resourceVersion checked), so the domain mark's bookkeeping is tested on every branch;
    tests/e2e/test_multinode.py runs it on the real API server, scheduler and LWS controller."""

    def __init__(self, nodes: dict[str, dict], pods: list[dict] = ()):
        self.nodes = {n: {"metadata": {"name": n, "labels": labels, "annotations": {}, "resourceVersion": "1"},
                          "spec": {}} for n, labels in nodes.items()}
        self.pods = list(pods)
        self.log: list[str] = []
        self.meddle = 0

    @staticmethod
    def _answer(obj):
        import io
        import json
        return io.BytesIO(json.dumps(obj).encode())

    def read_node(self, name, _preload_content=False):
        return self._answer(self.nodes[name])

    def list_node(self, label_selector=None, _preload_content=False):
        items = list(self.nodes.values())
        if label_selector:
            k, v = label_selector.split("=")
            items = [n for n in items if n["metadata"]["labels"].get(k) == v]
        return self._answer({"items": items})

    def patch_node(self, name, body, _content_type=None, _preload_content=False, **kw):
        from kubernetes.client.exceptions import ApiException
        node = self.nodes[name]
        if self.meddle:                          # someone else wrote the node since we read it
            self.meddle -= 1
            node["metadata"]["resourceVersion"] += "0"
        if body["metadata"].pop("resourceVersion") != node["metadata"]["resourceVersion"]:
            self.log.append(f"409 {name}")
            raise ApiException(status=409)

        def merge(dst, src):
            for k, v in src.items():
                if v is None:
                    dst.pop(k, None)
                elif isinstance(v, dict) and isinstance(dst.get(k), dict):
                    merge(dst[k], v)
                else:
                    dst[k] = v
        merge(node, body)
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        self.log.append(f"patch {name}")
        return self._answer({})

    def list_pod_for_all_namespaces(self, field_selector, _preload_content=False):
        node = field_selector.split("=")[1]
        return self._answer({"items": [p for p in self.pods if p["spec"]["nodeName"] == node]})

    def read_namespace(self, name, _preload_content=False):
        return self._answer({"metadata": {"name": name}})

    def read_namespaced_pod(self, name, namespace, _preload_content=False):
        from kubernetes.client.exceptions import ApiException
        for p in self.pods:
            if p["metadata"]["name"] == name:
                return self._answer(p)
        raise ApiException(status=404)

    def create_namespaced_pod_eviction(self, name, namespace, body, _preload_content=False):
        self.log.append(f"evict {name} {body.delete_options.propagation_policy}")
        for p in self.pods:
            if p["metadata"]["name"] == name:
                p["metadata"]["deletionTimestamp"] = "now"
        return self._answer({})

    def taints(self, name):
        return [(t["key"], t["effect"]) for t in self.nodes[name]["spec"].get("taints") or []]


RACK = "example.com/rack"


def _lws_pod(name, node, exclusive=True, worker="0"):
    ann = {"leaderworkerset.sigs.k8s.io/exclusive-topology": RACK} if exclusive else {}
    if worker != "0":
        ann["leaderworkerset.sigs.k8s.io/leader-name"] = "big-0"
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": ann,
                         "labels": {"leaderworkerset.sigs.k8s.io/name": "big", "leaderworkerset.sigs.k8s.io/group-index": "0",
                                    "leaderworkerset.sigs.k8s.io/worker-index": worker}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Running"}}


def test_a_drained_groups_rack_is_marked_before_the_eviction_and_unmarked_with_the_uncordon():
    """LWS schedules a recreated group leader first (no gang scheduling, lws#167): the rest of
    the drained node's rack gets a PreferNoSchedule mark, so the leader does not take a node
    whose rack its workers cannot join; only the marking owner's release removes it."""
    from gpuvalues.operations import drain

    core = _Core({"a0": {RACK: "a"}, "a1": {RACK: "a"}, "a2": {RACK: "a"}, "b0": {RACK: "b"}},
                 [_lws_pod("big-0", "b0"), _lws_pod("big-0-1", "a1", worker="1")])
    mark = (drain.DOMAIN_TAINT_KEY, "PreferNoSchedule")
    drain.cordon(core, "a1", "rem")
    res = drain.Drainer(core, owner="rem").step("a1", 0.0)
    # the group moves through its leader (on another node), foreground, as LWS recreates a group
    assert [(r.name, r.outcome) for r in res.results] == [("big-0", "evicted")]
    assert core.log.index("patch a0") < core.log.index("evict big-0 Foreground")     # marked first
    # the next step evicts nothing: the leader is terminating, the worker goes with it
    again = drain.Drainer(core, owner="rem").step("a1", 0.0)
    assert again.results == () and [x[1] for x in again.remaining] == ["big-0-1"]
    assert [mark in core.taints(n) for n in ("a0", "a1", "a2", "b0")] == [True, False, True, False]
    assert drain.domain_marks(core.nodes["a1"]) == {"rem": ["a0", "a2"]}
    # idempotent: the next step does not mark again
    n = len(core.log)
    drain.mark_domain(core, "a1", RACK, "rem")
    assert len(core.log) == n
    # a second drained node of the rack (same owner) keeps a2's mark past a1's release
    drain.cordon(core, "a0", "rem")
    drain.mark_domain(core, "a0", RACK, "rem")
    # someone else's uncordon does not unmark; the owner's does
    assert not drain.uncordon(core, "a1", "other")
    assert mark in core.taints("a2")
    assert drain.uncordon(core, "a1", "rem")
    assert drain.domain_marks(core.nodes["a1"]) == {}
    assert mark in core.taints("a2")          # still marked for a0's drain
    assert mark in core.taints("a1") and mark not in core.taints("a0")    # a1: marked for a0's drain
    assert drain.uncordon(core, "a0", "rem")
    assert not any(mark in core.taints(n) for n in core.nodes)


def test_the_remediation_taints_release_unmarks_the_rack_too():
    from gpuvalues.operations import drain

    core = _Core({"a0": {RACK: "a"}, "a1": {RACK: "a"}}, [_lws_pod("big-0", "a1")])
    drain.add_taint(core, "a1", "q", "NoSchedule", "rem")
    drain.Drainer(core, owner="rem").step("a1", 0.0)
    assert (drain.DOMAIN_TAINT_KEY, "PreferNoSchedule") in core.taints("a0")
    assert drain.remove_taint(core, "a1", "q", "rem")
    assert core.taints("a0") == [] and core.taints("a1") == []


@pytest.mark.parametrize("pod,owner", [
    (_lws_pod("big-0", "a1", exclusive=False), "rem"),   # an LWS without exclusive topology
    (_lws_pod("big-0", "a1"), None),                     # a drainer with no owner (dry tools)
])
def test_no_mark_without_an_exclusive_group_or_an_owner(pod, owner):
    from gpuvalues.operations import drain

    core = _Core({"a0": {RACK: "a"}, "a1": {RACK: "a"}}, [pod])
    res = drain.Drainer(core, owner=owner).step("a1", 0.0)
    assert [r.outcome for r in res.results] == ["evicted"]       # control: the drain ran
    assert core.taints("a0") == [] and drain.domain_marks(core.nodes["a1"]) == {}


def test_a_worker_whose_leader_is_gone_waits_for_its_group_and_a_plain_pod_is_evicted_itself():
    from gpuvalues.operations import drain

    plain = {"metadata": {"name": "web", "namespace": "ns", "uid": "web", "labels": {}},
             "spec": {"nodeName": "a1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
             "status": {"phase": "Running"}}
    core = _Core({"a1": {RACK: "a"}}, [_lws_pod("big-0-1", "a1", worker="1"), plain])   # no leader: recreating
    res = drain.Drainer(core, owner="rem").step("a1", 0.0)
    assert [(r.name, r.outcome) for r in res.results] == [("web", "evicted")]
    assert "evict web None" in core.log and sorted(x[1] for x in res.remaining) == ["big-0-1", "web"]


def test_node_writes_retry_a_conflict_reading_the_node_again():
    """The node lifecycle controller rewrites a node right after an uncordon (its
    unschedulable taint): a patch with the read resourceVersion then meets 409; the helpers
    read again and decide anew (client-go retry.RetryOnConflict), a few times, then give up."""
    from kubernetes.client.exceptions import ApiException

    from gpuvalues.operations import drain

    core = _Core({"a1": {RACK: "a"}})
    drain.cordon(core, "a1", "rem")
    core.meddle = 2
    assert drain.uncordon(core, "a1", "rem")
    assert core.log.count("409 a1") == 2 and not core.nodes["a1"]["spec"].get("unschedulable")
    drain.add_taint(core, "a1", "q", "NoSchedule", "rem")
    core.meddle = 99                                  # never settles: the conflict is raised
    with pytest.raises(ApiException) as e:
        drain.remove_taint(core, "a1", "q", "rem")
    assert e.value.status == 409 and core.taints("a1") == [("q", "NoSchedule")]
