"""E2E fixtures: one real control plane (ci/e2e/cluster.py) per test session.

The cluster is real (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built
from pinned k8s.io/kubernetes); only the nodes are fake: kwok plays their kubelets and
moves pods to Running, which is the one part that cannot run here (no containers, no GPUs).
If the binaries are missing the tests FAIL (never skip): run `bash ci/e2e/build.sh`.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, TOOLS
from tests.e2e import e2elib



def _load_harness():
    spec = importlib.util.spec_from_file_location("gpu_e2e_cluster", ROOT / "ci" / "e2e" / "cluster.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


harness = _load_harness()


@pytest.fixture(scope="session")
def inventory_file(tmp_path_factory) -> Path:
    """The fake GPU fleet generated from tests/e2e/hardware.yaml: GPU labels and GPU
    resources from the upstream device plugin and GFD (tests/e2e/fleet.py)."""
    from tests.e2e import fleet

    return fleet.write_inventory(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="session")
def inventory(inventory_file):
    """The generated fleet as a gpuvalues Inventory (what `gpuvalues fit` reads)."""
    from gpuvalues.io.cluster import load_inventory

    return load_inventory(inventory_file)


@pytest.fixture(scope="session")
def e2e_cluster(inventory):
    """A started control plane with the fleet Ready; KUBECONFIG points at it."""
    try:
        harness.Binaries.find()
    except harness.ClusterError as e:
        pytest.fail(str(e), pytrace=False)
    t0 = time.monotonic()
    cluster = harness.Cluster.start()
    old = {k: os.environ.get(k) for k in ("KUBECONFIG", "PATH")}
    try:
        cluster.add_nodes(harness.nodes_from_inventory(inventory))
        cluster.timings["nodes"] = time.monotonic() - t0
        print(f"\ne2e cluster up in {time.monotonic() - t0:.1f} s: "
              + ", ".join(f"{k} {v:.1f}s" for k, v in cluster.timings.items()))
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        os.environ["PATH"] = f"{TOOLS}{os.pathsep}{os.environ['PATH']}"  # the pinned kubectl for processes the tests start
        yield cluster
    finally:
        cluster.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Kube:
    """kubectl and helm (Helm 4, server-side apply) against the e2e cluster."""

    def __init__(self, cluster, helm: str):
        self.cluster = cluster
        self.helm_bin = helm

    def kubectl(self, *args, input=None, check=True, timeout=120):
        return self.cluster.kubectl(*args, input=input, check=check, timeout=timeout)

    def json(self, *args) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def helm(self, *args, values: dict | None = None, check=True, timeout=300) -> subprocess.CompletedProcess:
        """Run the pinned Helm 4; `values` are passed as an extra `-f -` (JSON on stdin)."""
        t0 = time.monotonic()
        args = (*args, "-f", "-") if values is not None else args
        res = subprocess.run([self.helm_bin, "--kubeconfig", str(self.cluster.kubeconfig), *args],
                             input=json.dumps(values) if values is not None else None,
                             capture_output=True, text=True, timeout=timeout)
        print(f"[{time.monotonic() - t0:5.1f}s] helm {' '.join(args[:2])} -> {res.returncode}")
        if check and res.returncode:
            raise AssertionError(f"helm {' '.join(args)} failed ({res.returncode}):\n{res.stderr}{res.stdout}")
        return res

    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        args = ["get", "pods", "-n", namespace]
        if selector:
            args += ["-l", selector]
        return self.json(*args)["items"]

    def nodes(self) -> dict[str, dict]:
        return {n["metadata"]["name"]: n for n in self.json("get", "nodes")["items"]}

    def wait(self, what: str, predicate, timeout: float = 90, interval: float = 0.5):
        """Poll predicate() until it returns a truthy value; fail with `what` on timeout."""
        return e2elib.wait(what, predicate, timeout, interval)


@pytest.fixture(scope="session")
def kube(e2e_cluster, helm4) -> Kube:
    return Kube(e2e_cluster, helm4)


@pytest.fixture
def pool(kube):
    """add(name, nodes) creates extra fake GPU nodes labelled e2e.gpu-inference/pool=<name>
    (an isolated node pool for one test); they are deleted afterwards."""
    from gpuvalues.planners.scheduling.inventory import Inventory

    created: list[str] = []

    from tests.e2e import fleet

    def add(name: str, gpus: list[int], gpu: str = "A100-SXM4-80GB") -> list[str]:
        """Nodes of `gpu` (a hardware table of tests/e2e/hardware.yaml's `gpu` field) with
        the given GPU counts; their GPU labels and resources come from the device plugin
        and GFD (tests/e2e/fleet.py), running the default config."""
        nodes = []
        for i, n in enumerate(gpus):
            res = {"cpu": 64, "memory": "512Gi", "pods": 110, "ephemeral-storage": "1Ti"}
            nodes.append(fleet.gpu_node(f"{name}-{i}", {"gpu": gpu, "count": n},
                                        {"version": "v1", "flags": {"migStrategy": "none"}},
                                        extra_labels={POOL: name, "nvidia.com/gpu.present": "true"},
                                        resources=res))
        inv = Inventory.from_dict({"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": nodes})
        kube.cluster.add_nodes(harness.nodes_from_inventory(inv))
        names = [n["name"] for n in nodes]
        created.extend(names)
        return names

    yield add
    if created:
        kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *created, check=False)


POOL = "e2e.gpu-inference/pool"


@pytest.fixture
def namespace(kube):
    """A fresh namespace per test, deleted afterwards (its releases are uninstalled first)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    yield name
    for rel in json.loads(kube.helm("list", "-n", name, "-o", "json").stdout or "[]"):
        kube.helm("uninstall", rel["name"], "-n", name, "--wait", "--timeout", "60s", check=False)
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)
