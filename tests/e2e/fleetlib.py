"""The harness of tests/e2e/test_fleet.py: a spec's whole fleet on a real control plane.

A fleet (`gpuvalues.build_fleet`) is installed as `gpuvalues values -o DIR` tells a user
to: the node side on the nodes, the platform release, then one release per workload,
each in the namespace the fleet says, with the real Helm 4 (server-side apply). The GPU
nodes are made fake by kwok; their GPU labels and GPU resources are what the upstream
device plugin and GFD derive for each node group (tests/e2e/fleet.py fleet_gpu_nodes);
their CPU, memory and pod capacity are hand-written here (NODE_CAPACITY), the one part
no GPU config decides.
"""
from __future__ import annotations

import http.server
import json
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import yaml

from gpuvalues.fleet import Fleet, NodeGroup, Release
from tests.e2e import e2elib
from tests.e2e import fleet as gpu_fleet
from tests.e2e.e2elib import CHART
from tests.exposition import ExpositionHandler as _Handler

#: Hand-written, not derived: the CPU, memory and pod capacity of every fake GPU node,
#: a DGX-class server (DGX A100/H100: 2 x 64-112 cores, 1-2 TiB). The chart requests
#: 4 CPU / 32 GiB per inference pod by default, so a node holding 16 MIG-slice pods
#: needs 64 CPU and 512 GiB before the DaemonSets.
NODE_CAPACITY = {"cpu": "224", "memory": "2Ti", "pods": "110", "ephemeral-storage": "30Ti"}
#: Hand-written too: the label Node Feature Discovery puts on every node with an NVIDIA
#: PCI device (vendor 10de). NFD is a prerequisite of the platform, not part of the fleet;
#: the chart's platform DaemonSets select on it, as upstream's device-plugin chart does.
NFD_LABELS = {"feature.node.kubernetes.io/pci-10de.present": "true"}
DEVICE_PLUGIN_CONFIG_LABEL = gpu_fleet.DEVICE_PLUGIN_CONFIG_LABEL
INSTANCE = "app.kubernetes.io/instance"


@dataclass(frozen=True)
class FleetNode:
    """One fake node: its manifest and the node group (hence pool) it belongs to."""

    manifest: Mapping
    group: NodeGroup


def fleet_nodes(fleet: Fleet) -> list[FleetNode]:
    """The fleet's nodes as kwok Nodes: labels and allocatable GPU resources from the
    upstream device plugin and GFD (fleet.fleet_gpu_nodes), CPU/memory/pods from
    NODE_CAPACITY, NFD's PCI label."""
    out = []
    for name, group, labels, resources in gpu_fleet.fleet_gpu_nodes(fleet):
        status = {**NODE_CAPACITY, **{k: str(v) for k, v in resources.items()}}
        manifest = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {**NFD_LABELS, **labels}},
                    "spec": {},
                    "status": {"capacity": status, "allocatable": dict(status)}}
        out.append(FleetNode(manifest, group))
    return out


def without_config_label(fleet: Fleet, group: str) -> Fleet:
    """The same fleet with node group `group`'s device-plugin config label removed: the
    device plugin's config manager then falls back to the `default` config
    (k8s-device-plugin cmd/config-manager/main.go: label unset -> --default). The group's
    `device_plugin_config` goes with it, so the fleet's own view agrees."""
    groups = []
    for g in fleet.layout.node_groups:
        if g.name == group:
            assert DEVICE_PLUGIN_CONFIG_LABEL in g.labels, g
            g = replace(g, labels={k: v for k, v in g.labels.items() if k != DEVICE_PLUGIN_CONFIG_LABEL},
                        device_plugin_config=None)
        groups.append(g)
    assert any(g.name == group for g in groups), f"no node group {group}"
    return replace(fleet, layout=replace(fleet.layout, node_groups=tuple(groups)))


# --- what serves the metrics ------------------------------------------------------------

class Exporter(http.server.ThreadingHTTPServer):
    """Prometheus exposition text for the fleet's pods: for each (namespace, pod) the
    series the adapter's rules read, with the `namespace`/`pod` labels the scrape gives
    them (dcgm-exporter's pod attribution for DCGM_*, the ServiceMonitor's target labels
    for a server's own metrics such as vllm:num_requests_waiting). The one fake: no GPU
    and no model server runs here. `series` maps (namespace, pod) -> {series: (type,
    value)}: a gauge's value, or a counter's rate per second (it grows linearly from the
    moment it is set, so `rate()` over it is that value).

    With `dcgm_nodes` (the day-1 test: tests/e2e/nodeagent.py NodeAgents.dcgm_nodes) the
    DCGM_* series of a pod are served only while a DCGM exporter pod is Running on the
    pod's node (`node_of`), as only that exporter could report its GPUs."""

    def __init__(self, dcgm_nodes=None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.series: dict[tuple[str, str], dict[str, tuple[str, float]]] = {}
        self.node_of: dict[tuple[str, str], str] = {}
        self.dcgm_nodes = dcgm_nodes
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def exposition(self) -> str:
        lines, typed = [], set()
        elapsed = time.monotonic() - self.t0
        with self.lock:
            items = sorted(self.series.items())
        exporting = self.dcgm_nodes() if self.dcgm_nodes is not None else None
        for (ns, pod), values in items:
            for name, (kind, value) in sorted(values.items()):
                if exporting is not None and name.startswith("DCGM_") and self.node_of.get((ns, pod)) not in exporting:
                    continue
                if name not in typed:
                    typed.add(name)
                    lines.append(f"# TYPE {name} {kind}")
                shown = value * elapsed if kind == "counter" else value
                lines.append(f'{name}{{gpu="0",Hostname="e2e",container="server",'
                             f'namespace="{ns}",pod="{pod}"}} {shown}')
        return "\n".join(lines) + "\n"


def adapter_series(rules_yaml: str) -> dict[str, str]:
    """The adapter's rules as {metric name it serves: series it reads}: `name.as`
    (else the series name) and the `__name__` of `seriesQuery`, as prometheus-adapter
    v0.12.0 names them (pkg/naming/metric_namer.go: `as` replaces the `matches` capture)."""
    out = {}
    for rule in yaml.safe_load(rules_yaml)["rules"]:
        m = re.search(r'__name__="([^"]+)"', rule["seriesQuery"])
        assert m, f"rule without a literal __name__: {rule}"
        series = m.group(1)
        name = rule.get("name", {})
        out[name.get("as") or series] = series
    return out


def start_prometheus(cluster, prometheus_bin: str, exporter: Exporter, workdir: Path) -> str:
    """The real Prometheus scraping the exporter every second (honor_labels, as the
    chart's ServiceMonitors set it); returns its URL."""
    _, url = e2elib.start_prometheus(cluster, prometheus_bin, workdir, "fleet", exporter.port)
    return url + "/"


# --- installing the fleet ---------------------------------------------------------------

def install(kube, release: Release) -> None:
    """`helm upgrade --install NAME chart -n NS --create-namespace -f VALUES` as
    `gpuvalues values` prints it (Helm 4: server-side apply), after the objects a cluster
    admin provides (the model PVC of a workload that reads one)."""
    values = dict(release.values)
    prereqs = e2elib.prerequisites(e2elib.effective_values(None, values), release.namespace)
    if prereqs:
        kube.kubectl("create", "namespace", release.namespace, check=False)
        kube.kubectl("apply", "--server-side", "-f", "-",
                     input=json.dumps({"apiVersion": "v1", "kind": "List", "items": prereqs}))
    kube.helm("upgrade", "--install", release.name, str(CHART), "-n", release.namespace,
              "--create-namespace", values=values)


def installed(kube, release: Release, kind: str) -> list[dict]:
    """The release's objects of `kind` as the API server holds them."""
    return kube.json("get", kind, "-n", release.namespace, "-l", f"{INSTANCE}={release.name}")["items"]


def pin_to_max(kube, release: Release) -> int:
    """Hold the workload at maxReplicas the honest way: the HPA owns the Deployment's
    .spec.replicas, so its minReplicas is raised to its maxReplicas and the real HPA
    controller scales the Deployment (it raises replicas below minReplicas without
    reading metrics: pkg/controller/podautoscaler/horizontal.go, reconcileAutoscaler).
    Under KEDA, whose operator does not run here (so nothing owns .spec.replicas), the
    Deployment is scaled to the installed ScaledObject's maxReplicaCount. Returns the
    replica count."""
    hpas = installed(kube, release, "hpa")
    if hpas:
        [hpa] = hpas
        want = int(hpa["spec"]["maxReplicas"])
        kube.kubectl("patch", "hpa", hpa["metadata"]["name"], "-n", release.namespace,
                     "--type=merge", "-p", json.dumps({"spec": {"minReplicas": want}}))
        return want
    [so] = installed(kube, release, "scaledobjects.keda.sh")
    want = int(so["spec"]["maxReplicaCount"])
    kube.kubectl("scale", "deployment", so["spec"]["scaleTargetRef"]["name"], "-n", release.namespace,
                 f"--replicas={want}")
    return want


def workload_pods(kube, release: Release) -> list[dict]:
    """The release's inference pods (not terminating)."""
    [dep] = [d for d in installed(kube, release, "deployment") if e2elib.is_gpu_workload(d)]
    sel = e2elib.selector_string(dep["spec"]["selector"]["matchLabels"])
    return [p for p in kube.pods(release.namespace, sel) if not p["metadata"].get("deletionTimestamp")]


def pending(pods: list[dict]) -> list[str]:
    """'pod: scheduler message' for every Pending pod."""
    return [f"{p['metadata']['name']}: {e2elib.unschedulable_message(p) or 'not scheduled yet'}"
            for p in pods if p["status"].get("phase", "Pending") == "Pending"]


def gpu_limits(pod: Mapping) -> dict[str, int]:
    """The pod's extended GPU resources (nvidia.com/*), summed over its containers."""
    out: dict[str, int] = {}
    for c in pod["spec"]["containers"]:
        for k, v in (c.get("resources", {}).get("limits") or {}).items():
            if k.startswith("nvidia.com/"):
                out[k] = out.get(k, 0) + int(v)
    return out


def quantity(text: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes it (`250m`, `1`, `2k`)."""
    suffix = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}
    if text and text[-1] in suffix:
        return float(text[:-1]) * suffix[text[-1]]
    return float(text)
