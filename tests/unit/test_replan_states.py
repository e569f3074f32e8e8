"""Re-plan meets every current state a running fleet can be in (issue 23): a pool left with no
MIG workload, a tensor-parallel + MIG pool listed whole, nodes the current file does not list
(reported, never named), and errors in the spec's and the CLI's own words.

Each test starts from what the fleet runs: `plan -o json`'s node side laid on named nodes
(`current_from_plan`), then the spec changes and `replan` produces the next state."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuvalues import cli
from gpuvalues.operations import rollout
from tests.unit.test_current import current_from_plan

ROOT = Path(__file__).resolve().parents[2]

TWO_POOLS = {
    "apiVersion": "gpuvalues/v1",
    "cluster": {"nodePools": [
        {"name": "a", "gpu": "NVIDIA-A100-SXM4-80GB", "gpusPerNode": 2, "nodes": 2, "mig": True},
        {"name": "b", "gpu": "NVIDIA-A100-SXM4-80GB", "gpusPerNode": 2, "nodes": 1, "mig": True}]},
    "workloads": [
        {"name": "small", "model": "BAAI/bge-reranker-v2-m3", "memoryGB": 4, "throughputPerReplica": 40,
         "load": {"base": 20, "peak": 120}, "nodePool": "a"},
        {"name": "mid", "model": "Qwen/Qwen2.5-7B-Instruct", "memoryGB": 30, "throughputPerReplica": 4,
         "load": {"base": 2, "peak": 6}, "nodePool": "b"}],
    "sharing": "mig",
    "autoscaling": {"engine": "hpa", "metric": "choose"},
}


def run_json(capsys, *argv) -> dict:
    assert cli.main(["--output", "json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def running(tmp_path, capsys, spec: dict, name="spec.yaml") -> tuple[Path, Path]:
    """The spec written out and a current layout of the fleet running its plan."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    planned = run_json(capsys, "plan", str(path), "--no-baselines")
    cur = tmp_path / "current.yaml"
    cur.write_text(yaml.safe_dump(current_from_plan(planned)))
    return path, cur


def test_removing_the_only_mig_workload_of_a_pool(tmp_path, capsys):
    spec, cur = running(tmp_path, capsys, TWO_POOLS)
    assert "b" in {n["pool"] for n in yaml.safe_load(cur.read_text())["nodes"].values()}
    fewer = dict(TWO_POOLS, workloads=TWO_POOLS["workloads"][:1])      # "mid" removed: pool b has no MIG workload
    spec.write_text(yaml.safe_dump(fewer))
    got = run_json(capsys, "replan", str(spec), "--current", str(cur))
    assert got["nodes_changed"] == 0 and got["changes"] == [] and got["optimal"]   # b's nodes keep their layout


def test_tensor_parallel_and_mig_pool_listed_whole(tmp_path, capsys):
    spec = yaml.safe_load((ROOT / "examples" / "mig-and-tp-one-pool.yaml").read_text())
    path, cur = running(tmp_path, capsys, spec)
    listed = yaml.safe_load(cur.read_text())["nodes"]
    assert len(listed) == spec["cluster"]["nodePools"][0]["nodes"]       # every node, the TP ones too
    assert cli.main(["--output", "json", "replan", str(path), "--current", str(cur)]) == 0
    out, err = capsys.readouterr()
    got = json.loads(out)
    assert got["nodes_changed"] == 0 and got["optimal"]
    assert not any(c["node"].startswith("h100-whole") for c in got["changes"])
    # the nodes whose GPUs the tensor-parallel replicas hold are kept as they are, and said
    note = next(line for line in err.splitlines() if "carry whole-GPU/tensor-parallel replicas" in line)
    assert "h100-whole-1" in note and "keeps them as they are" in note


def test_unlisted_nodes_are_reported_never_named(tmp_path, capsys):
    spec, cur = running(tmp_path, capsys, TWO_POOLS)
    doc = yaml.safe_load(cur.read_text())
    doc["nodes"] = {k: v for k, v in doc["nodes"].items() if v["pool"] == "b"}   # pool a's nodes not listed
    cur.write_text(yaml.safe_dump(doc))
    got = run_json(capsys, "replan", str(spec), "--current", str(cur))
    assert got["unlisted_changes"] and {u["pool"] for u in got["unlisted_changes"]} == {"a"}
    assert got["nodes_changed"] == sum(u["nodes"] for u in got["unlisted_changes"])
    real = set(doc["nodes"])
    assert {c["node"] for c in got["changes"]} <= real and set(got["node_configs"]) <= real
    assert any("does not list" in w for w in got["warnings"])
    # rollout acts on named nodes only
    assert {c.node for c in rollout.changes_from_replan(got)} <= real


def test_errors_name_the_cli_flags_and_the_spec(tmp_path, capsys):
    spec, cur = running(tmp_path, capsys, TWO_POOLS)
    more = json.loads(json.dumps(TWO_POOLS))
    more["workloads"][0]["load"]["peak"] = 400          # needs a reconfigured node
    spec.write_text(yaml.safe_dump(more))
    assert cli.main(["replan", str(spec), "--current", str(cur), "--max-node-changes", "0"]) == 2
    err = capsys.readouterr().err
    assert "--max-node-changes" in err and "max_node_changes" not in err
    doc = yaml.safe_load(cur.read_text())
    node = next(iter(doc["nodes"]))
    doc["nodes"][node]["pool"] = "zz"
    cur.write_text(yaml.safe_dump(doc))
    assert cli.main(["replan", str(spec), "--current", str(cur)]) == 2
    assert "cluster.nodePools" in capsys.readouterr().err
    # more listed nodes than the spec's pool has: said against cluster.nodePools[i].nodes
    doc = yaml.safe_load((tmp_path / "current.yaml").read_text())
    doc["nodes"][node]["pool"] = "b"
    doc["nodes"]["extra-b"] = dict(doc["nodes"][node])
    cur.write_text(yaml.safe_dump(doc))
    assert cli.main(["replan", str(spec), "--current", str(cur)]) == 2
    assert "cluster.nodePools[1].nodes" in capsys.readouterr().err
