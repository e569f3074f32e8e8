"""The e2e fleet comes from hardware: tests/e2e/hardware.yaml carries no GPU label and no
GPU resource, the generated inventory's GPU facts are the device plugin's and GFD's, and
`gpuvalues fit` (the CLI) reads the same generated nodes the e2e cluster creates."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

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
