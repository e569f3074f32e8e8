"""The platform release judged by upstream (issue 22): mig-manager's ConfigMap by the real
nvidia-mig-parted (below), and the device plugin's container-side defaults (item 6) by the real device
plugin v0.19.1 (ci/oracle/deviceplugin: api/config/v1 NewConfig with the plugin's own flag
table, env and config-file precedence). Since v0.19 `--gds-enabled`, `--mofed-enabled` and
`--gdrcopy-enabled` default to true; each true flag makes every Allocate response set
NVIDIA_GDS / NVIDIA_MOFED / NVIDIA_GDRCOPY=enabled (internal/plugin/server.go
getAllocateResponse, restated by `injected_env` below: the oracle resolves the flags,
upstream's six lines map them to env). Every config the platform release of every example
ships, with the device plugin container's env and args as the chart renders them, must
resolve to all three off (gpuvalues.planners.deviceplugin.CONTAINER_FEATURES says why)."""
from __future__ import annotations

import pytest
import yaml

from gpuvalues.checks.spec import load_spec
from gpuvalues.fleet import build_fleet
from tests.chart.chartlib import render
from tests.conftest import ROOT
from tests.oracle import oraclelib as ol

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def injected_env(flags: dict) -> dict[str, str]:
    """internal/plugin/server.go (v0.19.1) getAllocateResponse: the env a container gets."""
    out = {}
    for flag, var in (("gdrcopyEnabled", "NVIDIA_GDRCOPY"), ("gdsEnabled", "NVIDIA_GDS"),
                      ("mofedEnabled", "NVIDIA_MOFED")):
        if flags.get(flag):
            out[var] = "enabled"
    return out


def _platform(path, helm):
    fleet = build_fleet(load_spec(path))
    r = fleet.platform
    objs = render(helm, values=dict(r.values), release=r.name, namespace=r.namespace,
                  kube_version=fleet.spec.kubernetes_version)
    return fleet, objs


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_no_gpu_container_gets_gds_mofed_or_gdrcopy(helm4, path):
    fleet, objs = _platform(path, helm4)
    configs = ol.device_plugin_configs(objs)
    assert configs, path.stem
    plugin = ol.container_env_args(objs, "-device-plugin", "nvidia-device-plugin")
    # a DRA-only fleet runs no device plugin (GFD still reads the configs)
    assert (plugin is not None) == fleet.platform.values["platform"]["devicePlugin"]["enabled"]
    env, args = plugin or ({}, [])
    hw = ol.hardware_for_gpu("A100-80GB", 2)
    for name, text in sorted(configs.items() if plugin else ()):
        cfg = yaml.safe_load(text)
        if (cfg.get("flags") or {}).get("migStrategy", "none") != "none" or cfg.get("sharing", {}).get("mps"):
            continue          # MIG and MPS configs need other mock nodes; same flags, checked below
        v = ol.device_plugin(text, hw, plugin_env=env, plugin_args=args, gfd=False)
        assert v.ok, (path.stem, name, v.error)
        flags = v.plugin_config["flags"]
        assert injected_env(flags) == {}, (path.stem, name, flags)
    for name, text in configs.items():      # every config says so itself
        flags = yaml.safe_load(text).get("flags") or {}
        assert (flags.get("gdsEnabled"), flags.get("mofedEnabled"), flags.get("gdrcopyEnabled")) == \
            (False, False, False), (path.stem, name)


def test_upstream_defaults_would_inject_all_three(helm4):
    """Negative control: the same chart env and a config without the three flags (what the
    chart rendered before issue 22) resolve to on: upstream's v0.19.1 defaults."""
    _, objs = _platform(ROOT / "examples" / "single-a100.yaml", helm4)
    env, args = ol.container_env_args(objs, "-device-plugin", "nvidia-device-plugin")
    v = ol.device_plugin("version: v1\nflags:\n  migStrategy: none\n", ol.hardware_for_gpu("A100-80GB", 2),
                         plugin_env=env, plugin_args=args, gfd=False)
    assert v.ok, v.error
    assert injected_env(v.plugin_config["flags"]) == {
        "NVIDIA_GDRCOPY": "enabled", "NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled"}
    # and the environment beats the config file (api/config/v1/flags.go updateFromCLIFlag)
    v = ol.device_plugin("version: v1\nflags:\n  migStrategy: none\n  gdsEnabled: false\n",
                         ol.hardware_for_gpu("A100-80GB", 2), plugin_env={**env, "GDS_ENABLED": "true"},
                         plugin_args=args, gfd=False)
    assert v.plugin_config["flags"]["gdsEnabled"] is True


# --- mig-manager's ConfigMap (issue 22 item 1) ----------------------------------------------

MIG_EXAMPLES = [p for p in EXAMPLES if build_fleet(load_spec(p)).layout.mig_parted]


@pytest.mark.parametrize("path", MIG_EXAMPLES, ids=lambda p: p.stem)
def test_mig_manager_configmap_is_valid_for_every_group_to_mig_parted(helm4, path):
    """The file mig-manager reads (CONFIG_FILE, from the chart's ConfigMap) holds, for every
    node group's nvidia.com/mig.config, a config the real nvidia-mig-parted accepts."""
    fleet, objs = _platform(path, helm4)
    [cm] = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-mig-manager")]
    [ds] = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-mig-manager")]
    [c] = ds["spec"]["template"]["spec"]["containers"]
    config_file = {e["name"]: e.get("value") for e in c["env"]}["CONFIG_FILE"]
    [mount] = [m for m in c["volumeMounts"] if config_file.startswith(m["mountPath"] + "/")]
    [vol] = [v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]
    text = cm["data"][config_file.rsplit("/", 1)[1]]
    # the plan's configs, plus the chart default's all-disabled (Helm merges the maps)
    got = yaml.safe_load(text)
    assert got["mig-configs"].pop("all-disabled") == [{"devices": "all", "mig-enabled": False}]
    assert got == fleet.layout.mig_parted
    selected = {g.labels["nvidia.com/mig.config"] for g in fleet.layout.node_groups
                if "nvidia.com/mig.config" in g.labels}
    assert selected
    for name in sorted(selected):
        ok, msg = ol.migparted_assert_valid(text, name)
        assert ok, (path.stem, name, msg)
    ok, _ = ol.migparted_assert_valid(text, "no-such-config")      # negative control
    assert not ok
