"""The device plugin's container-side features per node pool (issue 22 item 6): since
v0.19.1 the plugin starts every GPU container with NVIDIA_GDS, NVIDIA_MOFED and
NVIDIA_GDRCOPY=enabled unless its config says false. Each pool's `containerFeatures`
becomes the explicit flags of the configs its node groups select
(gpuvalues.fleet.layout._container_features); the device plugin's own config loading (the
oracle) says which flags a node's plugin ends up with, and the Allocate response's env
follows from them as internal/plugin/server.go getAllocateResponse (v0.19.1) sets it:

    if GDRCopyEnabled: NVIDIA_GDRCOPY=enabled; if GDSEnabled: NVIDIA_GDS=enabled;
    if MOFEDEnabled: NVIDIA_MOFED=enabled

(restated: the oracle cannot build internal/plugin, whose CDI package needs a
nvidia-container-toolkit pseudo-version the module proxy's checksum database lacks).
"""
from __future__ import annotations

import yaml

from gpuvalues.checks.spec import spec_from_text
from gpuvalues.fleet import build_fleet
from tests.oracle import oraclelib as ol

#: internal/plugin/server.go: config flag -> the env the container gets
ENV_OF_FLAG = {"gdrcopyEnabled": "NVIDIA_GDRCOPY", "gdsEnabled": "NVIDIA_GDS", "mofedEnabled": "NVIDIA_MOFED"}


def injected_env(config_text: str, hw: dict) -> dict[str, str]:
    """The container-feature env the plugin injects with this config on this hardware."""
    env, args = ol.container_env_args(ol.rendered("platform-on"), "-device-plugin", "nvidia-device-plugin")
    v = ol.device_plugin(config_text, hw, plugin_env=env, plugin_args=args, gfd=False)
    assert v.ok, v.raw
    flags = v.plugin_config["flags"]
    return {e: "enabled" for f, e in ENV_OF_FLAG.items() if flags.get(f)}


def test_each_pool_gets_its_own_container_features():
    doc = yaml.safe_load((ol.EXAMPLES / "time-slicing-renamed-and-not.yaml").read_text())
    doc["cluster"]["nodePools"][0]["containerFeatures"] = {"gds": True, "mofed": True}
    fleet = build_fleet(spec_from_text(yaml.safe_dump(doc), "container-features.yaml"))
    assert not fleet.errors, fleet.errors
    pools = {p.name: p for p in fleet.spec.node_pools}
    got = {}
    for g in fleet.layout.node_groups:
        cfg = fleet.layout.device_plugin_configs[g.device_plugin_config]
        hw = ol.hardware_for_gpu(pools[g.pool].gpu.name, pools[g.pool].gpus_per_node)
        got[g.pool] = injected_env(yaml.safe_dump(dict(cfg)), hw)
    first, second = (p["name"] for p in doc["cluster"]["nodePools"])
    assert got == {first: {"NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled"}, second: {}}, got


def test_negative_control_without_the_explicit_flags_every_feature_is_on():
    """A config that does not say (the chart set none before issue 22): v0.19.1's defaults
    turn all three on, on every node."""
    hw = ol.hardware_for_gpu("NVIDIA L4", 1)
    assert injected_env("version: v1\nflags:\n  migStrategy: none\n", hw) == {
        "NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled", "NVIDIA_GDRCOPY": "enabled"}
