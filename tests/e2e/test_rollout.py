"""`gpuvalues replan` + `gpuvalues rollout` on the real control plane (issue 17).

A three-node A100 pool runs two models on MIG: `small` (7 replicas on 1g.10gb, PDB
minAvailable 6) on two all-1g nodes and `mid` (2 replicas on 3g.40gb, PDB minAvailable 2) on
an all-3g node. `mid` then needs a third replica: `replan` (reading the current layout as a
mig-parted config plus node labels, as `--current` takes it) must change exactly one node,
and `rollout` must cordon it, evict its pods through the real Eviction API under the real
PDBs, relabel it, wait for mig-manager and uncordon it, touching no other node.

The one fake: mig-manager (there are no GPUs). `FakeMigManager` below does what the GPU
Operator's mig-manager does to the node object when `nvidia.com/mig.config` changes: sets
`nvidia.com/mig.config.state=pending`, reads the named config from the mig-parted ConfigMap,
publishes the MIG resources the node then has and sets the state to `success`. Those
resources are computed by the upstream device plugin itself (k8s-device-plugin at the
chart's pin, mixed strategy, over go-nvml's mock A100 with that MIG layout: the oracle of
tests/oracle), so the rollout's own resource check is held against upstream's names.
kwok plays the kubelets; the real scheduler and ReplicaSet controller move the pods.
"""
from __future__ import annotations

import json
import threading
import time
from functools import lru_cache

import yaml

from gpuvalues.operations.rollout import MIG_CONFIG_LABEL, MIG_STATE_LABEL, ROLLOUT_ANNOTATION
from gpuvalues.planners.inventory import Inventory
from tests.e2e.conftest import POOL, harness

CONFIGS = {
    "all-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
}


@lru_cache(maxsize=None)
def _advertised(config_json: str) -> tuple:
    from gpuvalues.planners import deviceplugin
    from tests.oracle import oraclelib as ol
    cfg = {"version": "v1", "mig-configs": {"c": json.loads(config_json)}}
    layout = ol.mig_layout(cfg, "c", 1)          # one GPU per node in this pool
    plugin = yaml.safe_dump(deviceplugin.build_device_plugin_config(mig_strategy="mixed"))
    verdict = ol.device_plugin(plugin, ol.hardware_for_gpu("A100-80GB", 1, layout), gfd=False)
    assert verdict.ok, verdict.error
    return tuple(sorted((k, int(v)) for k, v in verdict.resources.items() if k.startswith("nvidia.com/mig-")))


def resources_for(config: list) -> dict[str, int]:
    """The MIG resources the upstream device plugin advertises for a node with this config."""
    return dict(_advertised(json.dumps(config, sort_keys=True)))


class FakeMigManager(threading.Thread):
    """The stated fake of mig-manager: reacts to `nvidia.com/mig.config` on `nodes`."""

    def __init__(self, kube, nodes: list[str], configmap: tuple[str, str], delay: float = 1.0):
        super().__init__(daemon=True)
        self.kube, self.nodes, self.cm, self.delay = kube, nodes, configmap, delay
        self.applied: dict[str, str] = {}
        self.history: list[tuple[str, str]] = []
        self.stop = threading.Event()

    def config(self, name: str) -> dict:
        cm = self.kube.json("get", "configmap", "-n", self.cm[0], self.cm[1])
        return yaml.safe_load(cm["data"]["config.yaml"])["mig-configs"][name]

    def run(self) -> None:
        while not self.stop.is_set():
            for node in self.kube.nodes().values():
                name = node["metadata"]["name"]
                want = node["metadata"].get("labels", {}).get(MIG_CONFIG_LABEL)
                if name not in self.nodes or want is None or self.applied.get(name) == want:
                    continue
                self.kube.kubectl("label", "node", name, f"{MIG_STATE_LABEL}=pending", "--overwrite")
                time.sleep(self.delay)   # reconfiguring the GPUs
                res = resources_for(self.config(want))
                old = {k: "0" for k in node["status"]["allocatable"] if k.startswith("nvidia.com/mig-")}
                status = {**old, **{k: str(v) for k, v in res.items()}}
                self.kube.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p",
                                  json.dumps({"status": {"capacity": status, "allocatable": status}}))
                self.kube.kubectl("label", "node", name, f"{MIG_STATE_LABEL}=success", "--overwrite")
                self.applied[name] = want
                self.history.append((name, want))
            self.stop.wait(0.3)


def deployment(name: str, ns: str, pool: str, replicas: int, resource: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "nodeSelector": {POOL: pool},
                         "containers": [{"name": "server", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"limits": {resource: 1}}}]}}}}


def pdb(name: str, ns: str, min_available: int) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}}}


def ready(kube, ns: str, app: str) -> list[dict]:
    return [p for p in kube.pods(ns, f"app={app}")
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))]


def _nodes(kube, namespace):
    pool = f"mig-{namespace[-6:]}"
    names = [f"{pool}-{i}" for i in range(3)]
    start = {names[0]: "all-1g", names[1]: "all-3g", names[2]: "all-1g"}
    nodes = []
    for n in names:
        res = {"cpu": 64, "memory": "512Gi", "pods": 110, "nvidia.com/gpu": 0, **resources_for(CONFIGS[start[n]])}
        nodes.append({"name": n, "capacity": res, "allocatable": res,
                      "labels": {POOL: pool, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                 MIG_CONFIG_LABEL: start[n], MIG_STATE_LABEL: "success",
                                 "nvidia.com/device-plugin.config": pool}})
    kube.cluster.add_nodes(harness.nodes_from_inventory(Inventory.from_dict(
        {"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": nodes})))
    return pool, names, start


def _running(kube, ns, pool, names, start, tmp_path, small_min: int):
    """The two models running with their PDBs; the current layout written as `--current`
    reads it; the re-plan for mid's third replica written as `replan -o json` prints it."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mig-parted-config", "namespace": ns},
          "data": {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": CONFIGS})}}
    objs = [cm, deployment("small", ns, pool, 7, "nvidia.com/mig-1g.10gb"),
            deployment("mid", ns, pool, 2, "nvidia.com/mig-3g.40gb"), pdb("small", ns, small_min), pdb("mid", ns, 2)]
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    kube.wait("7 small + 2 mid ready", lambda: len(ready(kube, ns, "small")) == 7 and len(ready(kube, ns, "mid")) == 2)
    kube.wait(f"PDB small allows {7 - small_min}", lambda: kube.json("get", "pdb", "-n", ns, "small")
              .get("status", {}).get("disruptionsAllowed") == 7 - small_min
              and kube.json("get", "pdb", "-n", ns, "small").get("status", {}).get("currentHealthy") == 7)
    pods_on = {n: [p for p in kube.pods(ns) if p["spec"].get("nodeName") == n] for n in names}
    current = {"version": "v1", "mig-configs": CONFIGS, "nodes": {
        n: {"labels": {MIG_CONFIG_LABEL: start[n], "nvidia.com/device-plugin.config": pool},
            "pods": len(pods_on[n])} for n in names}}
    (tmp_path / "current.yaml").write_text(yaml.safe_dump(current))
    from gpuvalues.io.current import load_current
    from gpuvalues.planners.milp import ModelDemand, NodePool, replan
    pools = [NodePool(pool, "A100-80GB", 1, 3)]
    r = replan([ModelDemand("small", replicas=7, memory_gb=8), ModelDemand("mid", replicas=3, memory_gb=35)],
               pools, load_current(tmp_path / "current.yaml", pools))
    out = tmp_path / "replan.json"
    out.write_text(json.dumps(r.to_dict()))
    return pods_on, r.to_dict(), out


def test_replan_and_rollout_change_only_what_the_plan_changes(kube, namespace, tmp_path):
    pool, names, start = _nodes(kube, namespace)
    try:
        _scenario(kube, namespace, pool, names, start, tmp_path)
    finally:
        kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *names, check=False)


def test_rollout_never_evicts_past_a_pdb(kube, namespace, tmp_path, capsys):
    """Negative control: with small's PDB at minAvailable 7 (no disruption allowed) the rollout
    cordons the node, evicts nothing, and stops at its timeout (exit 2), resumable later."""
    from gpuvalues import cli

    pool, names, start = _nodes(kube, namespace)
    try:
        pods_on, result, out = _running(kube, namespace, pool, names, start, tmp_path, small_min=7)
        (changed,) = [c["node"] for c in result["changes"]]
        # precondition: the scheduler spread small over both all-1g nodes, so there is something to evict
        assert any(p["metadata"]["labels"].get("app") == "small" for p in pods_on[changed]), pods_on
        uids = {p["metadata"]["uid"] for p in kube.pods(namespace, "app=small")}
        assert cli.main(["rollout", str(out), "--configmap", f"{namespace}/mig-parted-config", "--poll", "0.3",
                         "--timeout", "6"]) == 2
        assert "not done after 6 s" in capsys.readouterr().err
        assert {p["metadata"]["uid"] for p in ready(kube, namespace, "small")} == uids   # nothing evicted
        node = kube.nodes()[changed]
        assert node["spec"].get("unschedulable") is True
        assert json.loads(node["metadata"]["annotations"][ROLLOUT_ANNOTATION])["step"] == "cordoned"
        assert node["metadata"]["labels"][MIG_CONFIG_LABEL] == start[changed]
        still = {p["metadata"]["uid"] for p in kube.pods(namespace) if p["spec"].get("nodeName") == changed}
        assert still == {p["metadata"]["uid"] for p in pods_on[changed]}   # its pods stay where they are
    finally:
        kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *names, check=False)


def _scenario(kube, ns, pool, names, start, tmp_path):
    from gpuvalues import cli

    pods_on, result, out = _running(kube, ns, pool, names, start, tmp_path, small_min=6)
    import contextlib
    import io
    assert result["nodes_changed"] == 1 and result["gpus_used"] == 3, result
    (changed,) = [c["node"] for c in result["changes"]]
    assert start[changed] == "all-1g"                 # one all-1g node gives a 3g.40gb to mid
    assert changed == min((n for n in names if start[n] == "all-1g"), key=lambda n: len(pods_on[n]))
    unchanged = [n for n in names if n != changed]
    before = {n: {p["metadata"]["uid"] for p in pods_on[n]} for n in unchanged}

    kube.kubectl("scale", "deployment", "-n", ns, "mid", "--replicas=3")
    mgr = FakeMigManager(kube, names, (ns, "mig-parted-config"))
    mgr.applied = dict(start)                         # what the nodes run now
    mgr.start()
    floor = {"small": 7, "mid": 2}
    watching = threading.Event()

    def watch():   # the fewest ready pods of each model while the rollout runs
        while not watching.is_set():
            for app in floor:
                floor[app] = min(floor[app], len(ready(kube, ns, app)))
            time.sleep(0.1)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # resumable: a first run stops after two steps (cordon, first evictions) ...
        from gpuvalues.operations import rollout
        from kubernetes import client, config
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(kube.cluster.kubeconfig)))
        data = json.loads(out.read_text())
        waves = rollout.plan_waves(rollout.changes_from_replan(data), {}, {})
        first = rollout.Rollout(core, waves, poll=0.2)
        first.advance(waves[0].changes[0])
        first.advance(waves[0].changes[0])
        assert json.loads(kube.nodes()[changed]["metadata"]["annotations"][ROLLOUT_ANNOTATION])["step"] in (
            "cordoned", "drained")
        # ... and `gpuvalues rollout` picks it up from the node's annotation
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert cli.main(["--output", "json", "rollout", str(out), "--configmap", f"{ns}/mig-parted-config",
                             "--poll", "0.3", "--timeout", "180"]) == 0
        report = json.loads(buf.getvalue())
        assert list(report["nodes"]) == [changed] and report["nodes"][changed]["done"]
        assert "cordoned" not in report["nodes"][changed]["steps"]     # resumed, not restarted
        kube.wait("mid has 3 ready", lambda: len(ready(kube, ns, "mid")) == 3, timeout=90)
    finally:
        watching.set()
        mgr.stop.set()
        watcher.join(5)
        mgr.join(5)
    nodes = kube.nodes()
    new = result["node_configs"][changed]
    assert nodes[changed]["metadata"]["labels"][MIG_CONFIG_LABEL] == new
    assert not nodes[changed]["spec"].get("unschedulable")
    assert json.loads(nodes[changed]["metadata"]["annotations"][ROLLOUT_ANNOTATION])["step"] == "done"
    assert mgr.history == [(changed, new)]            # mig-manager reconfigured only that node
    for n in unchanged:                               # unchanged nodes: never cordoned or relabelled,
        assert ROLLOUT_ANNOTATION not in nodes[n]["metadata"].get("annotations", {})
        assert nodes[n]["metadata"]["labels"][MIG_CONFIG_LABEL] == start[n]
        now = {p["metadata"]["uid"] for p in kube.pods(ns) if p["spec"].get("nodeName") == n}
        assert before[n] <= now, n                    # ... and none of their pods was touched
    assert floor["small"] >= 6 and floor["mid"] >= 2, floor   # no PodDisruptionBudget broken
    assert not [p for p in kube.pods(ns, "app=small") if p["spec"].get("nodeName") == changed
                and p["metadata"]["uid"] in {q["metadata"]["uid"] for q in pods_on[changed]}]
