"""The harness itself (ci/e2e/cluster.py): pinned versions really run, the fake fleet is
what the inventory says, and the harness stops every process it started -- also when a
component fails to start."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from tests.e2e.conftest import harness


def test_server_runs_the_pinned_version(kube):
    pinned = harness.versions()["K8S_VERSION"]
    info = json.loads(kube.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert info["gitVersion"] == f"v{pinned}"
    assert (info["major"], info["minor"]) == tuple(pinned.split(".")[:2])


def test_fleet_matches_inventory(kube, inventory):
    live = kube.nodes()
    for node in inventory.nodes:
        got = live[node.name]
        alloc = got["status"]["allocatable"]
        for res, amount in node.gpu_resources.items():
            assert alloc[res] == str(amount), (node.name, res, alloc)
        for key, value in node.labels.items():
            assert got["metadata"]["labels"][key] == value, (node.name, key)
        taints = {(t["key"], t["effect"]) for t in got["spec"].get("taints", [])}
        assert taints == {(t.key, t.effect) for t in node.taints}, (node.name, taints)
        assert got["metadata"]["annotations"][harness.KWOK_ANNOTATION] == "fake"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_stop_leaves_no_process_and_no_files(e2e_cluster):
    c = harness.Cluster.start()
    pids = [p.popen.pid for p in c.procs]
    assert len(pids) == 5
    c.stop()
    assert not [p for p in pids if _alive(p)]
    assert not c.dir.exists()


def test_failed_start_stops_what_it_started(e2e_cluster, tmp_path):
    broken = tmp_path / "kwok"
    broken.write_text("#!/bin/sh\necho 'kwok: simulated crash' >&2\nexit 3\n")
    broken.chmod(0o755)
    bins = dataclasses.replace(harness.Binaries.find(), kwok=broken)
    started: list[int] = []
    real_spawn = harness.Cluster._spawn

    def spy(self, name, argv):
        proc = real_spawn(self, name, argv)
        started.append(proc.popen.pid)
        return proc

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.Cluster, "_spawn", spy)
        with pytest.raises(harness.ClusterError, match=r"(?s)kwok exited with 3.*simulated crash"):
            harness.Cluster.start(binaries=bins, timeout=60)
    assert len(started) == 5  # etcd, apiserver, kcm, scheduler all ran before kwok died
    assert not [p for p in started if _alive(p)]


def test_missing_binaries_fail_with_build_hint(tmp_path):
    with pytest.raises(harness.ClusterError, match=r"bash ci/e2e/build.sh"):
        harness.Binaries.find(cache=tmp_path)


def test_placement_oracle_rejects_wrong_nodes(inventory):
    """The scenario test's placement check is not vacuous: it flags the decoy nodes."""
    from tests.e2e import e2elib

    nodes = {n["metadata"]["name"]: n for n in harness.nodes_from_inventory(inventory)}

    def pod(res, n):
        return {"spec": {"containers": [{"name": "s", "resources": {"limits": {res: str(n)}}}]}}

    mig = e2elib.effective_values(None, {"gpu": {"mode": "mig", "mig": {"profile": "3g.40gb"}}})
    assert not e2elib.placement_problems(pod("nvidia.com/mig-3g.40gb", 1), nodes["mig-a100-1"], mig)
    assert e2elib.placement_problems(pod("nvidia.com/mig-3g.40gb", 1), nodes["mig-a100-0"], mig)
    assert e2elib.placement_problems(pod("nvidia.com/gpu", 1), nodes["mig-a100-1"], mig)  # wrong resource

    multi = e2elib.effective_values(None, {"gpu": {"mode": "whole", "count": 4}})
    assert not e2elib.placement_problems(pod("nvidia.com/gpu", 4), nodes["hgx-h100-0"], multi)
    assert e2elib.placement_problems(pod("nvidia.com/gpu", 4), nodes["hgx-h100-nvlink-down"], multi)
    assert e2elib.placement_problems(pod("nvidia.com/gpu", 4), nodes["cpu-0"], multi)
