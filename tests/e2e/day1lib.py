"""The day-1 harness (tests/e2e/test_day1.py): bare nodes, the node-agent emulator, and
the install exactly as `gpuvalues values` prints it.

Bare nodes come from the spec's `cluster.nodePools` (what the user owns: GPU model, GPUs
per node, node count), never from the project's computed node side: each node carries
only the kubelet's CPU/memory/pods capacity, its node pool's labels from day 0 (the
pool's `nodeSelector`, by default POOL_LABEL: docs/day1-contract.md) and the GPU node
group's taint; its GPUs are mock hardware in the emulator (tests/e2e/nodeagent.py), MIG
disabled as a GPU ships.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conftest import ROOT, TOOLS
from tests.e2e import e2elib, fleetlib, nodeagent

#: a node pool's default nodeSelector (docs/day1-contract.md), standing for the label a
#: cloud provider sets on a node pool's nodes (GKE cloud.google.com/gke-nodepool, EKS
#: eks.amazonaws.com/nodegroup, AKS kubernetes.azure.com/agentpool)
POOL_LABEL = "gpu-inference.io/node-pool"
#: what the printed install labels a node group's nodes with (docs/day1-contract.md)
GROUP_LABEL = "gpu-inference.io/node-group"
#: the cluster's system node (NFD's master, the adapter's Deployment...)
SYSTEM_NODE = "system-0"
TOOLS_BIN = TOOLS
#: the printed NFD CRD install's source (docs/day1-contract.md "NFD's CRDs")
NFD_CRDS_URL = re.compile(r'"?https://github\.com/kubernetes-sigs/node-feature-discovery/deployment/base/nfd-crds\?ref=v[0-9.]+"?')
SYSTEM_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}
#: what a cluster admin who already runs NFD set for GPUs: the GPU Operator's and the
#: device plugin chart's NFD values (gpu-operator deployments/gpu-operator/values.yaml
#: node-feature-discovery.worker: the nvidia.com/gpu toleration and pci
#: deviceLabelFields [vendor], which makes the `pci-10de.present` label the platform's
#: DaemonSets select)
NFD_VALUES = {
    "worker": {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "config": {"sources": {"pci": {"deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"],
                                       "deviceLabelFields": ["vendor"]}}},
    },
    "gc": {"enable": False},
}


@dataclass(frozen=True)
class Printed:
    """`gpuvalues values SPEC -o OUT --artifacts OUT/nodes`: its install commands in order."""

    out: Path
    commands: tuple[str, ...]

    def values_file(self, release: str) -> Path | None:
        """The `-f` file of the printed `helm upgrade --install RELEASE ...` line."""
        for line in self.commands:
            if line.startswith("#"):
                continue
            w = shlex.split(line)
            if w[:4] == ["helm", "upgrade", "--install", release] and "-f" in w:
                return ROOT / w[w.index("-f") + 1]
        return None


def values(spec: Path, out: Path, gpuvalues_bin: Path) -> Printed:
    """Run the real CLI as README says (`-o DIR`; a one-workload spec: `-o FILE`); the
    lines after `install in this order:` (stderr) are the commands (none if not printed)."""
    one = len((yaml.safe_load(spec.read_text()) or {}).get("workloads") or []) == 1
    res = subprocess.run([str(gpuvalues_bin), "values", str(spec), "-o", str(out / "values.yaml" if one else out),
                          "--artifacts", str(out / "nodes")], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "install in this order:"), None)
    cmds = () if start is None else tuple(line.strip() for line in lines[start + 1:] if line.strip())
    return Printed(out, cmds)


def bare_nodes(spec_doc: dict) -> tuple[list[dict], dict[str, dict | None]]:
    """(Node manifests, name -> mock hardware) for the spec's node pools plus the system
    node. Node i of pool P is `P-i`."""
    from tests.oracle import oraclelib as ol
    manifests, hardware = [], {}
    for pool in spec_doc["cluster"]["nodePools"]:
        selector = pool.get("nodeSelector") or {POOL_LABEL: pool["name"]}
        for i in range(int(pool.get("nodes", 1))):
            name = f"{pool['name']}-{i}"
            manifests.append(nodeagent.bare_node(name, {**selector, POOL_LABEL: pool["name"]},
                                                 fleetlib.NODE_CAPACITY, gpu=True))
            hardware[name] = ol.hardware_for_gpu(pool["gpu"], int(pool["gpusPerNode"]))
    manifests.append(nodeagent.bare_node(SYSTEM_NODE, {POOL_LABEL: "system"}, SYSTEM_CAPACITY, gpu=False))
    hardware[SYSTEM_NODE] = None
    return manifests, hardware


def run_printed(kube, printed: Printed, spec_doc: dict, *, before_helm=None) -> list[str]:
    """Run every printed command, in order, as docs/day1-contract.md says: each line with
    `bash -euo pipefail -c LINE`, the pinned Helm 4 as `helm` and kubectl on PATH,
    KUBECONFIG set, from the checkout (the chart path is relative). Two rewrites, both
    named: the NFD CRDs' GitHub URL becomes the same directory of the pinned module (no
    network), and the older printed comment `# label each node group's nodes as FILE
    says` is done as a user does it (label_commands). `before_helm(release, namespace)`
    runs before each `helm` line (a cluster admin's prerequisites). Returns what ran."""
    tools = TOOLS_BIN
    env = {**os.environ, "KUBECONFIG": str(kube.cluster.kubeconfig),
           "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = []
    for line in printed.commands:
        if line.startswith("#"):
            if "label each node group's nodes" not in line:
                continue                     # a comment line
            for argv in label_commands(printed.out / "nodes", spec_doc):
                kube.kubectl(*argv[1:])
                ran.append(shlex.join(argv))
            continue
        line = NFD_CRDS_URL.sub(str(nfd_crds()), line)
        words = shlex.split(line)
        if words[:3] == ["helm", "upgrade", "--install"] and before_helm:
            before_helm(words[3], words[words.index("--namespace") + 1] if "--namespace" in words else "default")
        res = subprocess.run(["bash", "-euo", "pipefail", "-c", line], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=300)
        assert res.returncode == 0, f"printed command failed ({res.returncode}): {line}\n{res.stderr[-3000:]}"
        ran.append(line)
    return ran


def label_commands(nodes_dir: Path, spec_doc: dict) -> list[list[str]]:
    """`kubectl label nodes NODE K=V...` for each node group of node-groups.yaml, its
    pool's bare nodes taken in order."""
    groups = yaml.safe_load((nodes_dir / "node-groups.yaml").read_text()) or []
    taken: dict[str, int] = {}
    out = []
    for g in groups:
        for _ in range(int(g["nodes"])):
            i = taken.get(g["pool"], 0)
            taken[g["pool"]] = i + 1
            if g.get("labels"):
                out.append(["kubectl", "label", "nodes", f"{g['pool']}-{i}", "--overwrite",
                            *(f"{k}={v}" for k, v in g["labels"].items())])
    return out


def install_cluster_nfd(kube, chart: Path) -> None:
    """The cluster's own NFD (a cluster that already runs it): NFD's chart at the pinned
    tag with NFD_VALUES."""
    kube.helm("upgrade", "--install", "nfd", str(chart), "-n", "node-feature-discovery",
              "--create-namespace", values=NFD_VALUES)


def nfd_chart() -> Path:
    return nodeagent.nfd_bin().parent.parent / "chart"


def nfd_crds() -> Path:
    return nodeagent.nfd_bin().parent.parent / "nfd-crds"


def daemonsets(kube, namespace: str) -> list[dict]:
    return kube.json("get", "daemonsets", "-n", namespace)["items"]


def prerequisites(kube, release: str, namespace: str, printed: "Printed | Path") -> None:
    """A workload's cluster-admin objects (its model PVC...) before its helm install."""
    f = printed.values_file(release) if isinstance(printed, Printed) else printed / f"{release}.values.yaml"
    if f is None or not f.exists():
        return
    vals = e2elib.effective_values(None, yaml.safe_load(f.read_text()))
    objs = e2elib.prerequisites(vals, namespace)
    if objs:
        kube.kubectl("create", "namespace", namespace, check=False)
        kube.kubectl("apply", "--server-side", "-f", "-",
                     input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def gpuvalues_bin() -> Path:
    return Path(os.environ.get("GPUVALUES_BIN") or ROOT / ".venv" / "bin" / "gpuvalues")


#: NVIDIA's DRA driver chart (k8s-dra-driver-gpu, deployments/helm/nvidia-dra-driver-gpu)
#: at this tag, as a cluster admin installs it for a DRA fleet: `resources.gpus.enabled`
#: (default), `resources.computeDomains.enabled=false` (no IMEX domains here) and
#: `kubeletPlugin.tolerations` for the GPU nodes' taint (the chart's default is none).
DRA_DRIVER_VERSION = "v25.12.0"
DRA_NAMESPACE = "nvidia-dra-driver-gpu"


def dra_driver_objects() -> list[dict]:
    """The objects of that install the day-1 test needs, restated from the chart's
    templates at DRA_DRIVER_VERSION (its tags are no valid Go module versions, so no
    pinned copy can be fetched here; commit 0882da8720c28763137e0987778ec476ec4cf8df):
    the `gpu.nvidia.com` DeviceClass (templates/deviceclass-gpu.yaml, resource.k8s.io/v1)
    and the kubelet plugin's DaemonSet (templates/kubeletplugin.yaml: its `gpus`
    container's image, command and env; the node affinity of values.yaml
    kubeletPlugin.affinity, which needs NFD's PCI label or `nvidia.com/gpu.present`).
    Left out: the controller Deployment (compute domains only), the init container and
    host volumes (nothing here reads them), RBAC beyond the service account."""
    name = "nvidia-dra-driver-gpu"
    image = f"{nodeagent.DRA_IMAGE}:{DRA_DRIVER_VERSION}"
    sel = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name,
           "nvidia-dra-driver-gpu-component": "kubelet-plugin"}
    terms = [{"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                                    "values": ["true"]}]},
             {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id", "operator": "In",
                                    "values": ["NVIDIA"]}]},
             {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]
    env = [{"name": "LOG_VERBOSITY", "value": "4"}, {"name": "MASK_NVIDIA_DRIVER_PARAMS", "value": "false"},
           {"name": "NVIDIA_DRIVER_ROOT", "value": "/"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
           {"name": "CDI_ROOT", "value": "/var/run/cdi"}, {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"},
           {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
           {"name": "IMAGE_NAME", "value": image}]
    script = ('if [ "${MASK_NVIDIA_DRIVER_PARAMS}" = "true" ]; then\n  cp /proc/driver/nvidia/params root/gpu-params\n'
              "  sed -i 's/^ModifyDeviceFiles: 1$/ModifyDeviceFiles: 0/' root/gpu-params\n"
              "  mount --bind root/gpu-params /proc/driver/nvidia/params\nfi\n"
              "gpu-kubelet-plugin -v $(LOG_VERBOSITY)")
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRA_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": f"{name}-service-account-kubeletplugin", "namespace": DRA_NAMESPACE}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": nodeagent.DRA_DRIVER},
         "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                       "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
                  "extendedResourceName": "nvidia.com/gpu"}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": f"{name}-kubelet-plugin", "namespace": DRA_NAMESPACE},
         "spec": {"selector": {"matchLabels": sel}, "updateStrategy": {"type": "RollingUpdate"},
                  "template": {"metadata": {"labels": sel}, "spec": {
                      "priorityClassName": "system-node-critical",
                      "serviceAccountName": f"{name}-service-account-kubeletplugin",
                      "containers": [{"name": "gpus", "image": image, "imagePullPolicy": "IfNotPresent",
                                      "securityContext": {"privileged": True},
                                      "command": ["bash", "-c"], "args": [script], "env": env}],
                      "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                          "nodeSelectorTerms": terms}}},
                      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}},
    ]


def install_dra_driver(kube, kinds: frozenset[str] | None = None) -> None:
    """The cluster's NVIDIA DRA driver (a DRA fleet's prerequisite, like its NFD); only its
    objects of `kinds` when given (a half-done install, for a negative control)."""
    items = [o for o in dra_driver_objects() if kinds is None or o["kind"] in kinds]
    kube.kubectl("apply", "--server-side", "-f", "-",
                 input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def as_printed(fleet, printed: Printed):
    """The fleet as the printed install holds it: a one-workload spec's `values -o FILE`
    prints one combined release (the workload's name, the platform inside), so that
    release is both the platform and the workload; otherwise the fleet unchanged."""
    import dataclasses
    if printed.values_file(fleet.platform.name) is not None or len(fleet.workloads) != 1:
        return fleet
    [w] = fleet.workloads
    f = printed.values_file(w.name)
    assert f is not None, f"no printed helm line installs {w.name}: {printed.commands}"
    vals = yaml.safe_load(f.read_text())
    assert vals.get("platform"), f"the combined release {w.name} carries no platform values"
    return dataclasses.replace(fleet, releases=(
        dataclasses.replace(fleet.platform, name=w.name, namespace=w.namespace, values=vals),
        dataclasses.replace(w, values=vals)))
