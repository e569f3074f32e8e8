"""Device-plugin config validator: the plugin's own table-driven cases (ported as data) plus its rules."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gpuvalues import catalog
from gpuvalues.errors import DevicePluginConfigError, GpuValuesError
from gpuvalues.planners import deviceplugin

CASES = yaml.safe_load((Path(__file__).parent / "data" / "device_plugin_config_cases.yaml").read_text())


def wrap(kind, value):
    if kind == "devices":
        return {"version": "v1", "sharing": {"timeSlicing": {"resources": [
            {"name": "nvidia.com/gpu", "replicas": 2, "devices": value}]}}}
    if kind == "resource":
        return {"version": "v1", "sharing": {"timeSlicing": {"resources": [value]}}}
    if kind == "replicated":
        return {"version": "v1", "sharing": {"timeSlicing": value}}
    return {"version": "v1", kind: value}


@pytest.mark.parametrize("kind, case", [(k, c) for k in ("devices", "resource", "replicated", "flags", "imex")
                                        for c in CASES[k]], ids=lambda x: str(x))
def test_upstream_cases(kind, case):
    cfg = wrap(kind, case["input"])
    if case["valid"]:
        deviceplugin.validate_device_plugin_config(cfg)
    else:
        with pytest.raises(DevicePluginConfigError) as exc:
            deviceplugin.validate_device_plugin_config(cfg)
        assert exc.value.field  # the error names the field


@pytest.mark.parametrize("case", CASES["device_refs"], ids=lambda c: c["input"])
def test_device_ref_kind(case):
    assert deviceplugin.device_ref_kind(case["input"]) == case["kind"]


@pytest.mark.parametrize("case", CASES["patterns"], ids=lambda c: f"{c['pattern']}~{c['input']}")
def test_resource_pattern_matches(case):
    assert deviceplugin.resource_pattern_matches(case["pattern"], case["input"]) is case["expected"]


@pytest.mark.parametrize("case", CASES["mps_fail_requests_default"], ids=str)
def test_mps_fail_requests_default(case):
    deviceplugin.validate_device_plugin_config(case["input"])
    assert deviceplugin.effective_fail_requests_greater_than_one(case["input"]) is case["expected"]


def _gpu_with_cc(cc):
    return next(g for g in catalog.all_gpus() if g.compute_capability == cc)


@pytest.mark.parametrize("case", CASES["mps_max_clients"], ids=str)
def test_mps_max_clients(case):
    gpu = _gpu_with_cc(case["compute_capability"])
    if "max_clients" in case:
        assert deviceplugin.mps_max_clients(gpu) == case["max_clients"]
        return
    cfg = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": case["replicas"]}]}}}
    if case["valid"]:
        deviceplugin.validate_device_plugin_config(cfg, gpu=gpu)
    else:
        with pytest.raises(DevicePluginConfigError, match="maximum allowed replicas exceeded") as exc:
            deviceplugin.validate_device_plugin_config(cfg, gpu=gpu)
        assert exc.value.field == "sharing.mps.resources[0].replicas"


TS = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
MPS = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


def edit(base, path, value):
    cfg = copy.deepcopy(base)
    node = cfg
    for k in path[:-1]:
        node = node.setdefault(k, {}) if isinstance(k, str) else node[k]
    node[path[-1]] = value
    return cfg


# Each rule from the issue / the plugin, with the field the error must name.
@pytest.mark.parametrize("cfg, field, text", [
    (edit(TS, ["version"], "v2"), "version", "unknown version: v2"),
    (edit(TS, ["flags"], {"migStrategy": "auto"}), "flags.migStrategy", "unknown MIG strategy"),
    (edit(TS, ["flags"], {"plugin": {"deviceIDStrategy": "serial"}}), "flags.plugin.deviceIDStrategy", "uuid, index"),
    (edit(TS, ["flags"], {"plugin": {"deviceListStrategy": ["envvar", "bogus"]}}), "flags.plugin.deviceListStrategy[1]", "envvar"),
    (edit(TS, ["flags"], {"plugin": {"sharedDevicesAllocationPolicy": "spread"}}), "flags.plugin.sharedDevicesAllocationPolicy", "distributed, packed"),
    (edit(TS, ["flags"], {"deviceDiscoveryStrategy": "pci"}), "flags.deviceDiscoveryStrategy", "auto, nvml, tegra"),
    (edit(TS, ["flags"], {"gfd": {"sleepInterval": "soon"}}), "flags.gfd.sleepInterval", "Go duration"),
    (edit(TS, ["flags"], {"failOnInitError": "yes please"}), "flags.failOnInitError", "true or false"),
    ({"version": "v1", "sharing": {"timeSlicing": {}}}, "sharing.timeSlicing.resources", "no resources specified"),
    (edit(TS, ["sharing", "timeSlicing", "resources", 0, "replicas"], 1), "sharing.timeSlicing.resources[0].replicas", ">= 2"),
    (edit(TS, ["sharing", "timeSlicing", "resources", 0, "name"], "a" * 53), "sharing.timeSlicing.resources[0].name", "63 characters"),
    (edit(TS, ["sharing", "timeSlicing", "resources", 0, "name"], "nvidia.com/GPU"), "sharing.timeSlicing.resources[0].name", "DNS subdomain"),
    (edit(TS, ["sharing", "timeSlicing", "resources", 0, "name"], "example.com/gpu"), "sharing.timeSlicing.resources[0].name", "DNS subdomain"),
    (edit(MPS, ["flags"], {"migStrategy": "mixed"}), "flags.migStrategy", "mixed is not supported with MPS"),
    (edit(MPS, ["sharing", "mps", "resources", 0, "name"], "nvidia.com/mig-1g.10gb"), "sharing.mps.resources[0].name", "only full GPUs"),
    (edit(TS, ["sharing", "mps"], MPS["sharing"]["mps"]), "sharing", "mutually exclusive"),
    (edit(TS, ["sharing", "timeslicing"], {}), "sharing.timeslicing", "unknown key"),
    (edit(TS, ["imex"], {"channelIDs": [0, 1]}), "imex.channelIDs", "[] or [0]"),
    ([1, 2], None, "must be a mapping"),
])
def test_rules(cfg, field, text):
    with pytest.raises(DevicePluginConfigError) as exc:
        deviceplugin.validate_device_plugin_config(cfg, source="dp.yaml")
    assert exc.value.field == field
    assert text in str(exc.value)
    assert str(exc.value).startswith("dp.yaml: ")
    assert isinstance(exc.value, GpuValuesError)


def test_longest_valid_resource_name():
    name = "nvidia.com/" + "a" * 52  # exactly 63
    deviceplugin.validate_device_plugin_config(edit(TS, ["sharing", "timeSlicing", "resources", 0, "name"], name))
    assert deviceplugin.normalize_resource_name("gpu") == "nvidia.com/gpu"


def test_mps_on_mig_nodes_rejected():
    with pytest.raises(DevicePluginConfigError, match="not supported for MIG devices"):
        deviceplugin.validate_device_plugin_config(MPS, mig_enabled=True)
    with pytest.raises(DevicePluginConfigError, match="requires mpsRoot") as exc:
        deviceplugin.validate_device_plugin_config(MPS, mps_root_provided=False)
    assert exc.value.field == "flags.mpsRoot"
    deviceplugin.validate_device_plugin_config(edit(MPS, ["flags"], {"mpsRoot": "/run/nvidia/mps"}), mps_root_provided=False)


def test_ignored_settings_are_warned():
    cfg = edit(TS, ["sharing", "timeSlicing", "resources", 0, "rename"], "gpu-shared")
    cfg["resources"] = {"gpus": [{"pattern": "*", "name": "gpu"}]}
    warnings = deviceplugin.validate_device_plugin_config(cfg)
    assert any("rename" in w for w in warnings) and any(w.startswith("resources:") for w in warnings)


def test_strategy_and_builder():
    assert deviceplugin.sharing_strategy(TS) == "time-slicing"
    assert deviceplugin.sharing_strategy(MPS) == "mps"
    assert deviceplugin.sharing_strategy({"version": "v1"}) == "none"
    cfg = deviceplugin.build_device_plugin_config(sharing="time-slicing", replicas=3)
    assert cfg == {"version": "v1", "flags": {"migStrategy": "none", **deviceplugin.CONTAINER_FEATURES}, "sharing": {"timeSlicing": {
        "failRequestsGreaterThanOne": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}}
    mixed = deviceplugin.build_device_plugin_config(mig_strategy="mixed")
    assert mixed == {"version": "v1", "flags": {"migStrategy": "mixed", **deviceplugin.CONTAINER_FEATURES}}
    with pytest.raises(DevicePluginConfigError, match="mixed is not supported with MPS"):
        deviceplugin.build_device_plugin_config(mig_strategy="mixed", sharing="mps", replicas=2)
    with pytest.raises(DevicePluginConfigError, match="maximum allowed replicas"):
        deviceplugin.build_device_plugin_config(sharing="mps", replicas=17, gpu="V100-32GB")


def test_mps_client_limits_hand_computed():
    # A100-80GB: 80 GiB = 81920 MiB; 4 clients -> 20480 MiB and 25 % threads each; 3 -> 27306 MiB, 33 %
    assert deviceplugin.mps_client_limits("A100-80GB", 4) == {"memory_limit_mib": 20480, "active_thread_percentage": 25}
    assert deviceplugin.mps_client_limits("A100-80GB", 3) == {"memory_limit_mib": 27306, "active_thread_percentage": 33}
    assert deviceplugin.mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
