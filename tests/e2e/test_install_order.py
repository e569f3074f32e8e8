"""The printed install order's node-labelling lines (issue 22: they used to name nodes after
config names that exist nowhere), run exactly as `gpuvalues values` prints them, with bash
and the pinned kubectl, against the real API server: on bare nodes that carry only their
pool's label, each node group gets exactly its number of its pool's nodes with its labels;
a rerun changes nothing; nodes of no pool, and pool nodes beyond the spec's count, are left
alone."""
from __future__ import annotations

import os
import subprocess

from gpuvalues.checks.spec import load_spec
from gpuvalues.fleet import build_fleet
from gpuvalues.fleet.spec import GROUP_LABEL
from gpuvalues.pipeline import label_commands
from gpuvalues.planners.scheduling.inventory import Inventory
from tests.conftest import ROOT, TOOLS
from tests.e2e.conftest import harness

BARE = {"cpu": 64, "memory": "512Gi", "pods": 110}


def _run(kube, lines: list[str]) -> None:
    env = {**os.environ, "KUBECONFIG": str(kube.cluster.kubeconfig),
           "PATH": f"{TOOLS}{os.pathsep}{os.environ['PATH']}"}
    for line in lines:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", line], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, f"{line}\n{proc.stderr}"


def test_label_lines_claim_each_groups_nodes_once(kube):
    fleet = build_fleet(load_spec(ROOT / "examples" / "mixed-a100-h100-mig.yaml"))
    groups = fleet.layout.node_groups
    assert len({g.pool for g in groups}) < len(groups)       # a pool split into several groups
    nodes = []
    for pool in fleet.spec.node_pools:
        for i in range(pool.nodes + 1):                       # one more than the spec says
            nodes.append({"name": f"io-{pool.name}-{i}", "labels": dict(pool.selector),
                          "capacity": BARE, "allocatable": BARE})
    nodes.append({"name": "io-cpu-0", "labels": {}, "capacity": BARE, "allocatable": BARE})
    names = [n["name"] for n in nodes]
    kube.cluster.add_nodes(harness.nodes_from_inventory(
        Inventory.from_dict({"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": nodes})))
    try:
        lines = label_commands(fleet)
        _run(kube, lines)
        first = {n: o["metadata"].get("labels", {}) for n, o in kube.nodes().items() if n in names}
        for g in groups:
            mine = [n for n, labels in first.items() if labels.get(GROUP_LABEL) == g.name]
            assert len(mine) == g.nodes, (g.name, mine)
            for n in mine:
                assert n.startswith(f"io-{g.pool}-")
                assert {k: first[n].get(k) for k in g.labels} == dict(g.labels), (g.name, n)
        for pool in fleet.spec.node_pools:
            left = [n for n, labels in first.items() if n.startswith(f"io-{pool.name}-")
                    and GROUP_LABEL not in labels]
            assert len(left) == 1, (pool.name, left)           # the one beyond the spec's count
        assert GROUP_LABEL not in first["io-cpu-0"]
        _run(kube, lines)                                      # a rerun changes nothing
        again = {n: o["metadata"].get("labels", {}) for n, o in kube.nodes().items() if n in names}
        assert again == first
    finally:
        kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *names, check=False)
