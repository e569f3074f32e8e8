"""The GPU Operator mode's ConfigMaps read by upstream (issue 22 item 2): the gpu-operator
chart (tests/chart/data/gpu-operator-v26.7.0) rendered with the real Helm 4 and the
operator values `gpuvalues values` writes; every config each node group's label selects
in the rendered device-plugin ConfigMap is fed to the device plugin's own config loading
and resource managers (the oracle, on the group's hardware and MIG layout) with the env
the operator gives its device plugin, and every selected MIG config to the real
`nvidia-mig-parted assert --valid-config`.

The operator's device-plugin env: assets/state-device-plugin/0500_daemonset.yaml at
v26.7.0 (PASS_DEVICE_SPECS, FAIL_ON_INIT_ERROR, DEVICE_LIST_STRATEGY, DEVICE_ID_STRATEGY,
MPS_ROOT) with controllers/object_controls.go applyMIGConfiguration (MIG_STRATEGY from
the ClusterPolicy's mig.strategy) and the ClusterPolicy's devicePlugin.env. Left out:
transformDevicePluginCtrForCDI's CDI device-list strategies (how devices reach a
container, not which configs or resources a node gets).
"""
from __future__ import annotations

import pytest

from gpuvalues.planners.deviceplugin import CONFIG_LABEL
from gpuvalues.planners.mig.migparted import MIG_CONFIG_LABEL
from tests.chart.chartlib import HELMS, by_kind
from tests.chart.test_gpu_operator import EXAMPLES, operator_fleet, render_operator
from tests.oracle import oraclelib as ol

#: assets/state-device-plugin/0500_daemonset.yaml (v26.7.0), the nvidia-device-plugin container
OPERATOR_PLUGIN_ENV = {"PASS_DEVICE_SPECS": "true", "FAIL_ON_INIT_ERROR": "true", "DEVICE_LIST_STRATEGY": "envvar",
                       "DEVICE_ID_STRATEGY": "uuid", "NVIDIA_VISIBLE_DEVICES": "all",
                       "NVIDIA_DRIVER_CAPABILITIES": "all", "MPS_ROOT": "/run/nvidia/mps"}


def _checks(fleet, objs):
    """(where, verdict or mig-parted result, what the group's workloads request)."""
    [cp] = by_kind(objs, "ClusterPolicy")
    spec = cp["spec"]
    cms = {c["metadata"]["name"]: c["data"] for c in by_kind(objs, "ConfigMap")}
    env = {**OPERATOR_PLUGIN_ENV, **{e["name"]: str(e["value"]) for e in spec["devicePlugin"].get("env") or []}}
    if spec.get("mig", {}).get("strategy"):
        env["MIG_STRATEGY"] = spec["mig"]["strategy"]
    dp = spec["devicePlugin"].get("config") or {}
    configs = cms.get(dp.get("name"), {})
    pools = {p.name: p for p in fleet.spec.node_pools}
    place = {p.workload: p for p in fleet.placements}
    out = []
    for g in fleet.layout.node_groups:
        pool = pools[g.pool]
        mig = {str(i): [p for p, n in sorted(d.items()) for _ in range(n)] for i, d in enumerate(g.mig_devices or ()) if d}
        hw = ol.hardware_for_gpu(pool.gpu.name, pool.gpus_per_node, mig or None)
        name = g.labels.get(CONFIG_LABEL) or dp.get("default", "")
        wants = {place[w].resource for w in g.workloads if place[w].mode != "dra"}
        where = f"node group {g.name}, config {name!r}"
        if g.labels.get("nvidia.com/gpu.deploy.device-plugin") == "false":
            continue
        text = configs.get(name)
        v = ol.device_plugin(text, hw, plugin_env=env, gfd=False) if text is not None else None
        out.append((where, v, wants))
        if MIG_CONFIG_LABEL in g.labels:
            mm = spec["migManager"].get("config") or {}
            cfg = cms.get(mm.get("name"), {}).get("config.yaml", "")
            out.append((f"{where}, mig-parted config {g.labels[MIG_CONFIG_LABEL]!r}",
                        ol.migparted_assert_valid(cfg, g.labels[MIG_CONFIG_LABEL]), None))
    return out


def _failures(checks) -> list[str]:
    bad = []
    for where, v, wants in checks:
        if wants is None:
            ok, msg = v
            if not ok:
                bad.append(f"{where}: mig-parted: {msg}")
        elif v is None:
            bad.append(f"{where}: not in the operator's device-plugin ConfigMap")
        elif not v.ok:
            bad.append(f"{where}: {v.component}: {v.error}")
        elif not wants <= set(v.resources):
            bad.append(f"{where}: workloads request {sorted(wants)}, the plugin advertises {v.resources}")
    return bad


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_operator_configmaps_are_what_upstream_accepts(path):
    fleet = operator_fleet(path)
    assert fleet.errors == (), fleet.errors
    checks = _checks(fleet, render_operator(HELMS["helm"], dict(fleet.gpu_operator.values)))
    dra_only = all(g.labels.get("nvidia.com/gpu.deploy.device-plugin") == "false" for g in fleet.layout.node_groups)
    assert checks or dra_only, "nothing checked"
    assert not _failures(checks)


def test_negative_control_a_cluster_wide_mixed_strategy_breaks_mps():
    """The operator's MIG_STRATEGY env overrides each config's flags.migStrategy: with
    `mig.strategy: mixed` (what the operator values said before) the plugin refuses the
    MPS pool's config."""
    path = next(p for p in EXAMPLES if p.stem == "mps-two-models")
    fleet = operator_fleet(path)
    values = {**dict(fleet.gpu_operator.values), "mig": {"strategy": "mixed"}}
    bad = _failures(_checks(fleet, render_operator(HELMS["helm"], values)))
    assert any("mig-strategy=mixed is not supported with MPS" in b for b in bad), bad


def test_negative_control_the_operators_defaults_serve_no_mig_group():
    """The operator's chart with its own defaults (no values of ours): the MIG groups'
    configs are in no ConfigMap and mig-parted knows none of their MIG configs."""
    path = next(p for p in EXAMPLES if p.stem == "mixed-a100-h100-mig")
    fleet = operator_fleet(path)
    bad = _failures(_checks(fleet, render_operator(HELMS["helm"], {})))
    assert any("not in the operator's device-plugin ConfigMap" in b for b in bad), bad
    assert any("mig-parted" in b for b in bad), bad
