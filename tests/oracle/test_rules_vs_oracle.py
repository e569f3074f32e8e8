"""The project's rules that mirror the device plugin / GFD, compared with the upstream
code on generated cases (not with the project's own expectations).

The project's belief is reached through tests/oracle/belief.py only. Every case must
agree, including the one issue 12 fixed (GFD appends -SHARED to the product label only when
the shared resource is NOT renamed, k8s-device-plugin internal/lm/resource.go
getProductName), which was xfail here until then."""
from __future__ import annotations

import itertools
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.oracle import belief
from tests.oracle import oraclelib as ol

GPUS = ("A100-80GB", "H100-80GB-SXM", "NVIDIA GeForce RTX 4090")

def _chart_plugin_env() -> dict:
    """The chart's device-plugin container env (MPS_ROOT etc.), as rendered."""
    env, _ = ol.container_env_args(ol.rendered("platform-on"), "-device-plugin", "nvidia-device-plugin")
    return env


# --- A: the product label rule, config by config -----------------------------------------

def _config_cases():
    cases = [pytest.param(gpu, None, False, False, 0, id=f"{gpu}-none") for gpu in GPUS]
    for gpu, kind, renamed, fail_gt1, replicas in itertools.product(
            GPUS, ("timeSlicing", "mps"), (False, True), (False, True), (2, 4)):
        cases.append(pytest.param(gpu, kind, renamed, fail_gt1, replicas,
                                  id=f"{gpu}-{kind}-renamed{renamed}-failGt1{fail_gt1}-x{replicas}"))
    return cases


@pytest.mark.parametrize(("gpu", "kind", "renamed", "fail_gt1", "replicas"), _config_cases())
def test_gfd_product_label_rule(gpu, kind, renamed, fail_gt1, replicas):
    cfg: dict = {"version": "v1", "flags": {"migStrategy": "none"}}
    if kind:
        cfg["sharing"] = {kind: {"renameByDefault": renamed, "failRequestsGreaterThanOne": fail_gt1,
                                 "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}}
    v = ol.device_plugin(yaml.safe_dump(cfg), ol.hardware_for_gpu(gpu, 2), plugin_env=_chart_plugin_env())
    assert v.ok, v.error
    expected = belief.gfd_products(gpu, cfg if kind else None)
    product = v.labels["nvidia.com/gpu.product"]
    assert product in expected, f"GFD labels {product!r}; the project expects one of {expected} ({cfg})"
    # The advertised resource: the project's fleet rule (spec_inventory) counts
    # nvidia.com/gpu.shared = GPUs x replicas for shared pools, nvidia.com/gpu otherwise.
    if kind:
        name = "nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"
        assert v.resources == {name: 2 * replicas}, v.resources
    else:
        assert v.resources == {"nvidia.com/gpu": 2}


# --- B: whole fleets from generated specs, through the CLI --------------------------------

def _spec(gpu: str, mode: str, replicas: int | None, profile: str | None) -> dict:
    sharing: dict | str = mode
    if mode in ("time-slicing", "mps"):
        sharing = {"mode": mode, "replicasPerGpu": replicas}
    elif mode == "mig":
        sharing = {"mode": "mig", "migProfile": profile}
    pool = {"name": "pool", "gpu": gpu, "gpusPerNode": 2, "nodes": 2}
    if mode == "mig":
        pool["mig"] = True
    return {"apiVersion": "gpuvalues/v1", "kubernetesVersion": "1.34.0",
            "cluster": {"nodePools": [pool]},
            "workloads": [{"name": "w", "model": "microsoft/Phi-3-mini-4k-instruct", "server": "vllm",
                           "memoryGB": 5, "throughputPerReplica": 2, "load": {"base": 1, "peak": 4}}],
            "sharing": sharing,
            "autoscaling": {"engine": "hpa", "metric": "choose"}}


def _spec_cases():
    cases = []
    for gpu in GPUS:
        cases.append(("whole", gpu, None, None))
        for mode, r in itertools.product(("time-slicing", "mps"), (2, 4)):
            cases.append((mode, gpu, r, None))
        if "4090" not in gpu:
            for profile in ("1g.10gb", "2g.20gb", "3g.40gb"):
                cases.append(("mig", gpu, None, profile))
    return cases


def _fleet(spec: dict):
    """(oracle verdict, believed node) for the spec's configured pool."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        art = Path(tmp) / "art"
        proc = subprocess.run([str(ol.GPUVALUES), "-q", "values", str(path), "-o", str(Path(tmp) / "v.yaml"),
                               "--artifacts", str(art)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{spec['sharing']}: {proc.stderr}"
        arts = {p.name: yaml.safe_load(p.read_text()) for p in art.glob("*.yaml")}
    nodes = belief.spec_nodes(spec)
    configured = [n for n in nodes if "nvidia.com/device-plugin.config" in n["labels"]] or nodes
    node = configured[0]
    cfg_name = node["labels"].get("nvidia.com/device-plugin.config", "default")
    cfg = (arts.get("device-plugin-configs.yaml") or {}).get(cfg_name, {"version": "v1"})
    mig = ol.mig_layout(arts.get("mig-parted-config.yaml"), node["labels"].get("nvidia.com/mig.config", ""), 2)
    v = ol.device_plugin(yaml.safe_dump(cfg), ol.hardware_for_gpu(spec["cluster"]["nodePools"][0]["gpu"], 2, mig),
                         plugin_env=_chart_plugin_env())
    assert v.ok, f"{spec['sharing']} on {spec['cluster']['nodePools'][0]['gpu']}: {v.component}: {v.error}"
    return v, node


@pytest.mark.parametrize(("mode", "gpu", "replicas", "profile"), [
    pytest.param(*c, id="-".join(str(x) for x in c if x)) for c in _spec_cases()])
def test_fleet_allocatable_matches_device_plugin(mode, gpu, replicas, profile):
    """gpuvalues' spec_inventory (what `fit` schedules against) vs what the plugin advertises."""
    v, node = _fleet(_spec(gpu, mode, replicas, profile))
    assert node["allocatable"] == v.resources, (
        f"{mode} on {gpu}: the project believes the node offers {node['allocatable']}; "
        f"the device plugin advertises {v.resources}")


@pytest.mark.parametrize(("mode", "gpu", "replicas", "profile"), [
    pytest.param(*c, id="-".join(str(x) for x in c if x))
    for c in _spec_cases()])
def test_fleet_gfd_labels_match(mode, gpu, replicas, profile):
    """The GFD labels the project believes the node carries (spec_inventory) vs GFD's."""
    v, node = _fleet(_spec(gpu, mode, replicas, profile))
    gfd_keys = [k for k in node["labels"] if k in v.labels or k.startswith("nvidia.com/gpu.")
                and k not in ("nvidia.com/gpu.topology",)]
    diff = {k: (node["labels"][k], v.labels.get(k)) for k in gfd_keys if node["labels"][k] != v.labels.get(k)}
    assert not diff, f"{mode} on {gpu}: label (project belief, GFD): {diff}"


# --- C: nodes whose GPUs differ in MIG mode (issue 23: whole replicas beside MIG) -----------

def _mixed_spec(gpu: str, whole_gpus: int, profile: str) -> dict:
    return {"apiVersion": "gpuvalues/v1", "kubernetesVersion": "1.34.0",
            "cluster": {"nodePools": [{"name": "pool", "gpu": gpu, "gpusPerNode": 4, "nodes": 1,
                                       "mig": True, "topology": {"label": "NV4"}}]},
            "workloads": [{"name": "big", "model": "m/big", "gpus": whole_gpus, "sharing": "whole"},
                          {"name": "small", "model": "m/small", "server": "vllm", "memoryGB": 5,
                           "sharing": {"mode": "mig", "migProfile": profile}}],
            "autoscaling": {"engine": "hpa", "maxReplicas": 1}}


@pytest.mark.parametrize(("gpu", "whole_gpus", "profile"), [
    ("A100-80GB", 2, "1g.10gb"), ("A100-80GB", 3, "3g.40gb"), ("H100-80GB-SXM", 1, "2g.20gb")])
def test_mixed_mig_node_allocatable_matches_device_plugin(gpu, whole_gpus, profile):
    """A node with whole-GPU replicas on MIG-disabled GPUs and MIG on the rest (one
    mig-parted config with per-device entries, the plugin's mixed strategy): what the
    project believes it offers vs what the device plugin advertises on that layout."""
    spec = _mixed_spec(gpu, whole_gpus, profile)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        art = Path(tmp) / "art"
        proc = subprocess.run([str(ol.GPUVALUES), "-q", "values", str(path), "-o", str(Path(tmp) / "v"),
                               "--artifacts", str(art)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        arts = {p.name: yaml.safe_load(p.read_text()) for p in art.glob("*.yaml")}
    (node,) = belief.spec_nodes(spec)
    assert node["allocatable"].get("nvidia.com/gpu", 0) >= whole_gpus
    assert node["allocatable"].get(f"nvidia.com/mig-{profile}", 0) >= 1      # one node, both kinds
    cfg = arts["device-plugin-configs.yaml"][node["labels"]["nvidia.com/device-plugin.config"]]
    mig = ol.mig_layout(arts["mig-parted-config.yaml"], node["labels"]["nvidia.com/mig.config"], 4)
    ok, err = ol.migparted_assert_valid(yaml.safe_dump(arts["mig-parted-config.yaml"]),
                                        node["labels"]["nvidia.com/mig.config"])
    assert ok, err
    v = ol.device_plugin(yaml.safe_dump(cfg), ol.hardware_for_gpu(gpu, 4, mig), plugin_env=_chart_plugin_env())
    assert v.ok, f"{v.component}: {v.error}"
    assert node["allocatable"] == v.resources, (node["allocatable"], v.resources)
