"""The causal model of the install (issue 22, gpuvalues.fleet.producers): who produces
which node label, replayed from bare nodes; validate's GV021 and GV017 name the missing
producer; the platform release turns on exactly the producers the fleet needs."""
from __future__ import annotations

import pytest

from gpuvalues import catalog
from gpuvalues.checks.fleet import check_fleet
from gpuvalues.checks.spec import spec_from_text
from gpuvalues.fleet import build_fleet, expected_nodes, producers
from gpuvalues.fleet.spec import GROUP_LABEL, POOL_LABEL
from gpuvalues.pipeline import install_commands, label_commands
from tests.conftest import ROOT

EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml"))

BASE = """apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {{name: a100, gpu: NVIDIA-A100-SXM4-80GB, gpusPerNode: 4, nodes: 2{pool}}}
workloads:
  - name: llama-8b
    model: meta-llama/Llama-3.1-8B-Instruct
    gpus: 1
    memoryGB: 40
    throughputPerReplica: 3
    slo: {{latencyMs: 2000}}
    load: {{base: 1, peak: 6}}
sharing: {sharing}
{extra}"""


def fleet_of(pool: str = "", sharing: str = "whole", extra: str = ""):
    text = BASE.format(pool=pool, sharing=sharing, extra=extra)
    if sharing == "mig":
        text = text.replace("memoryGB: 40", "memoryGB: 15")
    return check_fleet(build_fleet(spec_from_text(text, "s.yaml")))


def by_code(fleet, code):
    return [f for f in fleet.findings if f.code == code]


def test_every_label_key_has_one_producer_and_group_labels_are_the_install_orders():
    assert producers.producer_of("feature.node.kubernetes.io/pci-10de.present") == producers.NFD
    assert producers.producer_of("nvidia.com/gpu.product") == producers.GFD
    assert producers.producer_of("nvidia.com/mig.strategy") == producers.GFD
    assert producers.producer_of("nvidia.com/mig.config") == producers.INSTALL_ORDER     # exact beats prefix
    assert producers.producer_of("nvidia.com/mig.config.state") == producers.MIG_MANAGER
    assert producers.producer_of("nvidia.com/gpu.present") == producers.GPU_OPERATOR
    assert producers.producer_of("nvidia.com/gpu.topology") == producers.INSTALL_ORDER
    assert producers.producer_of("example.com/rack") is None
    assert producers.producer_of("example.com/rack", {"example.com/rack": "r1"}) == producers.INSTALL_ORDER


def test_default_platform_produces_what_every_example_selects():
    """With the parts gpuvalues turns on, every node ends up with every label and resource
    of the planned end state (expected_nodes), and no example has a GV021."""
    for path in EXAMPLES:
        fleet = check_fleet(build_fleet(spec_from_text(path.read_text(), str(path))))
        assert by_code(fleet, "GV021") == [], path.name
        planned = {n.name: n for n in expected_nodes(fleet).nodes}
        produced = {n.name: n for n in producers.produced_nodes(fleet).nodes}
        assert planned.keys() == produced.keys(), path.name
        for name, n in planned.items():
            got = produced[name]
            assert dict(n.labels).items() <= dict(got.labels).items(), (path.name, name)
            assert dict(got.allocatable) == dict(n.allocatable), (path.name, name)
            assert got.labels[producers.NFD_GPU_LABEL] == "true" and got.labels[GROUP_LABEL]


def test_gfd_turns_on_because_the_pods_select_its_labels():
    fleet = fleet_of()
    assert fleet.platform.values["platform"]["gfd"] == {"enabled": True}
    assert "nvidia.com/gpu.product" in producers.required_node_labels(fleet.workloads[0].values)
    assert fleet.platform.values["platform"]["nfd"] == {"enabled": True}
    assert fleet.platform.values["platform"]["migManager"] == {"enabled": False}   # no mig-parted pool


def test_gfd_off_is_refused_at_its_line_naming_the_producer():
    fleet = fleet_of(extra="platform:\n  gpuFeatureDiscovery: false\n")
    [f] = by_code(fleet, "GV021")
    assert f.severity == "error" and (f.line, f.path) == (15, "platform.gpuFeatureDiscovery")
    assert "nvidia.com/gpu.product" in f.message and producers.GFD in f.message
    # the produced nodes lack GFD's labels, so render's fit sees them as they will be
    node = producers.produced_nodes(fleet).nodes[0]
    assert "nvidia.com/gpu.product" not in node.labels and node.allocatable == {"nvidia.com/gpu": 4}
    # negative control: the same spec with GFD on explicitly has no GV021
    assert by_code(fleet_of(extra="platform:\n  gpuFeatureDiscovery: true\n"), "GV021") == []


def test_no_device_plugin_means_no_resource_and_says_why():
    fleet = fleet_of(extra="platform:\n  devicePlugin: false\n")
    [f] = by_code(fleet, "GV017")
    assert "the device plugin is not deployed" in f.message
    assert producers.produced_nodes(fleet).nodes[0].allocatable == {}
    assert by_code(fleet_of(), "GV017") == []


def test_nfd_present_is_not_deployed_but_still_produces():
    fleet = fleet_of(extra="")
    assert fleet.platform.values["platform"]["nfd"]["enabled"]
    text = BASE.format(pool="", sharing="whole", extra="").replace(
        "cluster:\n", "cluster:\n  nfd: present\n")
    fleet = check_fleet(build_fleet(spec_from_text(text, "s.yaml")))
    assert fleet.platform.values["platform"]["nfd"] == {"enabled": False}
    parts = producers.install_parts(fleet.spec, fleet.platform.values)
    assert parts[producers.NFD] == "the cluster (cluster.nfd: present)"
    assert by_code(fleet, "GV021") == [] and by_code(fleet, "GV017") == []
    assert not any("nfd-crds" in c for c in install_commands(fleet, "out/"))


def test_without_nfd_no_gpu_daemonset_runs():
    """The DaemonSets select NFD's PCI label: with no NFD at all nothing downstream runs
    (the causal chain, not an assumption)."""
    fleet = fleet_of()
    values = {"platform": {**fleet.platform.values["platform"], "nfd": {"enabled": False}}}
    [s] = {s.group: s for s in producers.node_states(fleet.spec, fleet.layout, values)}.values()
    assert s.ran == (producers.INSTALL_ORDER,)
    assert set(s.why_not) == {producers.NFD, producers.GFD, producers.DEVICE_PLUGIN}
    assert s.allocatable == {} and "nvidia.com/gpu.product" not in s.labels


def test_mig_layout_turns_on_mig_manager_with_the_plans_config():
    fleet = fleet_of(pool=", mig: true", sharing="mig")
    mm = fleet.platform.values["platform"]["migManager"]
    assert mm["enabled"] and mm["config"] == dict(fleet.layout.mig_parted)
    states = producers.node_states(fleet.spec, fleet.layout, fleet.platform.values)
    mig = [s for s in states if s.mig_profiles]
    assert mig and all(s.labels["nvidia.com/mig.config.state"] == "success" for s in mig)
    # without mig-manager the GPUs keep MIG off: whole GPUs, no MIG resources, GV017
    values = {"platform": {**fleet.platform.values["platform"], "migManager": {"enabled": False}}}
    for s in producers.node_states(fleet.spec, fleet.layout, values):
        assert not any(k.startswith("nvidia.com/mig-") for k in s.allocatable), s
        assert s.allocatable == {"nvidia.com/gpu": 4} and producers.MIG_MANAGER in s.why_not
    assert catalog.get_gpu("NVIDIA-A100-SXM4-80GB").mig_capable


def test_label_commands_select_each_group_among_its_pools_unclaimed_nodes():
    fleet = fleet_of(pool=", nodeSelector: {cloud.google.com/gke-nodepool: gpu-a100}")
    [line] = label_commands(fleet)
    [g] = fleet.layout.node_groups
    assert line.startswith(f"n=$(({g.nodes} - $(kubectl get nodes -l {GROUP_LABEL}={g.name} -o name "
                           "| wc -l))); if [ \"$n\" -gt 0 ]; then kubectl get nodes -l "
                           f"'cloud.google.com/gke-nodepool=gpu-a100,!{GROUP_LABEL}' -o name | sort | "
                           "sed -n \"1,${n}p\" | xargs -r -I{} kubectl label --overwrite {} ")
    assert line.endswith(f"{GROUP_LABEL}={g.name}; fi")
    # the default pool selector
    assert f"-l '{POOL_LABEL}=a100,!{GROUP_LABEL}'" in label_commands(fleet_of())[0]
    cmds = install_commands(fleet, "out/")
    assert cmds[0].startswith("kubectl apply --server-side -k ") and "nfd-crds?ref=v0.18.3" in cmds[0]
    assert cmds[1] == line and cmds[2].startswith("helm upgrade --install gpu-platform ")
    # one file: the same prerequisites, then its one (combined) release
    cmds = install_commands(fleet, "one.yaml")
    assert cmds[:2] == install_commands(fleet, "out/")[:2] and len(cmds) == 3


@pytest.mark.parametrize("selector", ["{'a b': x}", "{k: 'v;rm -rf /'}", "{}"])
def test_pool_node_selectors_are_label_syntax(selector):
    from gpuvalues.errors import GpuValuesError

    with pytest.raises(GpuValuesError):
        fleet_of(pool=f", nodeSelector: {selector}")


def test_operator_values_are_written_beside_the_releases(tmp_path):
    from gpuvalues.pipeline import write_values

    fleet = fleet_of(extra="platform:\n  gpuOperator: true\n")
    assert fleet.gpu_operator is not None and fleet_of().gpu_operator is None
    (tmp_path / "out").mkdir()
    written = write_values(fleet, str(tmp_path / "out"), None)
    assert [p.name for p in written] == ["gpu-platform.values.yaml", "llama-8b.values.yaml",
                                         "gpu-operator.values.yaml"]
    text = written[-1].read_text()
    assert text.startswith("# Generated by gpuvalues: release gpu-operator (the nvidia/gpu-operator chart")
    assert "      default: |\n        version: v1\n" in text      # ConfigMap files as blocks
    written = write_values(fleet, str(tmp_path / "one.yaml"), str(tmp_path / "nodes"))
    assert tmp_path / "nodes" / "gpu-operator.values.yaml" in written
