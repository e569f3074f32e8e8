"""gpuvalues.planners.scheduling.inventory: kubectl JSON, nvidia-smi CSV + topo, live client, dict round trip.

Expected values are hand-derived from the inputs written here (GFD label semantics from
NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md). The live-cluster test
talks HTTP to a tiny fake API server on loopback: a real kube-apiserver only runs in the
e2e suite, and this test only checks that the official client's output is parsed.
"""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gpuvalues.errors import TransientError, InventoryError
from gpuvalues.io.cluster import from_kubernetes, inventory_from_sources, load_inventory
from gpuvalues.planners.scheduling.inventory import (
    INVENTORY_SCHEMA,
    GpuInfo,
    Inventory,
    Node,
    Taint,
    from_kubectl_json,
    from_nvidia_smi,
    node_from_nvidia_smi,
    parse_quantity,
    resource_amount,
)
from gpuvalues.planners.scheduling.topology import Topology
from tests.conftest import write_kubeconfig
from tests.unit.corrupt import corrupt

DATA = Path(__file__).parent / "data" / "topo"
SCHEMA = json.loads(INVENTORY_SCHEMA.read_text())


def k8s_node(name, labels=None, capacity=None, allocatable=None, taints=None, unschedulable=False):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {}, "status": {"capacity": capacity or {}}}
    if allocatable is not None:
        node["status"]["allocatable"] = allocatable
    if taints:
        node["spec"]["taints"] = taints
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


NODE_LIST = {"apiVersion": "v1", "kind": "List", "items": [
    k8s_node("dgx-1", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
                              "nvidia.com/gpu.memory": "81920", "nvidia.com/mig.capable": "true",
                              "nvidia.com/mig.strategy": "none", "nvidia.com/gpu.topology": "NV8"},
             capacity={"cpu": "128", "memory": "2113612512Ki", "pods": "110", "nvidia.com/gpu": "8",
                       "hugepages-1Gi": "0"},
             allocatable={"cpu": "127500m", "memory": "2000Gi", "pods": "110", "nvidia.com/gpu": "8"},
             taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
    k8s_node("mig-mixed", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2",
                                  "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.count": "7",
                                  "nvidia.com/mig-3g.40gb.count": "2"},
             capacity={"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-2g.20gb": "1"}),
    k8s_node("mig-single", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                                   "nvidia.com/gpu.count": "14", "nvidia.com/gpu.memory": "4864",
                                   "nvidia.com/mig.strategy": "single"},
             capacity={"nvidia.com/gpu": "14"}, unschedulable=True),
    k8s_node("shared", labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.count": "1",
                               "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
             capacity={"nvidia.com/gpu": "4"}),
    k8s_node("cpu-only", capacity={"cpu": "16", "memory": "64Gi"}),
]}


def test_kubectl_json_gfd_labels():
    inv = from_kubectl_json(json.dumps(NODE_LIST), source="nodes.json")
    assert [n.name for n in inv.nodes] == ["cpu-only", "dgx-1", "mig-mixed", "mig-single", "shared"]
    dgx = inv.node("dgx-1")
    assert dgx.gpu == GpuInfo(product="NVIDIA-A100-SXM4-80GB", count=8, memory_mib=81920, mig_capable=True,
                              mig_strategy="none")
    assert dgx.capacity == {"cpu": 128000, "memory": 2113612512 * 1024, "pods": 110, "nvidia.com/gpu": 8}
    assert dgx.allocatable["cpu"] == 127500 and dgx.allocatable["memory"] == 2000 * 2**30
    assert dgx.taints == (Taint("nvidia.com/gpu", "NoSchedule", "present"),)
    assert dgx.nvlink_group == 8
    mixed = inv.node("mig-mixed")
    assert mixed.gpu.mig_strategy == "mixed" and mixed.gpu.count == 2
    # labels win; a resource without a count label still shows up
    assert dict(mixed.gpu.mig_profiles) == {"1g.10gb": 7, "3g.40gb": 2, "2g.20gb": 1}
    assert mixed.allocatable == mixed.capacity  # no allocatable in status: same as capacity
    single = inv.node("mig-single")
    assert single.unschedulable and dict(single.gpu.mig_profiles) == {"1g.5gb": 14} and single.gpu.memory_mib == 4864
    shared = inv.node("shared")
    assert shared.gpu.replicas == 4 and shared.gpu.sharing_strategy == "time-slicing" and shared.gpu.count == 1
    assert inv.node("cpu-only").gpu.count == 0 and inv.node("cpu-only").gpu_resources == {}
    assert inv.total("nvidia.com/gpu") == 8 + 4  # mig-single is cordoned


def test_single_node_object_and_errors():
    inv = from_kubectl_json(NODE_LIST["items"][1])
    assert [n.name for n in inv.nodes] == ["mig-mixed"]
    with pytest.raises(InventoryError) as exc:
        from_kubectl_json('{"items": [\n  {"kind": "Node",,}]}', source="n.json")
    assert exc.value.line == 2 and str(exc.value).startswith("n.json:2:")
    bad = k8s_node("x", capacity={"nvidia.com/gpu": "1500m"})
    with pytest.raises(InventoryError, match="whole numbers") as exc:
        from_kubectl_json(bad, source="n.json")
    assert exc.value.field == "items[0].status.capacity.nvidia.com/gpu"
    with pytest.raises(InventoryError, match="taint"):
        from_kubectl_json(k8s_node("x", taints=[{"key": "a", "effect": "Sometimes"}]))
    with pytest.raises(InventoryError, match="unique"):
        from_kubectl_json({"kind": "List", "items": [k8s_node("a"), k8s_node("a")]})


@pytest.mark.parametrize("value,name,expected", [
    ("500m", "cpu", 500), ("2", "cpu", 2000), ("0.5", "cpu", 500), ("1e3", "cpu", 1_000_000), ("1u", "cpu", 1),
    ("64Gi", "memory", 64 * 2**30), ("1G", "memory", 10**9), ("1.5Ki", "memory", 1536), (8, "nvidia.com/gpu", 8),
    ("7", "nvidia.com/mig-1g.10gb", 7), ("2k", "pods", 2000),
])
def test_quantities(value, name, expected):
    assert resource_amount(name, value) == expected


@pytest.mark.parametrize("value", ["", "1.2.3", "Gi", "5 Gi", "1Q", True])
def test_bad_quantities(value):
    with pytest.raises(ValueError):
        parse_quantity(value)


# -- nvidia-smi ---------------------------------------------------------------------------
H100_CSV = "index, name, memory.total [MiB], mig.mode.current\n" + "".join(
    f"{i}, NVIDIA H100 80GB HBM3, 81559 MiB, Disabled\n" for i in range(8))


def test_nvidia_smi_csv_and_topology():
    topo = (DATA / "hgx-h100-nv18.txt").read_text()
    node = node_from_nvidia_smi("hgx-0", H100_CSV, topo)
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.labels["nvidia.com/gpu.count"] == "8" and node.labels["nvidia.com/gpu.memory"] == "81559"
    assert node.labels["nvidia.com/mig.capable"] == "true"
    assert node.labels["nvidia.com/gpu.topology"] == "NV8"
    assert node.capacity == {"nvidia.com/gpu": 8} == node.allocatable
    assert node.topology is not None and node.topology.nvswitch and node.nvlink_group == 8
    assert node.gpu.count == 8 and node.gpu.memory_mib == 81559


def test_nvidia_smi_without_topo_and_without_mig_column():
    csv_text = "index, name, memory.total [MiB]\n0, Tesla T4, 15360 MiB\n1, Tesla T4, 15360 MiB\n"
    inv = from_nvidia_smi({"t4": (csv_text, None)})
    node = inv.node("t4")
    assert node.labels["nvidia.com/gpu.product"] == "Tesla-T4" and node.topology is None
    assert "nvidia.com/mig.capable" not in node.labels and "nvidia.com/gpu.topology" not in node.labels


@pytest.mark.parametrize("csv_text,line,col,field,match", [
    ("index, name\n0, Tesla T4\n", 1, 1, "header", "memory.total"),
    ("index, name, memory.total [MiB], mig.mode.current\n0, NVIDIA A100-SXM4-40GB, 40960 MiB, Enabled\n",
     2, 38, "mig.mode.current", "MIG is enabled"),
    ("index, name, memory.total [MiB]\n0, Tesla T4, 15360 MiB\n1, Tesla V100, 16384 MiB\n", 3, 4, "name",
     "mixed GPU models"),
    ("index, name, memory.total [MiB]\n0, Tesla T4, lots\n", 2, 14, "memory.total", "MiB"),
    ("index, name, memory.total [MiB]\n0, Tesla T4\n", 2, 12, "memory.total", "fields"),
    ("index, name, memory.total [MiB]\n0, Tesla T4, 1 MiB, x\n", 2, 21, None, "fields"),
    ("\n\nindex, name, memory.total [MiB]\n0,\"Tesla T4, 1 MiB\n", 4, 3, None, "not closed"),
    ("", 1, 1, "header", "empty"),
])
def test_nvidia_smi_errors(csv_text, line, col, field, match):
    with pytest.raises(InventoryError, match=match) as exc:
        node_from_nvidia_smi("n", csv_text, source="q.csv")
    assert (exc.value.line, exc.value.column, exc.value.field, exc.value.source) == (line, col, field, "q.csv")
    assert str(exc.value).startswith(f"q.csv:{line}:{col}: " + (f"{field}: " if field else ""))


def test_nvidia_smi_topology_must_match_gpu_count():
    with pytest.raises(InventoryError, match="topo -m shows 2 GPUs"):
        node_from_nvidia_smi("n", H100_CSV, (DATA / "pcie-2x5090-phb.txt").read_text())


def test_inventory_from_sources_files(tmp_path):
    (tmp_path / "q.csv").write_text(H100_CSV)
    (tmp_path / "topo.txt").write_text((DATA / "hgx-h100-nv18.txt").read_text())
    inv = inventory_from_sources(nvidia_smi=[f"a={tmp_path / 'q.csv'}:{tmp_path / 'topo.txt'}",
                                             f"b={tmp_path / 'q.csv'}"])
    assert [n.name for n in inv.nodes] == ["a", "b"] and inv.node("b").topology is None
    with pytest.raises(InventoryError, match="exactly one"):
        inventory_from_sources()
    with pytest.raises(InventoryError, match="NODE="):
        inventory_from_sources(nvidia_smi=["just-a-file.csv"])


# -- dict form and schema ----------------------------------------------------------------------
def test_schema_is_valid_draft_2020_12_and_matches_to_dict():
    Draft202012Validator.check_schema(SCHEMA)
    inv = from_kubectl_json(NODE_LIST)
    d = inv.to_dict()
    Draft202012Validator(SCHEMA).validate(d)
    assert Inventory.from_dict(json.loads(json.dumps(d))) == inv


def test_from_dict_defaults_and_errors(tmp_path):
    inv = Inventory.from_dict({"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": [
        {"name": "n", "labels": {"nvidia.com/gpu.count": "4"}, "capacity": {"nvidia.com/gpu": 4, "cpu": "500m"}}]})
    n = inv.node("n")
    assert n.allocatable == {"nvidia.com/gpu": 4, "cpu": 500} and n.gpu.count == 4
    bad = {"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": [{"name": "n", "gpus": 8}]}
    with pytest.raises(InventoryError, match="gpus") as exc:
        Inventory.from_dict(bad, source="inv.yaml")
    assert exc.value.field == "nodes[0]"
    with pytest.raises(InventoryError) as exc:
        Inventory.from_dict({"apiVersion": "gpuvalues/v1", "kind": "Inventory",
                             "nodes": [{"name": "n", "taints": [{"key": "k", "effect": "Never"}]}]})
    assert exc.value.field == "nodes[0].taints[0].effect"
    with pytest.raises(InventoryError, match="whole numbers") as exc:
        Inventory.from_dict({"apiVersion": "gpuvalues/v1", "kind": "Inventory",
                             "nodes": [{"name": "n", "capacity": {"nvidia.com/gpu": "0.5"}}]})
    assert exc.value.field == "nodes[0].capacity.nvidia.com/gpu"


def test_load_inventory_detects_format(tmp_path):
    ours = tmp_path / "inv.yaml"
    ours.write_text(yaml.safe_dump(from_kubectl_json(NODE_LIST).to_dict()))
    kubectl = tmp_path / "nodes.json"
    kubectl.write_text(json.dumps(NODE_LIST))
    assert load_inventory(ours) == load_inventory(kubectl) == from_kubectl_json(NODE_LIST)
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: gpuvalues/v1\nkind: Inventory\nnodes: [\n  {name: a\n")
    with pytest.raises(InventoryError) as exc:
        load_inventory(broken)
    assert exc.value.line is not None and exc.value.source == str(broken)
    other = tmp_path / "other.yaml"
    other.write_text("kind: ConfigMap\n")
    with pytest.raises(InventoryError, match="kind"):
        load_inventory(other)


def test_to_k8s_node_is_a_valid_node():
    import kubernetes_validate

    for node in from_kubectl_json(NODE_LIST).nodes:
        obj = node.to_k8s_node()
        kubernetes_validate.validate(obj, "1.34", strict=True)
        assert from_kubectl_json(obj).nodes[0] == node


names = st.from_regex(r"[a-z]([a-z0-9-]{0,9}[a-z0-9])?", fullmatch=True)  # DNS-1123 labels
label_values = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,8}[A-Za-z0-9])?", fullmatch=True)
resources = st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared",
                                             "cpu", "memory", "pods"]), st.integers(0, 10**6), max_size=4)


@st.composite
def inventories(draw):
    nodes = []
    for name in draw(st.lists(names, unique=True, max_size=4)):
        topo = None
        if draw(st.booleans()):
            topo = Topology.from_dict({"gpus": [0, 1], "links": [["X", "NV4"], ["NV4", "X"]],
                                       "numaAffinity": [draw(st.sampled_from(["0", None])), "1"]})
        nodes.append(Node(
            name=name,
            labels=draw(st.dictionaries(st.sampled_from(["nvidia.com/gpu.product", "a.io/b", "zone"]), label_values,
                                        max_size=3)),
            taints=tuple(draw(st.lists(st.builds(Taint, st.sampled_from(["nvidia.com/gpu", "dedicated"]),
                                                 st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
                                                 st.sampled_from(["", "x"])), max_size=2))),
            capacity=draw(resources), allocatable=draw(resources),
            gpu=GpuInfo(product=draw(st.none() | label_values), count=draw(st.integers(0, 16)),
                        memory_mib=draw(st.none() | st.integers(0, 200000)), mig_capable=draw(st.none() | st.booleans()),
                        mig_strategy=draw(st.sampled_from(["none", "single", "mixed"])),
                        mig_profiles=draw(st.dictionaries(st.sampled_from(["1g.10gb", "3g.40gb", "1g.24gb+me", "1g.10gb.me", "1g.24gb-me"]),
                                                          st.integers(0, 7), max_size=2)),
                        replicas=draw(st.integers(1, 8)),
                        sharing_strategy=draw(st.sampled_from(["none", "time-slicing", "mps"]))),
            topology=topo, unschedulable=draw(st.booleans())))
    return Inventory(tuple(nodes))


@settings(max_examples=60, deadline=None)
@given(inventories())
def test_round_trip_and_schema(inv):
    d = json.loads(json.dumps(inv.to_dict()))
    Draft202012Validator(SCHEMA).validate(d)
    assert Inventory.from_dict(d) == inv


# -- live cluster through the official client ----------------------------------------------------
class _FakeAPIServer(http.server.BaseHTTPRequestHandler):
    """Serves GET /api/v1/nodes only; records the requests it saw."""

    seen: list[str] = []

    def do_GET(self):
        type(self).seen.append(self.path)
        if self.path.startswith("/api/v1/nodes"):
            body = json.dumps({"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                               "items": NODE_LIST["items"][:2]}).encode()
            self.send_response(200)
        else:
            body = b'{"kind":"Status","code":404}'
            self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_live_cluster_via_kubeconfig(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeAPIServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{server.server_port}")
        inv = from_kubernetes(str(kubeconfig), label_selector="nvidia.com/gpu.present=true")
        assert inv == from_kubectl_json({"kind": "List", "items": NODE_LIST["items"][:2]})
        assert any("labelSelector=nvidia.com" in p for p in _FakeAPIServer.seen)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(TransientError, match="cannot reach"):       # retry later: exit 3, not bad input
        from_kubernetes(str(kubeconfig))  # server gone
    with pytest.raises(InventoryError, match="kubeconfig"):
        from_kubernetes(str(tmp_path / "missing"))


def test_mig_resource_names_with_attributes_round_trip():
    node = k8s_node("n", labels={"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.replicas": "2"},
                    capacity={"nvidia.com/mig-1g.10gb.me": "1", "nvidia.com/mig-1g.10gb.shared": "14"})
    inv = from_kubectl_json(node)
    assert dict(inv.node("n").gpu.mig_profiles) == {"1g.10gb.me": 1, "1g.10gb": 7}  # 14 shared / 2 replicas
    Draft202012Validator(SCHEMA).validate(inv.to_dict())
    assert Inventory.from_dict(inv.to_dict()) == inv




@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_malformed_nodes_give_an_inventory_error_or_an_inventory(data):
    doc = json.loads(json.dumps(NODE_LIST))
    for _ in range(data.draw(st.integers(1, 3))):
        corrupt(data, doc)
    try:
        inv = from_kubectl_json(doc)
    except InventoryError as exc:
        assert str(exc)
    else:
        Draft202012Validator(SCHEMA).validate(inv.to_dict())
