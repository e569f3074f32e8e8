"""A node-agent emulator for the day-1 e2e (tests/e2e/test_day1.py): it stands in for the
kubelet running the platform's containers on the fake nodes, which kwok cannot do (kwok
fakes pod status only; no container, no GPU runs here).

Each fake node starts bare (CPU, memory, pods and the labels/taint its cloud node group
gives it); its GPUs exist only here, as mock hardware (the oracle's hardware description:
GPU model and count, the current MIG layout) plus a mock sysfs tree of its PCI devices.
A thread watches the pods the real scheduler binds to those nodes. For each pod that kwok
reports Running, the container's image repository and command say which upstream agent it
is (the day-1 contract, docs/day1-contract.md); the agent then runs on that node with the
pod's own env, args and mounted ConfigMaps (read from the API server through the pod's
volumes), and writes what the real agent writes:

- `registry.k8s.io/nfd/node-feature-discovery` `nfd-worker`: the real nfd-worker (NFD
  v0.18.3, built unchanged by ci/e2e/build.sh nfd) run once (`-oneshot`) in the pod's
  emulated root, whose `host-sys` is the node's mock sysfs: it publishes a NodeFeature
  object; `nfd-master`: the real nfd-master, running as long as its pod does, turns
  NodeFeature objects into node labels. Nothing here writes an NFD label.
- `nvcr.io/nvidia/k8s-device-plugin`: the device plugin (resources: capacity/allocatable
  of the node status, as the kubelet's device manager publishes them) and, when the
  command is `gpu-feature-discovery`, GFD (labels, output as GFD's own outputer does:
  a NodeFeature `nvidia-features-for-<node>`, internal/lm/output.go at v0.19.1, which the
  real nfd-master applies). Both are the oracle (ci/oracle/deviceplugin: upstream's config
  loading, resource managers and labelers over NVIDIA's mock NVML) on the node's current
  mock hardware; the pod's config-manager container selects the config file from the
  mounted ConfigMap by the node's label (tests/e2e/fleet.py select_config restates
  upstream's cmd/config-manager, package main there).
- `nvcr.io/nvidia/k8s/dcgm-exporter`: the test-served exporter (fleetlib.Exporter) serves
  DCGM series only for pods on nodes where such a pod is Running (`dcgm_nodes`).
- `nvcr.io/nvidia/k8s-dra-driver-gpu` running `gpu-kubelet-plugin`: NVIDIA's DRA driver
  (k8s-dra-driver-gpu v25.12.0), a fake: its tags are no valid Go module versions, so it
  cannot be built here. Its NVML reading (cmd/gpu-kubelet-plugin/nvlib.go getGpuInfo)
  runs in the oracle over the node's mock GPUs (ci/oracle/deviceplugin/dra.go); the
  ResourceSlice it publishes from those facts is restated here (DRA_DRIVER below). The
  real scheduler's DRA allocator allocates the pods' ResourceClaims from it.
- `nvcr.io/nvidia/cloud-native/k8s-mig-manager`: k8s-mig-manager's reconfigure flow
  (mig-parted v0.13.1 pkg/mig/reconfigure/reconfigure.go Run, restated: the real one
  runs `nvidia-mig-parted`, which needs NVML, and drives host systemd and `chroot`):
  once the node has a `nvidia.com/mig.config` value (cmd/nvidia-mig-manager
  SyncableMigConfig waits for one), the real
  `nvidia-mig-parted assert --valid-config` on the pod's CONFIG_FILE, then mig-parted's
  own selection applied to the node's mock GPUs (ci/oracle/migmanager), the
  `nvidia.com/gpu.deploy.*` pause/restore labels and `nvidia.com/mig.config.state`
  (pending, then success or failed).

A DaemonSet that does not schedule on a node does nothing there; a pod that stops stops
its effect: nothing it wrote is refreshed (a process it ran is stopped). An agent's failure
(upstream's own error, or a call it makes failing) is kept in `errors` for the test to
report until that agent next succeeds or its pod goes; each agent is retried every tick.

Not emulated (said where it matters): the nfd-worker's periodic re-discovery (the mock
PCI devices never change) and GFD's features.d file output (useNodeFeatureAPI false: its
file is read by nfd-worker's `local` source at an absolute path, which a process here
cannot be given per node).

When an agent re-runs follows the real one: the device plugin enumerates its devices
when its pod starts and when its config-manager signals it (the node's config label
selects another config), so a MIG change under a running plugin is not seen until the
plugin restarts; GFD relabels every GFD_SLEEP_INTERVAL.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import yaml

from tests.conftest import ROOT
from tests.e2e import fleet as gpu_fleet

NFD_IMAGE = "registry.k8s.io/nfd/node-feature-discovery"
DP_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
MIG_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/k8s-mig-manager"
DCGM_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter"
DRA_IMAGE = "nvcr.io/nvidia/k8s-dra-driver-gpu"
#: the DRA driver's name (k8s-dra-driver-gpu v25.12.0 cmd/gpu-kubelet-plugin/main.go DriverName)
DRA_DRIVER = "gpu.nvidia.com"
#: GFD's NodeFeature (k8s-device-plugin v0.19.1 internal/lm/output.go nodeFeatureVendorPrefix)
GFD_NODEFEATURE_PREFIX = "nvidia-features-for"
#: nfdv1alpha1.NodeFeatureObjNodeNameLabel (NFD api/nfd/v1alpha1/types.go)
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"

#: PCI device ids of the mock tables' boards (the PCI ID Repository, pci-ids.ucw.cz,
#: vendor 10de), for the mock sysfs. Class 0302 (3D controller) for the SXM/PCIe data
#: centre boards, 0300 (VGA) for GeForce, as those boards enumerate.
PCI_IDS = {"A100-SXM4-40GB": ("0x20b0", "0x030200"), "A100-SXM4-80GB": ("0x20b2", "0x030200"),
           "A100-PCIE-40GB": ("0x20f1", "0x030200"), "A100-PCIE-80GB": ("0x20b5", "0x030200"),
           "A30-24GB": ("0x20b7", "0x030200"), "H100-SXM5-80GB": ("0x2330", "0x030200"),
           "H200-SXM5-141GB": ("0x2335", "0x030200"), "B200-SXM5-180GB": ("0x2901", "0x030200")}
PCI_NO_MIG = {"NVIDIA L4": ("0x27b8", "0x030200"), "NVIDIA L40S": ("0x26b9", "0x030200"),
              "NVIDIA GeForce RTX 4090": ("0x2684", "0x030000")}


def image_repository(image: str) -> str:
    """`repo[:tag][@digest]` -> repo (a registry port's colon is kept)."""
    image = image.split("@", 1)[0]
    head, _, last = image.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def agent_of(container: Mapping) -> str | None:
    """Which upstream agent a container is, by image repository and command (the day-1
    contract); None for anything else (config-manager sidecars, workload servers...)."""
    repo = image_repository(container.get("image", ""))
    cmd = [*(container.get("command") or []), *(container.get("args") or [])]
    first = os.path.basename(cmd[0]) if cmd else ""
    if repo == NFD_IMAGE and first in ("nfd-worker", "nfd-master"):
        return first
    if repo == DP_IMAGE:
        return {"gpu-feature-discovery": "gfd", "nvidia-device-plugin": "device-plugin"}.get(first)
    if repo == MIG_MANAGER_IMAGE:
        return "mig-manager"
    if repo == DCGM_IMAGE:
        return "dcgm-exporter"
    if repo == DRA_IMAGE and any("gpu-kubelet-plugin" in str(a).split() for a in cmd):
        return "dra-kubelet-plugin"        # the chart runs it from a `bash -c` script
    return None


@dataclass
class MockNode:
    """One node's hardware, kept off the Node object: the oracle's hardware description
    (its `mig` is the current MIG layout) and a host root with the mock sysfs."""

    name: str
    hardware: dict
    root: Path

    def write_sysfs(self) -> None:
        """sys/bus/pci/devices/<addr>/{class,vendor,device,subsystem_*} for every GPU,
        the files NFD's pci source reads (source/pci/utils.go mandatoryDevAttrs)."""
        devices = self.root / "sys" / "bus" / "pci" / "devices"
        devices.mkdir(parents=True, exist_ok=True)
        hw = self.hardware
        if not hw:          # a CPU node: no NVIDIA device
            return
        dev, cls = PCI_IDS.get(hw["gpu"]) or PCI_NO_MIG[hw["name"]]
        for i in range(int(hw["count"])):
            d = devices / f"0000:{i + 1:02x}:00.0"    # hardware.go's bus ids
            d.mkdir(exist_ok=True)
            for attr, value in (("class", cls), ("vendor", "0x10de"), ("device", dev),
                                ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x1463")):
                (d / attr).write_text(value + "\n")


def mock_nodes(workdir: Path, hardware: Mapping[str, dict]) -> dict[str, MockNode]:
    out = {}
    for name, hw in hardware.items():
        n = MockNode(name, dict(hw or {}), workdir / "hosts" / name)
        n.write_sysfs()
        out[name] = n
    return out


def _env(container: Mapping, pod: Mapping) -> dict[str, str]:
    """The container's env as the kubelet resolves it (literal values and the downward
    API fields the platform's pods use)."""
    fields = {"spec.nodeName": pod["spec"].get("nodeName", ""), "metadata.name": pod["metadata"]["name"],
              "metadata.namespace": pod["metadata"]["namespace"], "metadata.uid": pod["metadata"]["uid"]}
    out = {}
    for e in container.get("env") or []:
        if "value" in e:
            out[e["name"]] = str(e["value"])
        elif "fieldRef" in e.get("valueFrom", {}):
            out[e["name"]] = fields.get(e["valueFrom"]["fieldRef"]["fieldPath"], "")
    return out


@dataclass
class _Running:
    """An agent started for one pod (uid) on one node."""

    agent: str
    node: str
    last_input: str = ""
    last_hw: str = ""
    last_run: float = 0.0
    proc: subprocess.Popen | None = None
    done: bool = False
    owned: set = field(default_factory=set)      # resource names it published
    thread: "MigManager | None" = None
    where: str = ""                               # its key in NodeAgents.errors


class NodeAgents:
    """The emulator: `start()` a polling thread, `stop()` it (and every agent process)."""

    def __init__(self, cluster, nodes: Mapping[str, MockNode], workdir: Path, interval: float = 1.0):
        from tests.oracle import oraclelib as ol

        self.cluster = cluster
        self.nodes = dict(nodes)
        self.workdir = workdir
        self.interval = interval
        self.running: dict[str, _Running] = {}
        self.errors: dict[str, str] = {}          # "agent pod on node" -> upstream's error
        self.unsupported: set[str] = set()
        self.log: list[str] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._oracle = ol.ensure_built()
        self._configmaps: dict = {}
        self._nfd = nfd_bin()
        self._migmanager = migmanager_bin()

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> "NodeAgents":
        self._thread = threading.Thread(target=self._loop, name="node-agents", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)
        for r in list(self.running.values()):
            self._kill(r)

    def dcgm_nodes(self) -> set[str]:
        """Nodes where a DCGM exporter pod is Running (the exporter serves only those)."""
        with self.lock:
            return {r.node for r in self.running.values() if r.agent == "dcgm-exporter"}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
                self.errors.pop("emulator", None)    # a failed list is retried, as a kubelet's watch is
            except Exception as e:
                self.errors["emulator"] = repr(e)
            self._stop.wait(self.interval)

    # --- one pass ------------------------------------------------------------------------

    def tick(self) -> None:
        # one list of what a kubelet watches (its pods, its node, their ConfigMaps)
        items = json.loads(self.cluster.kubectl("get", "nodes,pods,configmaps", "-A", "-o", "json").stdout)["items"]
        pods = [o for o in items if o["kind"] == "Pod"]
        nodes = {o["metadata"]["name"]: o for o in items if o["kind"] == "Node"}
        self._configmaps = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in items
                            if o["kind"] == "ConfigMap"}
        seen = set()
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if node not in self.nodes or pod["status"].get("phase") != "Running" \
                    or pod["metadata"].get("deletionTimestamp"):
                continue
            for c in pod["spec"]["containers"]:
                agent = agent_of(c)
                if agent is None:
                    continue
                key = f"{pod['metadata']['uid']}/{c['name']}"
                seen.add(key)
                with self.lock:
                    r = self.running.setdefault(key, _Running(agent, node))
                self._run(r, pod, c, nodes[node])
        with self.lock:
            gone = [k for k in self.running if k not in seen]
            for k in gone:
                r = self.running.pop(k)
                self._kill(r)
                self.errors.pop(r.where, None)          # its pod is gone: so is what it failed at

    def _kill(self, r: _Running) -> None:
        # the kubelet's device manager on a plugin that goes away (pkg/kubelet/cm/devicemanager
        # manager.go PluginDisconnected -> markResourceUnhealthy): its devices are unhealthy,
        # allocatable 0 (capacity kept for the grace period); what a plugin pod already running
        # on the node in its place publishes is its own
        served = {k for x in self.running.values() if x is not r and x.agent == "device-plugin"
                  and x.node == r.node for k in x.owned}
        gone = sorted(r.owned - served) if r.agent == "device-plugin" else []
        if gone:
            self.cluster.kubectl("patch", "node", r.node, "--subresource=status", "--type=merge", "-p",
                                 json.dumps({"status": {"allocatable": {k: "0" for k in gone}}}), check=False)
        if r.agent == "dra-kubelet-plugin":
            # the kubelet wipes an unregistered DRA driver's ResourceSlices
            # (pkg/kubelet/cm/dra/plugin: after its grace period; at once here)
            for name in r.owned:
                self.cluster.kubectl("delete", "resourceslice", name, "--wait=false", check=False)
        if r.thread is not None:
            r.thread.stop.set()
        if r.proc is not None and r.proc.poll() is None:
            r.proc.terminate()
            try:
                r.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                r.proc.kill()

    def _run(self, r: _Running, pod: Mapping, c: Mapping, node: Mapping) -> None:
        where = r.where = f"{r.agent} {pod['metadata']['namespace']}/{pod['metadata']['name']} on {r.node}"
        try:
            if r.agent == "nfd-worker":
                self._nfd_worker(r, pod, c)
            elif r.agent == "nfd-master":
                self._nfd_master(r, pod, c)
            elif r.agent in ("device-plugin", "gfd"):
                self._nvidia(r, pod, c, node)
            elif r.agent == "mig-manager":
                self._mig_manager(r, pod, c, node)
            elif r.agent == "dra-kubelet-plugin":
                self._dra_kubelet_plugin(r, pod, c, node)
            self.errors.pop(where, None)
        except AgentError as e:
            self.errors[where] = str(e)
        except (subprocess.SubprocessError, OSError, RuntimeError, ValueError) as e:
            # a call the agent makes failing once (kubectl against a loaded API server, an
            # oracle run past its timeout): that agent's error, retried next tick like an
            # AgentError; it used to abort the whole tick and stay in `errors` for good
            # under "emulator", failing a test whose agents had all recovered
            self.errors[where] = f"{e.__class__.__name__}: {e}"

    # --- the pod's files ---------------------------------------------------------------

    def pod_root(self, pod: Mapping, c: Mapping) -> Path:
        """The container's filesystem as far as the agents read it: each ConfigMap volume
        at its mountPath (keys or items as files), each hostPath volume a link to the
        node's mock host root, emptyDirs empty. Paths are relative to the returned root."""
        root = self.workdir / "pods" / pod["metadata"]["uid"] / c["name"]
        root.mkdir(parents=True, exist_ok=True)
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        host = self.nodes[pod["spec"]["nodeName"]].root
        for m in c.get("volumeMounts") or []:
            v = volumes.get(m["name"], {})
            dst = root / m["mountPath"].lstrip("/")
            if "configMap" in v:
                files = self._configmap(pod["metadata"]["namespace"], v["configMap"])
                if m.get("subPath"):
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    if m["subPath"] in files:
                        dst.write_text(files[m["subPath"]])
                    continue
                dst.mkdir(parents=True, exist_ok=True)
                for name, text in files.items():
                    (dst / name).parent.mkdir(parents=True, exist_ok=True)
                    (dst / name).write_text(text)
            elif "hostPath" in v:
                src = host / v["hostPath"]["path"].lstrip("/")
                dst.parent.mkdir(parents=True, exist_ok=True)
                if not os.path.lexists(dst):
                    dst.symlink_to(src)
            elif not os.path.lexists(dst):
                dst.mkdir(parents=True)
        return root

    def _configmap(self, namespace: str, ref: Mapping) -> dict[str, str]:
        cm = self._configmaps.get((namespace, ref["name"]))
        if cm is None:
            if ref.get("optional"):
                return {}
            raise AgentError(f"ConfigMap {namespace}/{ref['name']} of a volume not found")
        data = cm.get("data") or {}
        if ref.get("items"):
            return {i["path"]: data[i["key"]] for i in ref["items"] if i["key"] in data}
        return dict(data)

    # --- NFD ---------------------------------------------------------------------------

    def _nfd_argv(self, which: str, pod: Mapping, c: Mapping, root: Path, extra: list[str]) -> list[str]:
        """The container's args with its config path moved into the emulated root (the
        upstream default when the pod sets none) and the cluster's kubeconfig."""
        args = [str(a) for a in (c.get("command") or [])[1:]] + [str(a) for a in c.get("args") or []]
        default = f"/etc/kubernetes/node-feature-discovery/nfd-{which}.conf"   # cmd/nfd-*/main.go
        out, has_config = [], False
        for a in args:
            flag, eq, val = a.partition("=")
            if flag.lstrip("-") == "config" and eq:
                a, has_config = f"{flag}={root / val.lstrip('/')}", True
            out.append(a)
        if not has_config:
            out.append(f"-config={root / default.lstrip('/')}")
        return [str(self._nfd), which, *out, f"-kubeconfig={self.cluster.kubeconfig}", *extra]

    def _nfd_env(self, pod: Mapping, c: Mapping) -> dict[str, str]:
        # KUBERNETES_NAMESPACE: what the pod's service-account mount tells it
        # (NFD pkg/utils GetKubernetesNamespace)
        return {"PATH": os.environ.get("PATH", ""), **_env(c, pod),
                "KUBERNETES_NAMESPACE": pod["metadata"]["namespace"]}

    def _nfd_worker(self, r: _Running, pod: Mapping, c: Mapping) -> None:
        if r.done:
            return
        root = self.pod_root(pod, c)
        argv = self._nfd_argv("worker", pod, c, root, ["-oneshot"])
        res = subprocess.run(argv, cwd=root, env=self._nfd_env(pod, c), capture_output=True,
                             text=True, timeout=60)
        self.log.append(f"nfd-worker on {r.node}: rc {res.returncode}")
        if res.returncode:
            raise AgentError(f"nfd-worker exited {res.returncode}: {res.stderr.strip()[-800:]}")
        r.done = True

    def _nfd_master(self, r: _Running, pod: Mapping, c: Mapping) -> None:
        if r.proc is not None and r.proc.poll() is None:
            return
        if r.proc is not None:
            err = (self.workdir / f"nfd-master-{pod['metadata']['uid']}.log").read_text()[-800:]
            r.proc = None
            raise AgentError(f"nfd-master exited: {err}")
        from tests.e2e.conftest import harness
        root = self.pod_root(pod, c)
        port = harness.free_port()
        # its HTTP port (metrics, healthz) moved off the pod's, which is the pod network's
        argv = self._nfd_argv("master", pod, c, root, [f"-port={port}"])
        log = open(self.workdir / f"nfd-master-{pod['metadata']['uid']}.log", "w")
        r.proc = subprocess.Popen(argv, cwd=root, env=self._nfd_env(pod, c), stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)

    # --- device plugin and GFD ---------------------------------------------------------

    def _nvidia(self, r: _Running, pod: Mapping, c: Mapping, node: Mapping) -> None:
        env = _env(c, pod)
        cm = next((x for x in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
                   if (x.get("command") or [""])[0] == "config-manager"), None)
        hw = self.nodes[r.node].hardware
        if not hw:
            raise AgentError(f"{r.agent}: no NVIDIA GPU on this node (NVML not found)")
        root = self.pod_root(pod, c)
        if cm is not None:
            cm_env = _env(cm, pod)
            src = root / cm_env.get("CONFIG_FILE_SRCDIR", "/available-configs").lstrip("/")
            files = {p.name: p.read_text() for p in src.iterdir()} if src.is_dir() else {}
            label = node["metadata"].get("labels", {}).get(cm_env.get("NODE_LABEL", ""), "")
            try:
                name = gpu_fleet.select_config(label, set(files), cm_env.get("DEFAULT_CONFIG", ""),
                                               cm_env.get("FALLBACK_STRATEGIES", "").split(","))
            except AssertionError as e:
                raise AgentError(f"config-manager: {e}") from None
            config_text = files[name] if name else None
        else:
            path = root / env.get("CONFIG_FILE", "/nonexistent").lstrip("/")
            config_text = path.read_text() if path.is_file() else None
        env.pop("CONFIG_FILE", None)
        side = {"args": [str(a) for a in c.get("args") or []], "env": env}
        # The plugin re-enumerates only on a restart (its config-manager's SIGHUP when
        # the selected config changes); GFD every sleep interval.
        key = hashlib.sha256(json.dumps([r.agent, side, config_text], sort_keys=True).encode()).hexdigest()
        hw_key = hashlib.sha256(json.dumps(hw, sort_keys=True).encode()).hexdigest()
        if key == r.last_input:
            if r.agent == "device-plugin" or hw_key == r.last_hw:
                return
            if time.monotonic() - r.last_run < go_duration(env.get("GFD_SLEEP_INTERVAL", "60s")):
                return
        req = {"hardware": hw, ("plugin" if r.agent == "device-plugin" else "gfd"): side}
        out = self._oracle_run(req, config_text)
        if r.agent == "device-plugin":
            self._publish_resources(r, out["plugin"]["resources"])
        else:
            cfg = out["gfd"]["config"]
            if not (cfg.get("flags") or {}).get("useNodeFeatureAPI"):
                self.unsupported.add(f"gfd features.d output on {r.node}")
                raise AgentError("GFD with useNodeFeatureAPI=false writes features.d, not emulated here")
            self._gfd_nodefeature(pod, env, out["gfd"]["labels"])
        r.last_input, r.last_hw, r.last_run = key, hw_key, time.monotonic()

    def _oracle_run(self, req: dict, config_text: str | None) -> dict:
        return oracle_run(self._oracle, req, config_text, self.workdir / "oracle")

    def _publish_resources(self, r: _Running, resources: Mapping[str, int]) -> None:
        """The kubelet's device manager: each plugin's resource with its device count in
        capacity and allocatable; a resource the plugin no longer serves goes to 0."""
        status = {k: str(v) for k, v in resources.items()}
        for old in r.owned - set(status):
            status[old] = "0"
        r.owned |= set(status)
        self.cluster.kubectl("patch", "node", r.node, "--subresource=status", "--type=merge", "-p",
                             json.dumps({"status": {"capacity": status, "allocatable": status}}))

    def _gfd_nodefeature(self, pod: Mapping, env: Mapping, labels: Mapping[str, str]) -> None:
        """GFD's outputer with useNodeFeatureAPI (v0.19.1 internal/lm/output.go): the
        NodeFeature `nvidia-features-for-<node>` in its NAMESPACE, labelled with the node
        name, its spec.labels the labels; owned by the DaemonSet and the pod."""
        node, ns = env.get("NODE_NAME", ""), env.get("NAMESPACE", "")
        if not node or not ns:
            raise AgentError("GFD: required flag node-name / namespace not set")
        owners = [{**o, "controller": True} for o in pod["metadata"].get("ownerReferences", [])
                  if o["kind"] == "DaemonSet"][:1]
        if owners:
            owners.append({"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                           "uid": pod["metadata"]["uid"]})
        obj = {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
               "metadata": {"name": f"{GFD_NODEFEATURE_PREFIX}-{node}", "namespace": ns,
                            "labels": {NODE_NAME_LABEL: node}, "ownerReferences": owners},
               "spec": {"features": {}, "labels": dict(labels)}}
        res = self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                                   input=json.dumps(obj), check=False)
        if res.returncode:
            raise AgentError(f"GFD: failed to create NodeFeature object: {res.stderr.strip()}")

    # --- the NVIDIA DRA driver's kubelet plugin -----------------------------------------

    def _dra_kubelet_plugin(self, r: _Running, pod: Mapping, c: Mapping, node: Mapping) -> None:
        """Publish the node's GPUs once, as the driver does at start (driver.go
        publishResources without the DynamicMIG gate: one ResourceSlice, pool = node name)."""
        if r.done:
            return
        env = _env(c, pod)
        if not env.get("NODE_NAME"):
            raise AgentError("gpu-kubelet-plugin: required flag \"node-name\" not set")
        hw = self.nodes[r.node].hardware
        if not hw:
            raise AgentError("gpu-kubelet-plugin: error creating driver: NVML not found")
        obj = dra_resource_slice(env["NODE_NAME"], node["metadata"]["uid"], dra_gpus(self._oracle, hw, self.workdir / "oracle"))
        res = self.cluster.kubectl("create", "-o", "name", "-f", "-", input=json.dumps(obj), check=False)
        if res.returncode:
            raise AgentError(f"gpu-kubelet-plugin: error publishing resources: {res.stderr.strip()}")
        r.owned.add(res.stdout.strip().split("/", 1)[-1])
        r.done = True
        self.log.append(f"dra-kubelet-plugin on {r.node}: {len(obj['spec']['devices'])} devices published")

    # --- mig-manager -------------------------------------------------------------------

    def _mig_manager(self, r: _Running, pod: Mapping, c: Mapping, node: Mapping) -> None:
        """k8s-mig-manager: its process is a thread here (MigManager), as long as the pod runs."""
        if r.thread is None:
            env = _env(c, pod)
            if not env.get("CONFIG_FILE"):   # cmd/nvidia-mig-manager validateFlags
                raise AgentError("invalid -f <config-file> flag: must not be empty string")
            r.thread = MigManager(self, r.node, self.pod_root(pod, c) / env["CONFIG_FILE"].lstrip("/"),
                                  env.get("DEFAULT_GPU_CLIENTS_NAMESPACE", "default"))
            r.thread.start()
        if r.thread.error:
            raise AgentError(r.thread.error)

    def _label(self, node: str, labels: Mapping[str, str]) -> None:
        self.cluster.kubectl("label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in labels.items()))


class MigManager(threading.Thread):
    """k8s-mig-manager v0.13.1 on one node: cmd/nvidia-mig-manager/main.go's loop (wait for
    a new non-empty `nvidia.com/mig.config` value, reconfigure) around
    pkg/mig/reconfigure/reconfigure.go Run, restated step by step; its mig-parted calls
    are the real `assert --valid-config` and ci/oracle/migmanager (mig-parted's own
    selection) on the node's mock GPUs. Host steps (systemd clients, reboot, CDI) are
    absent: WITH_SHUTDOWN_HOST_GPU_CLIENTS false, no reboot needed by the mock."""

    def __init__(self, agents: "NodeAgents", node: str, config_file: Path, namespace: str):
        super().__init__(name=f"mig-manager-{node}", daemon=True)
        self.agents, self.node, self.config_file, self.namespace = agents, node, config_file, namespace
        self.stop = threading.Event()
        self.error = ""
        self.last_read = ""

    def run(self) -> None:
        while not self.stop.is_set():
            labels = self._labels()
            value = labels.get(MIG_CONFIG_LABEL, "")
            if value and value != self.last_read:        # SyncableMigConfig.Get
                self.last_read = value
                try:
                    self.reconfigure(value)
                    self.error = ""
                except Exception as e:
                    if self.stop.is_set():
                        return
                    self.error = str(e) if isinstance(e, AgentError) else repr(e)
                    self.agents.log.append(f"mig-manager on {self.node}: {self.error}")
            self.stop.wait(1)

    def _labels(self) -> dict:
        res = self.agents.cluster.kubectl("get", "node", self.node, "-o", "json", check=False)
        return json.loads(res.stdout)["metadata"].get("labels", {}) if res.returncode == 0 else {}

    def _set(self, labels: Mapping[str, str]) -> None:
        self.agents._label(self.node, labels)

    def reconfigure(self, selected: str) -> None:
        labels = self._labels()                                     # getCurrentNodeLabels
        deployed = {k: labels.get(k, "") for k in DEPLOY_LABELS}
        restore = {k: "false" if v == "false" else "true" for k, v in deployed.items()}

        def failed(msg: str):                                       # setState(failed)
            self._set(restore)
            self._set({MIG_STATE_LABEL: "failed"})
            raise AgentError(f"mig-manager: {msg}")

        if not self.config_file.is_file():
            failed(f"failed to validate MIG configuration: read error: open {self.config_file.name}: no such file")
        text = self.config_file.read_text()
        from tests.oracle import oraclelib as ol
        ok, msg = ol.migparted_assert_valid(text, selected)         # validateMigConfig
        if not ok:
            failed(f"failed to validate MIG configuration: {msg}")
        hw = self.agents.nodes[self.node].hardware
        gpus = mig_gpus(hw)
        res = subprocess.run([str(self.agents._migmanager)], input=json.dumps(
            {"configFile": str(self.config_file), "selectedConfig": selected, "gpus": gpus}),
            capture_output=True, text=True, timeout=60)
        out = json.loads(res.stdout or "{}")
        if res.returncode == 0 and out["gpus"] == gpus:             # isConfigAlreadyApplied
            self._set({MIG_STATE_LABEL: "success"})
            return
        self._set({MIG_STATE_LABEL: "pending"})
        # shutdownKubernetesGPUClients, then waitForPodsToBeDeleted (5 min each)
        self._set({k: "false" if v == "false" else "paused-for-mig-change" for k, v in deployed.items()})
        for app in ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-dcgm"):
            t0 = time.monotonic()
            while self._pods(app):
                if self.stop.is_set():
                    return
                if time.monotonic() - t0 > 300:
                    raise AgentError(f"mig-manager: {app} pod did not shutdown")
                time.sleep(1)
        for app in ("nvidia-cuda-validator", "nvidia-device-plugin-validator"):
            for name in self._pods(app):
                self.agents.cluster.kubectl("delete", "pod", name, "-n", self.namespace, "--wait=false", check=False)
        if res.returncode:                                          # applyMigConfig
            failed(f"failed to apply MIG configuration: {out.get('error', res.stderr.strip())}")
        with self.agents.lock:
            self.agents.nodes[self.node].hardware = apply_mig(hw, out["gpus"])
        self.agents.log.append(f"mig-manager on {self.node}: {selected} applied")
        self._set(restore)                                          # restartKubernetesGPUClients
        self._set({MIG_STATE_LABEL: "success"})

    def _pods(self, app: str) -> list[str]:
        res = self.agents.cluster.kubectl("get", "pods", "-n", self.namespace, "-l", f"app={app}",
                                          "--field-selector", f"spec.nodeName={self.node}", "-o", "name", check=False)
        return [x.split("/", 1)[1] for x in res.stdout.split()]


class AgentError(RuntimeError):
    """An agent failed on its node (the message is upstream's, or the emulator's limit)."""


MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
#: the GPU clients mig-manager pauses around a change (reconfigure.go *DeployLabel)
DEPLOY_LABELS = ("nvidia.com/gpu.deploy.device-plugin", "nvidia.com/gpu.deploy.gpu-feature-discovery",
                 "nvidia.com/gpu.deploy.dcgm-exporter", "nvidia.com/gpu.deploy.dcgm",
                 "nvidia.com/gpu.deploy.nvsm")
#: the mock tables with MIG profiles (go-nvml pkg/nvml/mock/gpus; "no-mig" has none)
MIG_CAPABLE = {"A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIE-40GB", "A100-PCIE-80GB", "A30-24GB",
               "H100-SXM5-80GB", "H200-SXM5-141GB", "B200-SXM5-180GB"}


def pci_device_id(hw: Mapping) -> str:
    """mig-parted's device id (device << 16 | vendor, types.NewDeviceID) of the mock GPU."""
    dev, _ = PCI_IDS.get(hw["gpu"]) or PCI_NO_MIG[hw["name"]]
    return f"0x{int(dev, 16):04X}10DE"


def mig_gpus(hw: Mapping) -> list[dict]:
    """The node's GPUs as ci/oracle/migmanager reads them."""
    mig = hw.get("mig") or {}
    return [{"deviceID": pci_device_id(hw), "migCapable": hw["gpu"] in MIG_CAPABLE,
             "migEnabled": str(i) in mig,
             "migDevices": {p: mig[str(i)].count(p) for p in sorted(set(mig.get(str(i), [])))} or None}
            for i in range(int(hw["count"]))]


def apply_mig(hw: Mapping, gpus: list[dict]) -> dict:
    """The hardware description after mig-parted: `mig` lists each MIG-enabled GPU's devices."""
    out = {k: v for k, v in hw.items() if k != "mig"}
    mig = {str(i): [p for p, n in sorted((g.get("migDevices") or {}).items()) for _ in range(n)]
           for i, g in enumerate(gpus) if g["migEnabled"]}
    if mig:
        out["mig"] = mig
    return out


def oracle_run(oracle: Path, req: dict, config_text: str | None, tmp: Path) -> dict:
    """One run of the oracle (ci/oracle/deviceplugin: upstream's code over the mock NVML) on
    `req`, with `config_text` as its config file; AgentError carries upstream's error."""
    tmp.mkdir(parents=True, exist_ok=True)
    if config_text is not None:
        path = tmp / f"config-{hashlib.sha256(config_text.encode()).hexdigest()[:12]}.yaml"
        path.write_text(config_text)
        req["configFile"] = str(path)
    proc = subprocess.run([str(oracle)], input=json.dumps(req), capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TMPDIR": str(tmp)})
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AgentError(f"oracle printed no JSON (rc {proc.returncode}): {proc.stderr[-800:]}") from None
    if proc.returncode:
        raise AgentError(f"{out.get('component')}: {out.get('error')}")
    return out


def dra_gpus(oracle: Path, hw: Mapping, tmp: Path) -> list[dict]:
    """The NVIDIA DRA driver's reading of a node's GPUs (cmd/gpu-kubelet-plugin/nvlib.go
    getGpuInfo, run in the oracle over the node's mock NVML: ci/oracle/deviceplugin/dra.go);
    whole GPUs only (AgentError for a MIG-enabled one: not emulated)."""
    gpus = oracle_run(oracle, {"hardware": dict(hw), "dra": {}}, None, tmp)["dra"]["gpus"]
    if any(g["migEnabled"] for g in gpus):
        raise AgentError("gpu-kubelet-plugin: MIG devices are not emulated (the DRA fleets claim whole GPUs)")
    return gpus


def dra_driver_slices(nodes: Mapping[str, tuple[str, Mapping]], tmp: Path) -> list[dict]:
    """The ResourceSlices NVIDIA's DRA driver publishes on `nodes` (name -> (Node uid, mock
    hardware)), built exactly as the emulated kubelet plugin builds them (dra_gpus,
    dra_resource_slice): the one source of DRA devices in the e2e tests. MIG-enabled nodes
    are left out (the emulated driver refuses them)."""
    from tests.oracle import oraclelib as ol
    oracle = ol.ensure_built()
    out = []
    for name, (uid, hw) in sorted(nodes.items()):
        if not hw or hw.get("mig"):
            continue
        out.append(dra_resource_slice(name, uid, dra_gpus(oracle, hw, tmp)))
    return out


def semver(text: str) -> str:
    """Masterminds/semver's MustParse(text).String() for the driver's versions: a
    missing minor or patch is 0 (`9.0` -> `9.0.0`)."""
    parts = (text.split(".") + ["0", "0"])[:3]
    return ".".join(str(int(p)) for p in parts)


def dra_resource_slice(node: str, node_uid: str, gpus: list[Mapping]) -> dict:
    """The ResourceSlice the NVIDIA DRA driver publishes for a node's whole GPUs
    (k8s-dra-driver-gpu v25.12.0: GpuInfo.GetDevice in cmd/gpu-kubelet-plugin/deviceinfo.go
    with PartDevAttributes in partitions.go; the slice and pool as driver.go
    publishResources and k8s.io/dynamic-resource-allocation's resourceslice controller
    write them, owned by the Node, name generated from node and driver). Left out, as
    the driver leaves them out here: `resource.kubernetes.io/pcieRoot` (sysfs has no PCI
    root path for the mock devices: GetPCIeRootAttributeByPCIBusID fails, the driver
    warns and continues) and `addressingMode` (not reported on non-coherent systems)."""
    devices = []
    for g in sorted(gpus, key=lambda g: g["minor"]):
        devices.append({"name": f"gpu-{g['minor']}", "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": g["uuid"]},
            "productName": {"string": g["productName"]}, "brand": {"string": g["brand"]},
            "architecture": {"string": g["architecture"]},
            "cudaComputeCapability": {"version": semver(g["cudaComputeCapability"])},
            "driverVersion": {"version": semver(g["driverVersion"])},
            "cudaDriverVersion": {"version": semver(g["cudaDriverVersion"])},
            "resource.kubernetes.io/pciBusID": {"string": g["pcieBusID"]}},
            "capacity": {"memory": {"value": str(int(g["memoryBytes"]))}}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": f"{node}-{DRA_DRIVER}-",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                                              "controller": True}]},
            "spec": {"driver": DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def go_duration(text: str) -> float:
    """A Go duration (`60s`, `1m30s`, `infinite`) in seconds."""
    import re
    if text in ("infinite", "0", ""):
        return float("inf") if text == "infinite" else 0.0
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|h|m|s)", text))


def migmanager_bin() -> Path:
    """ci/oracle/build.sh migmanager (built on demand, cached by its source hash)."""
    from tests.oracle import oraclelib as ol
    src = ROOT / "ci" / "oracle" / "migmanager" / "main.go"
    v = f"{ol.versions()['MIG_PARTED_VERSION']}-{hashlib.sha256(src.read_bytes()).hexdigest()[:12]}"
    path = ol.CACHE / f"migmanager-{v}" / "bin" / "migmanager"
    if not os.access(path, os.X_OK):
        proc = subprocess.run(["bash", str(ROOT / "ci" / "oracle" / "build.sh"), "migmanager"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"ci/oracle/build.sh migmanager failed:\n{proc.stderr[-3000:]}"
    return path


def nfd_bin() -> Path:
    """`nfd worker|master` of ci/e2e/build.sh nfd (built on demand, cached)."""
    from tests.e2e.conftest import harness
    v = harness.versions()["NFD_VERSION"]
    cache = Path(os.environ.get("E2E_CACHE") or ROOT / ".cache" / "e2e")
    path = cache / f"nfd-{v}" / "bin" / "nfd"
    if not os.access(path, os.X_OK):
        proc = subprocess.run(["bash", str(ROOT / "ci" / "e2e" / "build.sh"), "nfd"], capture_output=True, text=True)
        assert proc.returncode == 0, f"ci/e2e/build.sh nfd failed:\n{proc.stderr[-3000:]}"
    return path


def bare_node(name: str, labels: Mapping[str, str], capacity: Mapping[str, str], gpu: bool) -> dict:
    """A kwok Node as a cloud provider hands it over: capacity from the kubelet (cpu,
    memory, pods, ephemeral-storage), its node group's labels and, on a GPU node group,
    the nvidia.com/gpu NoSchedule taint (GKE sets it on GPU node pools; EKS/AKS node
    groups are configured with it). No GPU label, no GPU resource."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": {"taints": [dict(gpu_fleet.GPU_TAINT)] if gpu else []},
            "status": {"capacity": dict(capacity), "allocatable": dict(capacity)}}
    return node


def hardware_yaml_nodes(path: Path = gpu_fleet.HARDWARE) -> dict[str, dict]:
    """tests/e2e/hardware.yaml's GPU nodes as mock hardware (name -> description)."""
    doc = yaml.safe_load(path.read_text())
    return {n["name"]: dict(n["hardware"]) for n in doc["nodes"] if "hardware" in n}


def wait_for(pred, timeout: float, interval: float = 0.5):
    t0 = time.monotonic()
    while time.monotonic() < t0 + timeout:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    return None
