"""The e2e fleet comes from hardware: tests/e2e/hardware.yaml carries no GPU label and no
GPU resource, the generated inventory's GPU facts are the device plugin's and GFD's, and
`gpuvalues fit` (the CLI) reads the same generated nodes the e2e cluster creates."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.e2e import fleet
from tests.oracle import oraclelib as ol

# Labels the description may set because no GPU-stack component derives them from the
# hardware (see the header of tests/e2e/hardware.yaml).
_NOT_FROM_GFD = {"nvidia.com/gpu.present", "nvidia.com/gpu.topology", "nvidia.com/device-plugin.config"}


def test_hardware_descriptions_hold_no_gpu_labels_or_resources():
    doc = yaml.safe_load(fleet.HARDWARE.read_text())
    for n in doc["nodes"]:
        assert "labels" not in n, f"{n['name']}: hand-written labels"
        assert not [k for k in n["resources"] if k.startswith("nvidia.com/")], f"{n['name']}: GPU resources"


def test_generated_gpu_facts_are_upstream_ones(tmp_path):
    doc = yaml.safe_load(fleet.HARDWARE.read_text())
    inv = {n["name"]: n for n in fleet.inventory()["nodes"]}
    plugin_env, gfd_env = fleet._plugin_env()
    for n in doc["nodes"]:
        node = inv[n["name"]]
        if "hardware" not in n:
            assert not [k for k in node.get("labels", {}) if k.startswith("nvidia.com/")]
            continue
        v = ol.device_plugin(yaml.safe_dump(doc["configs"][n["config"]]), n["hardware"],
                             plugin_env=plugin_env, gfd_env=gfd_env)
        gpu_labels = {k: x for k, x in node["labels"].items() if k not in _NOT_FROM_GFD}
        assert gpu_labels == v.labels, n["name"]
        assert {k: x for k, x in node["allocatable"].items() if k.startswith("nvidia.com/")} == v.resources


def test_gpuvalues_fit_reads_the_generated_fleet(tmp_path):
    """`gpuvalues fit --inventory` on the generated nodes: an 8-GPU NV8 workload fits the
    A100 nodes at 2 replicas and not at 3 (two dgx-a100 nodes of 8 GPUs)."""
    inv = fleet.write_inventory(tmp_path)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "gpu": {"mode": "whole", "count": 8},
        "gpuProducts": ["NVIDIA-A100-SXM4-80GB"],
        "topology": {"values": ["NV8"]},
        "autoscaling": {"engine": "none"}, "replicaCount": 2}))
    def fit(replicas: int) -> tuple[int, str]:
        values.write_text(values.read_text().replace(f"replicaCount: {replicas - 1}", f"replicaCount: {replicas}"))
        p = subprocess.run([str(ol.GPUVALUES), "fit", "--values", str(values), "--inventory", str(inv),
                            "--kube-version", "1.34.0", "--output", "json"], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr
    rc, out = fit(2)
    assert rc == 0, out
    rc, out = fit(3)
    assert rc == 1, out


def _examples():
    return sorted(p.stem for p in ol.EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("example", _examples())
def test_expected_nodes_are_what_upstream_makes_of_the_fleet(example):
    """gpuvalues.expected_nodes (the fleet's node-side belief: what `fit` and the checks
    schedule against) vs the device plugin's and GFD's own verdict on every node group
    of the example (fleet.fleet_gpu_nodes, the fleet e2e test's nodes): the same node
    names, allocatable GPU resources and GPU labels."""
    import gpuvalues
    f = gpuvalues.build_fleet(gpuvalues.load_spec(ol.EXAMPLES / f"{example}.yaml"))
    assert not f.errors, f.errors
    believed = {n.name: n for n in gpuvalues.expected_nodes(f).nodes}
    upstream = {name: (labels, res) for name, _, labels, res in fleet.fleet_gpu_nodes(f)}
    assert set(believed) == set(upstream)
    for name, (labels, res) in upstream.items():
        n = believed[name]
        gpu = {k: v for k, v in n.allocatable.items() if k.startswith("nvidia.com/")}
        assert gpu == res, f"{example} {name}: the project believes {gpu}; the device plugin advertises {res}"
        diff = {k: (v, labels.get(k)) for k, v in n.labels.items() if labels.get(k) != v}
        assert not diff, f"{example} {name}: label (project belief, GFD): {diff}"


def test_negative_control_a_wrong_belief_is_caught():
    """The same comparison fails when the fleet's device-plugin config is not the one the
    node group's label selects (the renamed time-slicing group's label dropped)."""
    import gpuvalues
    from tests.e2e import fleetlib
    f = gpuvalues.build_fleet(gpuvalues.load_spec(ol.EXAMPLES / "time-slicing-renamed-and-not.yaml"))
    believed = {n.name: n for n in gpuvalues.expected_nodes(f).nodes}
    broken = fleetlib.without_config_label(f, "l4")
    upstream = {name: res for name, _, _, res in fleet.fleet_gpu_nodes(broken)}
    assert believed["l4-001"].allocatable.get("nvidia.com/gpu.shared", 0) > 0
    assert "nvidia.com/gpu.shared" not in upstream["l4-001"], upstream


def test_config_manager_selection_follows_upstream_order():
    files = {"default", "ts-4"}
    assert fleet.select_config("ts-4", files, "", ["named"]) == "ts-4"
    assert fleet.select_config("", files, "ts-4", ["named"]) == "ts-4"
    assert fleet.select_config("", files, "", ["named", "single"]) == "default"
    assert fleet.select_config("", {"only"}, "", ["named", "single"]) == "only"
    assert fleet.select_config("", {"a", "b"}, "", ["named", "single", "empty"]) == ""
    with pytest.raises(AssertionError):
        fleet.select_config("missing", files, "", ["named"])
