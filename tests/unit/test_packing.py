"""Placement that packs what users run (issue 23): whole-GPU and tensor-parallel replicas
share nodes with MIG GPUs (mig-parted sets MIG per device; the device plugin's mixed
strategy advertises `nvidia.com/gpu` beside `nvidia.com/mig-*`), tensor-parallel replicas
stay inside a node's NVLink islands, and a pool that cannot hold its peak says which
workloads hold its GPUs, with a registered code."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuvalues.checks.fleet import check_fleet
from gpuvalues.checks.spec import load_spec, spec_from_text
from gpuvalues.fleet import build_fleet, expected_nodes
from gpuvalues.planners.mig import migparted
from tests.conftest import ROOT

TOPO = ROOT / "tests" / "unit" / "data" / "topo"


def fleet(text: str, name: str = "f.yaml", folder=None):
    if folder is not None:
        path = folder / name
        path.write_text(text)
        return check_fleet(build_fleet(load_spec(path)))
    return check_fleet(build_fleet(spec_from_text(text, name)))


def codes(f) -> list[str]:
    return [x.code for x in f.errors]


TP_AND_MIG = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {{name: a100, gpu: A100-80GB, gpusPerNode: 8, nodes: {nodes}, mig: true, topology: {{label: NV8}}}}
workloads:
  - {{name: tp, model: big, gpus: 4, tensorParallel: 4, sharing: whole}}
  - {{name: small, model: s, memoryGB: {small_gb}, sharing: mig}}
autoscaling: {{engine: hpa, maxReplicas: {replicas}}}
"""


def test_28_tp_gpus_and_2_mig_gpus_fit_32():
    # 7 x TP4 = 28 GPUs on 4 nodes (the 4th half full); 7 x 1g.20gb (4 per GPU) need 2 GPUs
    f = fleet(TP_AND_MIG.format(nodes=4, small_gb=15, replicas=7))
    assert codes(f) == []
    assert f.layout.units == {"tp": 28, "small": 7}
    assert f.layout.mig_parts == {"a100.4gpu": ("a100", (4, 5, 6, 7))}
    mixed = [g for g in f.layout.groups_of("a100") if g.mig_devices and None in g.mig_devices
             and any(g.mig_devices)]
    (g,) = mixed
    assert g.nodes == 1 and g.mig_devices[:4] == (None,) * 4       # the TP4 replica's GPUs
    assert sum(1 for d in g.mig_devices if d) == 2
    assert set(g.workloads) == {"tp", "small"}
    # the node side says the same: mig-parted keeps MIG off on the whole GPUs of that node
    node = [n for n in expected_nodes(f).nodes if n.name.startswith(g.name)][0]
    assert node.allocatable["nvidia.com/gpu"] == 6 and node.allocatable["nvidia.com/mig-1g.20gb"] == 8
    migparted.validate_mig_parted_config(f.layout.mig_parted)


def test_six_one_gpu_replicas_leave_the_rest_of_their_node_to_mig():
    text = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: a100, gpu: A100-80GB, gpusPerNode: 8, nodes: 1, mig: true}
workloads:
  - {name: whole1, model: w, gpus: 1, sharing: whole}
  - {name: small, model: s, memoryGB: 8, sharing: mig}
autoscaling: {engine: hpa, maxReplicas: 6}
"""
    f = fleet(text)
    assert codes(f) == []
    assert f.layout.units == {"whole1": 6, "small": 6}
    (g,) = f.layout.groups_of("a100")
    assert sum(d is None for d in g.mig_devices) == 7 and g.nodes == 1


def test_tp_replicas_stay_inside_the_nvlink_group_of_a_degraded_node(tmp_path):
    # GPU7 is off the NVSwitch fabric: one TP4 replica per node (GPUs 0-6 hold one set of
    # four NVLinked GPUs plus three), not two
    (tmp_path / "topo.txt").write_text((TOPO / "hgx-h100-degraded-gpu7.txt").read_text())
    text = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: h100, gpu: H100-80GB-SXM, gpusPerNode: 8, nodes: 2, topology: {file: topo.txt}}
workloads:
  - {name: tp, model: big, gpus: 4, tensorParallel: 4, sharing: whole}
autoscaling: {engine: hpa, maxReplicas: 4}
"""
    f = fleet(text, folder=tmp_path)
    (err,) = [x for x in f.errors if x.code == "GV015"]
    assert "tp wants 4 replicas, gets 2" in err.message
    assert f.layout.units["tp"] == 8
    # one-GPU replicas still use every GPU, GPU7 included
    one = text.replace("gpus: 4, tensorParallel: 4", "gpus: 1").replace("maxReplicas: 4", "maxReplicas: 16")
    assert fleet(one, folder=tmp_path).layout.units["tp"] == 16


def test_a_shortage_names_the_workloads_holding_the_pool():
    text = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: l40s, gpu: L40S, gpusPerNode: 8, nodes: 2}
workloads:
  - {name: a, model: a, gpus: 6, sharing: whole}
  - {name: b, model: b, gpus: 4, sharing: whole}
autoscaling: {engine: hpa, maxReplicas: 2}
"""
    (err,) = fleet(text).errors
    assert err.code == "GV015"
    assert "b wants 2 replicas, gets 0" in err.message
    assert "held by a (12 GPUs)" in err.message and "b (" not in err.message


def test_an_oversubscribed_mig_pool_is_a_placed_shortage_not_bad_input():
    text = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: a100, gpu: A100-80GB, gpusPerNode: 1, nodes: 2, mig: true}
workloads:
  - {name: a, model: a, memoryGB: 30, sharing: mig}
  - {name: b, model: b, memoryGB: 15, sharing: mig}
  - {name: c, model: c, memoryGB: 8, sharing: mig}
autoscaling: {engine: hpa, maxReplicas: 3}
"""
    f = fleet(text)
    assert codes(f) == ["GV015"]
    (err,) = f.errors
    assert (err.path, err.line) == ("cluster.nodePools[0]", 4)
    assert "gets 0" in err.message and "held by" in err.message


TWO_POOLS = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {{name: a, gpu: L40S, gpusPerNode: 8, nodes: 1}}
    - {{name: b, gpu: L40S, gpusPerNode: 8, nodes: 1}}
workloads:
  - {{name: w1, model: m1, gpus: 2}}
  - {{name: w2, model: m2, gpus: 2}}
  - {{name: w3, model: m3, memoryGB: 8}}
sharing: auto
autoscaling: {{engine: hpa, maxReplicas: {replicas}}}
"""


def test_auto_sharing_spreads_workloads_over_the_pools_that_can_serve_them():
    # w1 and w2 take 4 x 2 GPUs each: one pool each, not both on the first (where w2 got
    # nothing and pool b stayed idle)
    f = fleet(TWO_POOLS.format(replicas=4).replace("  - {name: w3, model: m3, memoryGB: 8}\n", ""))
    assert codes(f) == [] and not [x for x in f.findings if x.code == "GV015"]
    assert {p.workload: p.pool.name for p in f.placements} == {"w1": "a", "w2": "b"}
    assert f.layout.units == {"w1": 8, "w2": 8}


def test_auto_sharing_that_cannot_fit_anywhere_is_a_placed_finding():
    f = fleet(TWO_POOLS.format(replicas=5))
    short = [x for x in f.errors if x.code == "GV015"]
    assert short and all(x.path.startswith("cluster.nodePools[") and x.line for x in short)
    # every pool is used before anything is refused
    assert {p.pool.name for p in f.placements} == {"a", "b"}


def test_an_explicit_node_pool_is_kept():
    text = TWO_POOLS.format(replicas=4).replace("{name: w2, model: m2, gpus: 2}",
                                                "{name: w2, model: m2, gpus: 2, nodePool: a}")
    f = fleet(text)
    assert {p.workload: p.pool.name for p in f.placements}["w2"] == "a"


def test_dra_workloads_are_listed_with_their_device_class():
    from gpuvalues import pipeline
    from gpuvalues.io import present
    f = build_fleet(load_spec(ROOT / "examples" / "dra-fleet.yaml"))
    assert {p.resource for p in f.placements} == {"gpu.nvidia.com (DRA claim)"}
    data = pipeline.plan_data(f)
    assert {w["resource"] for w in data["workloads"]} == {"gpu.nvidia.com (DRA claim)"}
    assert "nvidia.com/gpu " not in present.plan_table(data)
    # what the chart claims: the release's ResourceClaimTemplate uses that DeviceClass
    release = f.release("llama-70b").values
    assert release["gpu"]["mode"] == "dra"
    assert release["gpu"].get("dra", {}).get("deviceClassName", "gpu.nvidia.com") == "gpu.nvidia.com"


def test_the_dra_device_class_is_the_charts_default():
    from gpuvalues.checks.rules import chart_defaults
    from gpuvalues.planners.deviceplugin import DRA_GPU_CLASS
    assert chart_defaults()["gpu"]["dra"]["deviceClassName"] == DRA_GPU_CLASS


def test_gb200_newer_driver_profile_name_is_kept_end_to_end():
    # newer drivers name GB200's one-slice profile 1g.24gb (NVIDIA/gpu-operator#1303
    # `nvidia-smi mig -lgip`); the device plugin then advertises nvidia.com/mig-1g.24gb and
    # mig-parted must be given that name: the fleet keeps the name the spec asks for
    text = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: gb, gpu: GB200, gpusPerNode: 4, nodes: 1, mig: true}
workloads:
  - {name: small, model: s, memoryGB: 10, sharing: {mode: mig, migProfile: 1g.24gb}}
autoscaling: {engine: hpa, maxReplicas: 5}
"""
    f = fleet(text)
    assert codes(f) == []
    (p,) = f.placements
    assert p.resource == "nvidia.com/mig-1g.24gb"
    assert f.release("small").values["gpu"]["mig"]["profile"] == "1g.24gb"
    devices = [e.get("mig-devices") for entries in f.layout.mig_parted["mig-configs"].values()
               for e in entries if e.get("mig-enabled")]
    assert devices and all(set(d) == {"1g.24gb"} for d in devices)
    assert f.layout.units["small"] == 5
    node = expected_nodes(f).nodes[0]
    assert node.allocatable.get("nvidia.com/mig-1g.24gb", 0) >= 5


@given(st.lists(st.integers(1, 8), min_size=0, max_size=4), st.integers(0, 3),
       st.lists(st.integers(1, 8), min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_a_replica_never_gets_a_gpu_twice_nor_leaves_its_nvlink_island(sizes, loose_n, counts):
    from gpuvalues.fleet.layout import _take
    islands, at = [], 0
    for s in sizes:
        islands.append(list(range(at, at + s)))
        at += s
    loose = list(range(at, at + loose_n))
    node = [list(loose), *[list(i) for i in islands]]
    biggest = max(sizes, default=0)
    given_out: set[int] = set()
    for count in counts:
        free_before = sum(len(s) for s in node)
        got = _take(node, count, biggest)
        if got is None:
            # refused only when no single island (or, past every island, the node) holds it
            assert count > free_before or (1 < count <= biggest and all(
                len(s) < count for s in node[1:])) or (count == 1 and free_before == 0)
            continue
        assert len(got) == count == len(set(got)) and not given_out & set(got)
        given_out |= set(got)
        if 1 < count <= biggest:
            assert any(set(got) <= set(i) for i in islands), (got, islands)


def test_workloads_that_cannot_share_nodes_go_to_different_pools():
    # a time-sliced and a MIG workload, no nodePool: one device-plugin config per node, so
    # the second takes the other pool (today both went to the first and the fleet failed)
    text = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: a, gpu: A100-80GB, gpusPerNode: 8, nodes: 1, mig: true}
    - {name: b, gpu: A100-80GB, gpusPerNode: 8, nodes: 1, mig: true}
workloads:
  - {name: ts, model: t, memoryGB: 10, sharing: {mode: time-slicing, replicasPerGpu: 4}}
  - {name: small, model: s, memoryGB: 8, sharing: mig}
autoscaling: {engine: hpa, maxReplicas: 4}
"""
    f = fleet(text)
    assert codes(f) == []
    assert {p.workload: p.pool.name for p in f.placements} == {"ts": "a", "small": "b"}





def test_a_whole_replica_that_fits_an_earlier_node_is_counted_on_that_node():
    """First fit decreasing: 5 GPUs on the first node, 4 and 4 fill the second, then 3 go
    back to the first: all 16 GPUs are held. The 3 must be marked used on the first node,
    not on the last one opened: a renamed loop variable did that (the full second node
    absorbed them), and the plan put the MIG workload on a GPU the 3-GPU replica holds
    instead of saying the pool is full."""
    text = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: a100, gpu: A100-80GB, gpusPerNode: 8, nodes: 2, mig: true}
workloads:
  - {name: five, model: a, gpus: 5, sharing: whole}
  - {name: four-a, model: b, gpus: 4, sharing: whole}
  - {name: four-b, model: c, gpus: 4, sharing: whole}
  - {name: three, model: d, gpus: 3, sharing: whole}
  - {name: small, model: s, memoryGB: 8, sharing: mig}
autoscaling: {engine: hpa, maxReplicas: 1}
"""
    f = fleet(text)
    mig_gpus = sum(g.nodes * sum(1 for d in (g.mig_devices or ()) if d) for g in f.layout.node_groups)
    assert mig_gpus == 0, [(g.name, g.nodes, g.mig_devices) for g in f.layout.node_groups]
    assert f.layout.units["small"] == 0
    assert [(x.code, "small wants 1 replicas, gets 0" in x.message) for x in f.errors] == [("GV015", True)]
