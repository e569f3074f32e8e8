"""`gpuvalues.io.current`: the fleet's current layout from a mig-parted config + labels, or an inventory."""
from __future__ import annotations

import json

import pytest

from gpuvalues.errors import GpuValuesError
from gpuvalues.io.current import load_current, split_node
from gpuvalues.catalog import get_gpu
from gpuvalues.planners.mig.milp.model import NodePool
from tests.unit.oracles import replicas_oracle

POOLS = [NodePool("a100", "A100-80GB", 4, 3), NodePool("h100", "H100-80GB-SXM", 2, 1)]

MIG_PARTED = """\
version: v1
mig-configs:
  a100-mixed:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  a100-other-gpu:
    - device-filter: ["0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - device-filter: ["0x20B210DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
  "off":
    - devices: all
      mig-enabled: false
nodes:
  n1:
    labels: {nvidia.com/mig.config: a100-mixed, nvidia.com/device-plugin.config: a100}
    pods: 9
  n2: {pool: a100, labels: {nvidia.com/mig.config: a100-other-gpu}}
  h1: {labels: {nvidia.com/mig.config: "off", nvidia.com/device-plugin.config: h100}}
"""


def test_mig_parted_form(tmp_path):
    f = tmp_path / "current.yaml"
    f.write_text(MIG_PARTED)
    cur = load_current(f, POOLS)
    by = {n.name: n for n in cur.nodes}
    assert by["n1"].gpus == ({"3g.40gb": 2}, {"3g.40gb": 2}, {"1g.10gb": 7}, {"1g.10gb": 7})
    assert by["n1"].pods == 9 and by["n1"].pool == "a100" and by["n1"].config == "a100-mixed"
    # device-filter: only the entry for A100-80GB's PCI ID (0x20B2) applies
    assert by["n2"].gpus == ({"7g.80gb": 1},) * 4 and by["n2"].pods is None
    assert by["h1"].gpus == (None, None)


@pytest.mark.parametrize("edit, where, msg", [
    (("a100-mixed, nvidia.com/device-plugin.config: a100}", "nope, nvidia.com/device-plugin.config: a100}"),
     ":24:37: nodes.n1.labels.nvidia.com/mig.config:", "mig config 'nope' is not in mig-configs"),
    (("devices: [2, 3]", "devices: [2, 9]"), ":7:", "device index 9"),
    (("pods: 9", "pods: -1"), ":25:", "pods must be a non-negative integer"),
    (("{pool: a100, labels", "{pool: b200, labels"), ":26:", "pool 'b200' is not a node pool of the spec"),
    (('{"3g.40gb": 2}', '{"3g.40gb": 3}'), ":6:", "mig-configs.a100-mixed[0].mig-devices"),
])
def test_bad_input_names_file_line_and_field(tmp_path, edit, where, msg):
    f = tmp_path / "current.yaml"
    f.write_text(MIG_PARTED.replace(*edit))
    with pytest.raises(GpuValuesError) as exc:
        load_current(f, POOLS)
    text = str(exc.value)
    assert text.startswith(str(f) + where) and msg in text, text


def test_inventory_form_splits_node_devices_into_gpus(tmp_path):
    inv = {"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": [
        {"name": "n1", "labels": {"nvidia.com/mig.config": "x", "nvidia.com/device-plugin.config": "a100"},
         "capacity": {"cpu": 8}, "gpu": {"count": 4, "product": "NVIDIA-A100-SXM4-80GB", "migStrategy": "mixed",
                                         "migProfiles": {"3g.40gb": 4, "1g.10gb": 14}}}]}
    f = tmp_path / "inv.yaml"
    f.write_text(json.dumps(inv))
    cur = load_current(f, POOLS)
    (n,) = cur.nodes
    assert sorted(map(lambda g: sorted(g.items()), n.gpus)) == sorted(
        [[("3g.40gb", 2)], [("3g.40gb", 2)], [("1g.10gb", 7)], [("1g.10gb", 7)]])
    assert n.config == "x" and n.pods is None


def test_split_node_rejects_what_no_gpu_split_fits():
    gpu = get_gpu("A100-80GB")
    assert split_node(gpu, {"7g.80gb": 2}, 2) == [{"7g.80gb": 1}, {"7g.80gb": 1}]
    assert split_node(gpu, {"7g.80gb": 3}, 2) is None


def test_cli_replan_reports_changes(tmp_path, capsys):
    from gpuvalues import cli
    spec = tmp_path / "spec.yaml"
    spec.write_text("""\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {name: a100, gpu: A100-80GB, gpusPerNode: 1, nodes: 2, mig: true}
workloads:
  - {name: small, model: m, memoryGB: 4, throughputPerReplica: 10, load: {peak: 20}}
sharing:
  mode: mig
""")
    replicas = replicas_oracle(20 * 1.2, 10)   # as `plan` sizes it (M/M/c at peak x 1.2)
    assert replicas <= 7
    cur = tmp_path / "current.yaml"
    cur.write_text("""\
version: v1
mig-configs:
  all-7g: [{devices: all, mig-enabled: true, mig-devices: {"7g.80gb": 1}}]
nodes:
  a: {pool: a100, labels: {nvidia.com/mig.config: all-7g}, pods: 1}
  b: {pool: a100, labels: {nvidia.com/mig.config: all-7g}, pods: 1}
""")
    out = tmp_path / "mp.yaml"
    assert cli.main(["--output", "json", "replan", str(spec), "--current", str(cur), "--mig-parted-out", str(out)]) == 0
    d = json.loads(capsys.readouterr().out)
    # a few replicas of a 4 GB model: one GPU as 7x1g.10gb; the other 7g node can stay
    assert d["gpus_used"] == 1 and d["nodes_changed"] == 1 and d["pods_displaced"] == 1
    assert out.exists() and "1g.10gb" in out.read_text()
    assert cli.main(["replan", str(spec), "--current", str(cur), "--max-node-changes", "0"]) == 2
    assert "drain budget (--max-node-changes 0)" in capsys.readouterr().err


def current_from_plan(planned: dict, pods: int = 1) -> dict:
    """A `--current` file for a fleet running what `plan -o json` printed: its mig-parted
    config and, per MIG node group, that many named nodes with the group's labels."""
    side = planned["node_side"]
    nodes = {}
    for g in side["node-groups.yaml"]:
        if "nvidia.com/mig.config" in g["labels"]:
            for i in range(g["nodes"]):
                nodes[f"{g['name']}-{i + 1}"] = {"pool": g["pool"], "labels": dict(g["labels"]), "pods": pods}
    return {**side["mig-parted-config.yaml"], "nodes": nodes}


def test_mixed_example_replanned_after_a_load_change(tmp_path, capsys):
    """The mixed example's MIG pool running its plan; mistral's peak load +50%: `replan`
    keeps the fewest GPUs (what `plan` finds from scratch) and changes at most the pool's
    nodes; with the unchanged spec it changes nothing."""
    import yaml
    from gpuvalues import cli
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "examples" / "mixed-a100-h100-mig.yaml"
    assert cli.main(["--output", "json", "plan", str(example), "--no-baselines"]) == 0
    before = json.loads(capsys.readouterr().out)
    cur = tmp_path / "current.yaml"
    cur.write_text(yaml.safe_dump(current_from_plan(before)))
    assert cli.main(["--output", "json", "replan", str(example), "--current", str(cur)]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["nodes_changed"] == 0 and same["gpus_used"] == before["mig"]["gpus_used"]
    spec = yaml.safe_load(example.read_text())
    spec["workloads"][1]["load"]["peak"] = 24
    bumped = tmp_path / "bumped.yaml"
    bumped.write_text(yaml.safe_dump(spec))
    assert cli.main(["--output", "json", "plan", str(bumped), "--no-baselines"]) == 0
    scratch = json.loads(capsys.readouterr().out)
    assert cli.main(["--output", "json", "replan", str(bumped), "--current", str(cur)]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["gpus_used"] == scratch["mig"]["gpus_used"] > before["mig"]["gpus_used"]
    assert 1 <= after["nodes_changed"] <= 2 and after["optimal"]


def test_example_current_layout_loads_and_replans(capsys):
    from pathlib import Path
    from gpuvalues import cli
    root = Path(__file__).resolve().parents[2]
    spec, cur = root / "examples" / "mixed-a100-h100-mig.yaml", root / "examples" / "current" / "mixed-a100-h100-mig.yaml"
    assert cli.main(["--output", "json", "plan", str(spec), "--no-baselines"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert cli.main(["--output", "json", "replan", str(spec), "--current", str(cur)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["optimal"] and got["gpus_used"] == planned["mig"]["gpus_used"]
