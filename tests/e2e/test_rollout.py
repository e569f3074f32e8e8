"""`gpuvalues replan` + `gpuvalues rollout` on the real control plane (issue 17).

A three-node A100 pool runs two models on MIG: `small` (7 replicas on 1g.10gb, PDB
minAvailable 6) on two all-1g nodes and `mid` (2 replicas on 3g.40gb, PDB minAvailable 2) on
an all-3g node. `mid` then needs a third replica: `replan` (reading the current layout as a
mig-parted config plus node labels, as `--current` takes it) must change exactly one node,
and `rollout` must cordon it, evict its pods through the real Eviction API under the real
PDBs, relabel it, wait for mig-manager and uncordon it, touching no other node.

The one fake: mig-manager. NVIDIA's k8s-mig-manager drives real GPUs through NVML and
nvidia-mig-parted, and there are none here, so `FakeMigManager` below does what it does to
the node object when `nvidia.com/mig.config` changes, following upstream's state machine
(NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go `Run`): `failed` at once for a config
missing from the mig-parted ConfigMap, `success` at once when already applied, else
`pending`, the MIG resources the node then has published, and `success`. Its late and busy
modes, and nodes left with a stale state, are the signals issue 24 says a rollout must not
trust. Those
resources are computed by the upstream device plugin itself (k8s-device-plugin at the
chart's pin, mixed strategy, over go-nvml's mock A100 with that MIG layout: the oracle of
tests/oracle), so the rollout's own resource check is held against upstream's names.
kwok plays the kubelets; the real scheduler and ReplicaSet controller move the pods.
"""
from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from functools import lru_cache

import yaml

from gpuvalues.operations.rollout import EVENT_COMPONENT, MIG_CONFIG_LABEL, MIG_STATE_LABEL, ROLLOUT_ANNOTATION
from gpuvalues.planners.scheduling.inventory import Inventory
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
    """The stated fake of mig-manager: reacts to `nvidia.com/mig.config` on `nodes` the way
    upstream's reconfigure does (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go `Run`):
    a config missing from the ConfigMap -> `failed` at once; already applied -> `success` at
    once; else `pending`, the new resources published, then `success`. `react_after` makes it
    late: it starts that many seconds after it sees the change (a busy or restarting
    mig-manager), leaving whatever state the node had; `busy_for` makes it finish an earlier
    change first (the node starts `pending`, then `success` for the old config); `reboot_for`
    makes the change need a reboot (a MIG mode change with WITH_REBOOT: upstream sets
    `rebooting` when applyMigModeChange fails, reboots, and its next Run sets `pending` again,
    then `success`), the node rebooting for that many seconds."""

    def __init__(self, kube, nodes: list[str], configmap: tuple[str, str], delay: float = 1.0,
                 react_after: float = 0.0, busy_for: float = 0.0, reboot_for: float = 0.0):
        super().__init__(daemon=True)
        self.kube, self.nodes, self.cm, self.delay = kube, nodes, configmap, delay
        self.react_after, self.busy_for, self.reboot_for = react_after, busy_for, reboot_for
        self.label_when_earlier_done: dict[str, str | None] = {}
        self.applied: dict[str, str] = {}
        self.history: list[tuple[str, str]] = []
        self.states: list[tuple[str, str]] = []       # (node, state) in the order written
        self.stop = threading.Event()

    def config(self, name: str) -> list | None:
        cm = self.kube.json("get", "configmap", "-n", self.cm[0], self.cm[1])
        return (yaml.safe_load(cm["data"]["config.yaml"])["mig-configs"] or {}).get(name)

    def state(self, name: str, value: str) -> None:
        self.kube.kubectl("label", "node", name, f"{MIG_STATE_LABEL}={value}", "--overwrite")
        self.states.append((name, value))

    def run(self) -> None:
        if self.busy_for:    # still applying an earlier change (state pending): it ends, then the loop
            if self.stop.wait(self.busy_for):
                return
            for name in self.nodes:
                self.label_when_earlier_done[name] = self.kube.nodes()[name]["metadata"]["labels"].get(MIG_CONFIG_LABEL)
                self.state(name, "success")
        while not self.stop.is_set():
            for node in self.kube.nodes().values():
                name = node["metadata"]["name"]
                want = node["metadata"].get("labels", {}).get(MIG_CONFIG_LABEL)
                if name not in self.nodes or want is None or self.applied.get(name) == want:
                    continue
                if self.stop.wait(self.react_after):
                    return
                self.applied[name] = want
                cfg = self.config(want)
                if cfg is None:                     # validateMigConfig fails: failed, no pending
                    self.state(name, "failed")
                    continue
                res = resources_for(cfg)
                old = {k: "0" for k in node["status"]["allocatable"] if k.startswith("nvidia.com/mig-")}
                now = {k: int(v) for k, v in node["status"]["allocatable"].items()
                       if k.startswith("nvidia.com/mig-") and int(v)}
                if now == res:                      # isConfigAlreadyApplied: success, no pending
                    self.state(name, "success")
                    self.history.append((name, want))
                    continue
                self.state(name, "pending")
                if self.reboot_for:      # the mode change needs a reboot; the next Run starts over
                    self.state(name, "rebooting")
                    if self.stop.wait(self.reboot_for):
                        return
                    self.state(name, "pending")
                time.sleep(self.delay)   # reconfiguring the GPUs
                status = {**old, **{k: str(v) for k, v in res.items()}}
                self.kube.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p",
                                  json.dumps({"status": {"capacity": status, "allocatable": status}}))
                self.state(name, "success")
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
    from gpuvalues.planners.mig.milp.model import ModelDemand, PlanPool
    from gpuvalues.planners.mig.replan import replan
    pools = [PlanPool(pool, "A100-80GB", 1, 3)]
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
    reasons = [e["reason"] for e in node_events(kube, changed)]
    for step in ("MigRolloutCordoned", "MigRolloutEvicted", "MigRolloutDrained", "MigRolloutRelabelled",
                 "MigRolloutWaiting", "MigRolloutSucceeded"):
        assert step in reasons, (step, reasons)
    for n in unchanged:
        assert not node_events(kube, n)
    assert not [p for p in kube.pods(ns, "app=small") if p["spec"].get("nodeName") == changed
                and p["metadata"]["uid"] in {q["metadata"]["uid"] for q in pods_on[changed]}]


def node_events(kube, node: str) -> list[dict]:
    """The rollout's Events on `node` (core/v1, namespace default), oldest first; each must name
    the Node and the reporting component."""
    items = kube.json("get", "events", "-n", "default", "--field-selector",
                      f"involvedObject.kind=Node,involvedObject.name={node}")["items"]
    mine = [e for e in items if e.get("reportingComponent") == EVENT_COMPONENT]
    for e in mine:
        assert e["source"]["component"] == EVENT_COMPONENT and e["involvedObject"]["uid"], e
    return sorted(mine, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["creationTimestamp"],
                                       int(e["metadata"]["resourceVersion"])))


def _lone_node(kube, namespace, config: str, state: str, suffix: str = "lone") -> str:
    """One A100 node running `config`, with `nvidia.com/mig.config.state=state` left over from
    an earlier change, its resources from the upstream device plugin."""
    name = f"mig-{namespace[-6:]}-{suffix}"
    res = {"cpu": 64, "memory": "512Gi", "pods": 110, "nvidia.com/gpu": 0, **resources_for(CONFIGS[config])}
    kube.cluster.add_nodes(harness.nodes_from_inventory(Inventory.from_dict(
        {"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": [{
            "name": name, "capacity": res, "allocatable": res,
            "labels": {POOL: name, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                       MIG_CONFIG_LABEL: config, MIG_STATE_LABEL: state}}]})))
    return name


def _replan_file(tmp_path, node: str | list[str], frm: str, to: str, devices: list) -> str:
    """A re-plan result changing `node` (or each of a list), as `gpuvalues --output json
    replan` prints it."""
    nodes = [node] if isinstance(node, str) else node
    data = {"gpus_used": len(nodes), "nodes_changed": len(nodes),
            "changes": [{"node": n, "from": frm, "to": to} for n in nodes], "node_configs": {n: to for n in nodes},
            "plan": {"pools": [{"name": "a100", "node_groups": [{"config": to, "count": len(nodes),
                                                                 "devices": devices}]}],
                     "mig_parted_config": None}}
    f = tmp_path / "replan.json"
    f.write_text(json.dumps(data, indent=1))
    return str(f)


def _configmap(kube, ns):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mig-parted-config", "namespace": ns},
          "data": {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": CONFIGS})}}
    kube.kubectl("apply", "-f", "-", input=json.dumps(cm))


def test_a_stale_failed_state_does_not_stop_the_rollout(kube, namespace, tmp_path, capsys):
    """The node still says `failed` from an earlier attempt and mig-manager is late (3 s):
    the rollout must wait for a state written after its relabel, not abort on the old one
    (it did: `failed` read right after the relabel, exit 2, node left cordoned)."""
    from gpuvalues import cli

    _configmap(kube, namespace)
    node = _lone_node(kube, namespace, "all-1g", "failed")
    mgr = FakeMigManager(kube, [node], (namespace, "mig-parted-config"), react_after=4.0)
    mgr.applied = {node: "all-1g"}
    mgr.start()
    f = _replan_file(tmp_path, node, "all-1g", "all-3g", [{"3g.40gb": 2}])
    try:
        # interrupted right after the relabel (a first run stopped there) ...
        from kubernetes import client, config
        from gpuvalues.operations import rollout
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(kube.cluster.kubeconfig)))
        first = rollout.Rollout(core, rollout.plan_waves(rollout.load_replan(f).changes, {}, {}))
        (change,) = first.waves[0].changes
        while not first.results.get(node) or first.results[node].steps[-1:] != ["labelled"]:
            first.advance(change)
        assert MIG_STATE_LABEL not in kube.nodes()[node]["metadata"]["labels"]   # cleared with the relabel
        # ... and resumed by `gpuvalues rollout`, which waits for mig-manager's own answer
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = cli.main(["--output", "json", "rollout", f, "--poll", "0.3", "--timeout", "60"])
        assert rc == 0, capsys.readouterr().err
        assert json.loads(buf.getvalue())["nodes"][node]["steps"] == ["done"]
    finally:
        mgr.stop.set()
        mgr.join(10)
    n = kube.nodes()[node]
    assert n["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-3g" and not n["spec"].get("unschedulable")
    assert n["metadata"]["labels"][MIG_STATE_LABEL] == "success" and mgr.history == [(node, "all-3g")]
    assert mgr.states == [(node, "pending"), (node, "success")]
    events = node_events(kube, node)
    assert [e["reason"] for e in events if e["reason"] != "MigRolloutWaiting"] == [
        "MigRolloutCordoned", "MigRolloutDrained", "MigRolloutRelabelled", "MigRolloutSucceeded"], events
    assert "MigRolloutWaiting" in [e["reason"] for e in events]
    kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", node, check=False)


def test_a_stale_success_does_not_uncordon_before_mig_manager_answers(kube, namespace, tmp_path, capsys):
    """The node says `success` from its last change, the target config gives the same
    resources (a renamed config), and mig-manager, late (2 s), then fails it: the config is not
    in its ConfigMap (upstream: `failed` without `pending`). The rollout must report the
    failure and keep the node cordoned; it used to uncordon at once on the stale `success`."""
    from gpuvalues import cli

    _configmap(kube, namespace)
    node = _lone_node(kube, namespace, "all-1g", "success")
    mgr = FakeMigManager(kube, [node], (namespace, "mig-parted-config"), react_after=2.0)
    mgr.applied = {node: "all-1g"}
    mgr.start()
    try:
        capsys.readouterr()
        rc = cli.main(["rollout", _replan_file(tmp_path, node, "all-1g", "all-1g-v2", [{"1g.10gb": 7}]),
                       "--poll", "0.3", "--timeout", "60"])
        err = capsys.readouterr().err
    finally:
        mgr.stop.set()
        mgr.join(10)
    assert rc == 2, err
    (line,) = [x for x in err.splitlines() if x.startswith("gpuvalues: error:")]
    assert "mig.config.state=failed for all-1g-v2" in line and line.endswith("[GV049]"), line
    n = kube.nodes()[node]
    assert n["spec"].get("unschedulable") is True                      # still cordoned
    assert json.loads(n["metadata"]["annotations"][ROLLOUT_ANNOTATION])["step"] == "labelled"
    assert mgr.states == [(node, "failed")]
    failed = [e for e in node_events(kube, node) if e["reason"] == "MigRolloutFailed"]
    assert len(failed) == 1 and failed[0]["type"] == "Warning"
    assert "MigRolloutSucceeded" not in [e["reason"] for e in node_events(kube, node)]
    kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", node, check=False)


def test_a_busy_mig_manager_is_not_relabelled_under(kube, namespace, tmp_path, capsys):
    """mig-manager is still applying an earlier change (`pending`) when the rollout reaches the
    node: relabelling then would let that earlier run's `success` pass for ours. The rollout
    waits for it to end (it relabelled at once before), then goes through pending -> success."""
    from gpuvalues import cli

    _configmap(kube, namespace)
    node = _lone_node(kube, namespace, "all-1g", "pending")
    mgr = FakeMigManager(kube, [node], (namespace, "mig-parted-config"), busy_for=3.0)
    mgr.applied = {node: "all-1g"}
    mgr.start()
    try:
        rc = cli.main(["rollout", _replan_file(tmp_path, node, "all-1g", "all-3g", [{"3g.40gb": 2}]),
                       "--poll", "0.3", "--timeout", "60"])
        assert rc == 0, capsys.readouterr().err
    finally:
        mgr.stop.set()
        mgr.join(10)
    assert mgr.label_when_earlier_done == {node: "all-1g"}      # not relabelled while pending
    assert mgr.states == [(node, "success"), (node, "pending"), (node, "success")]
    assert mgr.history == [(node, "all-3g")]
    waiting = [e["message"] for e in node_events(kube, node) if e["reason"] == "MigRolloutWaiting"]
    assert any("still applying an earlier change" in m for m in waiting), waiting
    kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", node, check=False)


def test_cluster_mismatches_are_refused_before_anything_is_touched(kube, namespace, tmp_path, capsys):
    """Read before the first action: a node the re-plan names but the cluster lacks, and a node
    whose rollout state annotation is malformed (a `since` that is no time: it used to be a
    traceback mid-rollout). Each is one GV048 line; no node is cordoned or relabelled."""
    from gpuvalues import cli

    node = _lone_node(kube, namespace, "all-1g", "success")
    try:
        missing = _replan_file(tmp_path, f"{node}-absent", "all-1g", "all-3g", [{"3g.40gb": 2}])
        capsys.readouterr()
        assert cli.main(["rollout", missing, "--poll", "0.3", "--timeout", "10"]) == 2
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("gpuvalues: error:")]
        text = open(missing).read()
        i = text.index(f'"{node}-absent"')
        at = f"{text.count(chr(10), 0, i) + 1}:{i - text.rfind(chr(10), 0, i)}"
        assert line.startswith(f"gpuvalues: error: {missing}:{at}: changes[0].node: ") \
            and line.endswith("[GV048]"), line
        kube.kubectl("annotate", "node", node, "--overwrite", ROLLOUT_ANNOTATION + "="
                     + json.dumps({"target": "all-3g", "step": "cordoned", "since": "yesterday"}))
        f = _replan_file(tmp_path, node, "all-1g", "all-3g", [{"3g.40gb": 2}])
        assert cli.main(["rollout", f, "--poll", "0.3", "--timeout", "10"]) == 2
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("gpuvalues: error:")]
        assert f"node/{node}" in line and "kubectl annotate node" in line and line.endswith("[GV048]"), line
        n = kube.nodes()[node]
        assert not n["spec"].get("unschedulable") and n["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-1g"
        assert not node_events(kube, node)
    finally:
        kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", node, check=False)


def test_a_rebooting_mig_manager_keeps_the_node_cordoned_until_success(kube, namespace, tmp_path, capsys):
    """The change needs a reboot: mig-manager goes pending -> rebooting -> (the node reboots)
    -> pending -> success. The rollout must wait through `rebooting` with the node cordoned
    and uncordon it only after `success` and the new resources."""
    from gpuvalues import cli

    _configmap(kube, namespace)
    node = _lone_node(kube, namespace, "all-1g", "success", suffix="reboot")
    mgr = FakeMigManager(kube, [node], (namespace, "mig-parted-config"), reboot_for=3.0)
    mgr.applied = {node: "all-1g"}
    seen: list[tuple[str | None, bool]] = []        # (state label, cordoned) while it runs
    stop = threading.Event()

    def watch():
        while not stop.wait(0.2):
            n = kube.json("get", "node", node)       # one node: the 3 s window is sampled often
            seen.append((n["metadata"]["labels"].get(MIG_STATE_LABEL), bool(n["spec"].get("unschedulable"))))

    watcher = threading.Thread(target=watch, daemon=True)
    mgr.start()
    watcher.start()
    try:
        rc = cli.main(["rollout", _replan_file(tmp_path, node, "all-1g", "all-3g", [{"3g.40gb": 2}]),
                       "--poll", "0.3", "--timeout", "60"])
        assert rc == 0, capsys.readouterr().err
    finally:
        stop.set()
        watcher.join(5)
        mgr.stop.set()
        mgr.join(10)
    assert mgr.states == [(node, "pending"), (node, "rebooting"), (node, "pending"), (node, "success")]
    rebooting = [cordoned for st, cordoned in seen if st == "rebooting"]
    assert rebooting and all(rebooting), f"uncordoned while rebooting: {seen}"
    n = kube.nodes()[node]
    assert not n["spec"].get("unschedulable") and n["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-3g"
    waiting = [e["message"] for e in node_events(kube, node) if e["reason"] == "MigRolloutWaiting"]
    assert any("rebooting" in m for m in waiting), waiting
    assert [e["reason"] for e in node_events(kube, node)][-1] == "MigRolloutSucceeded"
    kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", node, check=False)


def test_a_state_annotation_gone_bad_mid_rollout_skips_that_node_only(kube, namespace, tmp_path, capsys):
    """Two nodes, one per wave. While the first waits for mig-manager (late, 6 s), someone
    rewrites its rollout state annotation into something that does not parse. The rollout
    must skip that node with a Warning Event and still roll the second; it used to stop at
    once (GV048 mid-run), leaving the second untouched."""
    from gpuvalues import cli

    _configmap(kube, namespace)
    first = _lone_node(kube, namespace, "all-1g", "success", suffix="bad-a")
    second = _lone_node(kube, namespace, "all-1g", "success", suffix="bad-b")
    # late enough that the edit below lands while the rollout waits, on a loaded machine too
    mgr = FakeMigManager(kube, [first, second], (namespace, "mig-parted-config"), react_after=6.0)
    mgr.applied = {first: "all-1g", second: "all-1g"}
    out: dict = {}

    def run():
        out["rc"] = cli.main(["rollout", _replan_file(tmp_path, [first, second], "all-1g", "all-3g", [{"3g.40gb": 2}]),
                              "--poll", "0.3", "--timeout", "60"])

    mgr.start()
    t = threading.Thread(target=run, daemon=True)
    try:
        capsys.readouterr()
        t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ann = (kube.json("get", "node", first)["metadata"].get("annotations") or {}).get(ROLLOUT_ANNOTATION)
            if ann and json.loads(ann).get("step") == "labelled":
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"{first} never reached the labelled step")
        kube.kubectl("annotate", "node", first, "--overwrite", ROLLOUT_ANNOTATION + "="
                     + json.dumps({"target": "all-3g", "step": "labelled", "since": "yesterday"}))
        t.join(90)
        assert not t.is_alive(), "the rollout did not end"
        err = capsys.readouterr().err
    finally:
        mgr.stop.set()
        mgr.join(10)
    assert out["rc"] == 2, err
    (line,) = [x for x in err.splitlines() if x.startswith("gpuvalues: error:")]
    assert first in line and second not in line and line.endswith("[GV071]"), line
    b = kube.nodes()[second]
    assert b["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-3g" and not b["spec"].get("unschedulable")
    assert json.loads(b["metadata"]["annotations"][ROLLOUT_ANNOTATION])["step"] == "done"
    skipped = [e for e in node_events(kube, first) if e["reason"] == "MigRolloutSkipped"]
    assert len(skipped) == 1 and skipped[0]["type"] == "Warning" and "still cordoned" in skipped[0]["message"]
    assert kube.nodes()[first]["spec"].get("unschedulable") is True     # left as it was
    kube.kubectl("delete", "node", "--ignore-not-found", "--wait=false", first, second, check=False)
