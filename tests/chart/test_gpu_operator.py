"""The GPU Operator mode (issue 22 item 2): with `platform.gpuOperator: true`, `values` writes
the NVIDIA gpu-operator chart's values; that chart (v26.7.0, tests/chart/data/
gpu-operator-v26.7.0: the Go module proxy refuses the module, see its SOURCE.md) is rendered
by the real Helm 4 and Helm 3 with them, for every example fleet, and

- its ClusterPolicy validates against the ClusterPolicy CRD schema at that commit
  (tests/chart/data/crds/clusterpolicy-v1.yaml) and names our ConfigMaps and defaults;
- the ConfigMaps it creates hold every config a node group selects, each accepted by the
  device plugin's and mig-parted's rules (gpuvalues.planners; tests/oracle runs upstream
  on the same configs), with the operator's mig-manager default among them.
"""
from __future__ import annotations

import copy

import pytest
import yaml

from gpuvalues import pipeline
from gpuvalues.checks.fleet import check_fleet
from gpuvalues.checks.spec import spec_from_text
from gpuvalues.fleet import build_fleet, producers
from gpuvalues.fleet.releases import ALL_DISABLED, GPU_OPERATOR_VERSION
from gpuvalues.planners.deviceplugin import CONFIG_LABEL, validate_device_plugin_config
from gpuvalues.planners.mig.migparted import MIG_CONFIG_LABEL, validate_mig_parted_config
from tests.chart.chartlib import HELMS, by_kind, crd_errors, render
from tests.conftest import ROOT

OPERATOR_CHART = ROOT / "tests" / "chart" / "data" / f"gpu-operator-{GPU_OPERATOR_VERSION}"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def operator_fleet(path):
    data = yaml.safe_load(path.read_text())
    data.setdefault("platform", {})["gpuOperator"] = True
    return check_fleet(build_fleet(spec_from_text(yaml.safe_dump(data, sort_keys=False), str(path),
                                                  path.parent)))


def render_operator(helm: str, values: dict) -> list[dict]:
    return render(helm, values=values, chart=OPERATOR_CHART, release="gpu-operator",
                  namespace="gpu-operator", kube_version="1.34.0")


def test_the_copied_chart_is_the_pinned_version():
    source = (OPERATOR_CHART / "SOURCE.md").read_text()
    assert GPU_OPERATOR_VERSION in source and "10ee5b3638b89e11e949412aafa5ba99279c3721" in source


@pytest.mark.parametrize("helm_name", sorted(HELMS))
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_operator_values_render_a_valid_cluster_policy_with_our_configs(helm_name, path):
    fleet = operator_fleet(path)
    assert fleet.errors == (), fleet.errors
    op = fleet.gpu_operator
    objs = render_operator(HELMS[helm_name], dict(op.values))
    [cp] = by_kind(objs, "ClusterPolicy")
    assert crd_errors(cp) == []
    spec = cp["spec"]
    cms = {c["metadata"]["name"]: c["data"] for c in by_kind(objs, "ConfigMap")}

    dp = op.values["devicePlugin"]["config"]
    assert spec["devicePlugin"]["config"] == {"name": dp["name"], "default": "default"}
    data = cms[dp["name"]]
    selected = {g.labels[CONFIG_LABEL] for g in fleet.layout.node_groups if CONFIG_LABEL in g.labels}
    assert selected | {"default"} <= set(data), (selected, sorted(data))
    for name, text in data.items():
        validate_device_plugin_config(yaml.safe_load(text), source=name)
    assert spec["devicePlugin"]["enabled"] is fleet.spec.platform.device_plugin

    mig_selected = {g.labels[MIG_CONFIG_LABEL] for g in fleet.layout.node_groups if MIG_CONFIG_LABEL in g.labels}
    if mig_selected:
        mm = op.values["migManager"]["config"]
        assert spec["migManager"]["enabled"] is True
        assert spec["migManager"]["config"] == {"name": mm["name"], "default": ALL_DISABLED}
        cfg = yaml.safe_load(cms[mm["name"]]["config.yaml"])
        validate_mig_parted_config(cfg)
        assert mig_selected | {ALL_DISABLED} <= set(cfg["mig-configs"])
        assert {k: v for k, v in cfg["mig-configs"].items() if k != ALL_DISABLED} == \
            fleet.layout.mig_parted["mig-configs"]
    else:
        assert spec["migManager"]["enabled"] is False
    assert spec["mig"]["strategy"] == "mixed"
    assert spec["gfd"]["enabled"] is True and spec["dcgmExporter"]["enabled"] is True
    # the platform release renders none of the parts the operator runs
    pv = fleet.platform.values["platform"]
    assert not any(pv[k]["enabled"] for k in ("devicePlugin", "gfd", "nfd", "migManager", "dcgmExporter"))


def test_the_cluster_policy_check_can_fail():
    """Negative controls: the CRD check refuses a wrong type and an unknown field, and the
    operator's defaults alone name no device-plugin ConfigMap (what the issue found)."""
    objs = render_operator(HELMS["helm"], {})
    [cp] = by_kind(objs, "ClusterPolicy")
    assert crd_errors(cp) == []
    assert not cp["spec"]["devicePlugin"].get("config", {}).get("name")
    bad = copy.deepcopy(cp)
    bad["spec"]["devicePlugin"]["config"] = {"name": 7}
    assert crd_errors(bad)
    bad = copy.deepcopy(cp)
    bad["spec"]["migManager"]["confg"] = {"name": "x"}
    assert crd_errors(bad)


def test_operator_install_order_and_causal_model():
    path = ROOT / "examples" / "mixed-a100-h100-mig.yaml"
    fleet = operator_fleet(path)
    cmds = pipeline.install_commands(fleet, "/tmp/out/")
    helm_lines = [c for c in cmds if c.startswith("helm upgrade")]
    assert helm_lines[0] == (f"helm upgrade --install gpu-operator nvidia/gpu-operator --version "
                             f"{GPU_OPERATOR_VERSION} --namespace gpu-operator --create-namespace "
                             "-f /tmp/out/gpu-operator.values.yaml")
    assert len(helm_lines) == 1 + len(fleet.releases)       # the operator once, then ours
    assert not any("nfd-crds" in c for c in cmds)        # the operator's chart brings NFD
    parts = producers.install_parts(fleet.spec, fleet.platform.values, producers.operator_values(fleet))
    assert {parts[p] for p in (producers.NFD, producers.GFD, producers.DEVICE_PLUGIN,
                               producers.MIG_MANAGER)} == {"the GPU Operator"}
    states = producers.node_states(fleet.spec, fleet.layout, fleet.platform.values,
                                   producers.operator_values(fleet))
    assert all(s.labels["nvidia.com/gpu.present"] == "true" for s in states)
    # an operator values file with GFD off: validate names the operator's missing GFD
    values = dict(fleet.gpu_operator.values, gfd={"enabled": False})
    states = producers.node_states(fleet.spec, fleet.layout, fleet.platform.values, values)
    assert all("nvidia.com/gpu.product" not in s.labels for s in states)
