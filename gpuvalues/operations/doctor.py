"""`gpuvalues doctor`: explain a running GPU cluster against its fleet, link by link (issue 27).

The questions users ask ("why is my HPA <unknown>?", "why is my pod Pending when GPUs are
free?") are each a broken link of one of two chains the fleet already models:

    node side: node group labels -> node agents (NFD, GFD, device plugin, mig-manager)
               -> labels and advertised resources -> the workload's pods schedule
    metrics:   DCGM exporter counters / the server -> Prometheus series (pod vs
               exported_pod) -> the adapter's rule -> the custom.metrics APIService -> HPA

`diagnose(fleet, snapshot)` is pure: it reads a `Snapshot` (the cluster's objects as
`kubectl get -o json` gives them, plus optional Prometheus series; `gpuvalues.io.snapshot`
reads one from a live cluster or a dump folder) and returns a `Report`: per workload its
desired/running/pending replicas, and every `DoctorFinding` with a stable code (`CODES`, DR001...),
the object it concerns, the link that is broken and what to change. Each cause is reported
once, at its root: Pending pods whose pool has a node-side finding are not reported again.
Nothing here writes to a cluster (the reader lists and gets only: docs/doctor.md's RBAC).
"""
from __future__ import annotations

import base64
import gc
import gzip
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from gpuvalues.fleet import Fleet, Placement, Release, group_node
from gpuvalues.fleet.producers import (DEVICE_PLUGIN, GFD, MIG_MANAGER, MIG_STATE_LABEL, NFD,
                                       install_parts, operator_values)
from gpuvalues.fleet.spec import GROUP_LABEL
from gpuvalues.operations.remediation import ANN_STATE, TAINT_KEY
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import migparted
from gpuvalues.planners.scheduling.fit import pod_shape, static_reason
from gpuvalues.planners.scheduling.inventory import Node

__all__ = ["CODES", "GFD_LABEL_CODES", "DRIFT_CONFIGMAPS", "Snapshot", "HelmRelease", "DoctorFinding",
           "WorkloadStatus", "Report", "diagnose", "decode_release", "paused_gc", "CUSTOM_METRICS_APISERVICE",
           "AGENT_COMPONENTS"]

#: code -> (the link it names, what to change). The one table of doctor's findings; README
#: and docs/doctor.md list it (tests/unit/test_doctor.py holds them equal).
CODES: dict[str, tuple[str, str]] = {
    "DR001": ("a fleet release is not installed (no deployed Helm release)",
              "run the `helm upgrade --install` line `gpuvalues values` prints for it"),
    "DR002": ("a node agent the install deploys is not Running on a node that needs it",
              "see the DaemonSet's events and pods on that node; fix its selector, tolerations or image"),
    "DR003": ("a node's device-plugin config label differs from its node group's",
              "label the node with the group's nvidia.com/device-plugin.config (node-labels.yaml)"),
    "DR004": ("mig-manager failed to apply the node's MIG config (mig.config.state=failed)",
              "read mig-manager's log on the node; fix the mig-parted config, then relabel nvidia.com/mig.config"),
    "DR005": ("a node's MIG config label differs from its node group's",
              "label the node with the group's nvidia.com/mig.config (node-labels.yaml)"),
    "DR006": ("a node does not advertise the GPU resource its group's config gives",
              "check the device plugin's config (renameByDefault, migStrategy) and restart its pod on the node"),
    "DR007": ("workload pods Pending with no node-side cause found",
              "read the scheduler's message; the fleet's nodes may be too few or taken"),
    "DR008": ("the custom metrics APIService is missing or not Available",
              "check the Prometheus adapter's Deployment, Service and APIService v1beta1.custom.metrics.k8s.io"),
    "DR009": ("no adapter rule serves the autoscaler's metric",
              "add the metric to platform.prometheusAdapter.metrics (the fleet's platform values do)"),
    "DR010": ("no series of the metric names the workload's pods in Prometheus",
              "check that Prometheus scrapes the exporter or server (ServiceMonitor, job up)"),
    "DR011": ("the series names its pod with labels the adapter rule does not use (pod vs exported_pod)",
              "set platform.prometheusAdapter.exporterLabels to the scrape's style (honorLabels)"),
    "DR012": ("a DCGM field the metric needs is not collected by the exporter",
              "add the field to platform.dcgmExporter.counters.extra"),
    "DR013": ("a PodDisruptionBudget allows no disruption while its pods are healthy: it blocks drains",
              "set pdb.maxUnavailable: 1 (the fleet's values do)"),
    "DR014": ("a node is quarantined by the remediation controller",
              "see the node's Events (gpu-inference-remediation); it returns after the hold-down"),
    "DR015": ("a container runs another image than its release renders (the chart's pin)",
              "helm upgrade the release again, or pin the image in values"),
    "DR016": ("a release's deployed values differ from the fleet's",
              "run the printed `helm upgrade --install` again with the fleet's values file"),
    "DR017": ("a ScaledObject is not Ready",
              "read the ScaledObject's conditions and KEDA operator's log"),
    "DR018": ("a platform ConfigMap differs from what its release renders (edited outside helm)",
              "helm upgrade the platform release with the fleet's values (it rewrites the ConfigMap), "
              "or make the change in the spec"),
    "DR019": ("a node's nvidia.com/gpu.product (GFD) is not its node group's GPU",
              "move the node to a pool of its GPU (the pool's selector and node group label) "
              "or set the pool's gpu in the spec to the node's"),
    "DR020": ("a node's nvidia.com/mig.strategy (GFD) is not the plan's",
              "set GFD's migStrategy (MIG_STRATEGY, the device-plugin config's flags) to the plan's; "
              "GFD relabels at its next pass"),
    "DR021": ("a node's GPU sharing labels (GFD: sharing-strategy, replicas) are not its config's",
              "GFD read another sharing config: restart the GFD pod on the node so it rereads the group's config"),
    "DR022": ("a node reports fewer or more GPUs (nvidia.com/gpu.count) than its pool's gpusPerNode",
              "check the node's GPUs (nvidia-smi: a GPU lost from the bus); drain and repair it, "
              "or correct gpusPerNode in the spec"),
    "DR023": ("a DRA workload's DeviceClass does not exist (NVIDIA's DRA driver is not installed)",
              "install NVIDIA's DRA driver (k8s-dra-driver-gpu): its chart creates the DeviceClasses "
              "gpu.nvidia.com and mig.nvidia.com"),
    "DR024": ("no ResourceSlice of NVIDIA's DRA driver publishes devices on a DRA workload's pool",
              "see the driver's kubelet-plugin DaemonSet: its pods must run on the pool's nodes "
              "(node affinity, tolerations for the GPU taint)"),
}
#: GFD's labels checked against the node group (group_node's), by the code a wrong value is
GFD_LABEL_CODES = {"nvidia.com/gpu.product": "DR019", "nvidia.com/mig.strategy": "DR020",
                   "nvidia.com/gpu.sharing-strategy": "DR021", "nvidia.com/gpu.replicas": "DR021",
                   "nvidia.com/gpu.count": "DR022"}
#: the platform ConfigMaps compared with the release's manifest (chart component name ->
#: what reads them), and the findings a drift of each one explains: a drift that breaks a
#: link is named in that link's finding (its root), a drift that breaks nothing yet is DR018
DRIFT_CONFIGMAPS: dict[str, tuple[str, frozenset[str]]] = {
    "gpu-inference-device-plugin": ("the device plugin's and GFD's configs",
                                    frozenset({"DR006", "DR019", "DR020", "DR021"})),
    "gpu-inference-mig-manager": ("mig-manager's mig-parted config", frozenset({"DR004", "DR006"})),
    "gpu-inference-dcgm-exporter": ("the DCGM exporter's counters", frozenset({"DR012"})),
    "gpu-inference-prometheus-adapter": ("the Prometheus adapter's rules", frozenset({"DR009", "DR010", "DR011"})),
}

CUSTOM_METRICS_APISERVICE = "v1beta1.custom.metrics.k8s.io"
#: the chart's platform components (app.kubernetes.io/name gpu-inference-<component>) that
#: are node agents, by the part of the install (gpuvalues.fleet.producers) they are
AGENT_COMPONENTS = {GFD: "gpu-feature-discovery", DEVICE_PLUGIN: "device-plugin",
                    MIG_MANAGER: "mig-manager", NFD: "nfd-worker"}
_HELM_RELEASE_TYPE = "helm.sh/release.v1"
_SERIES_NAME = re.compile(r'__name__\s*=\s*"([^"]+)"')
_LABEL_NOT_EMPTY = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*!=\s*""')


@dataclass(frozen=True)
class HelmRelease:
    """A Helm release as its storage Secret holds it (read-only): the user's values
    (`config`) and the rendered manifest."""

    name: str
    namespace: str
    version: int
    status: str
    config: Mapping[str, Any]
    manifest: str


@dataclass(frozen=True)
class Snapshot:
    """One read of a cluster: objects as the API serves them (dicts), and the Prometheus
    series of the metrics autoscalers read (metric -> label sets), None when not read."""

    nodes: tuple[Mapping[str, Any], ...] = ()
    pods: tuple[Mapping[str, Any], ...] = ()
    daemonsets: tuple[Mapping[str, Any], ...] = ()
    configmaps: tuple[Mapping[str, Any], ...] = ()
    hpas: tuple[Mapping[str, Any], ...] = ()
    scaledobjects: tuple[Mapping[str, Any], ...] = ()
    apiservices: tuple[Mapping[str, Any], ...] = ()
    events: tuple[Mapping[str, Any], ...] = ()
    pdbs: tuple[Mapping[str, Any], ...] = ()
    deviceclasses: tuple[Mapping[str, Any], ...] = ()
    resourceslices: tuple[Mapping[str, Any], ...] = ()
    releases: tuple[HelmRelease, ...] = ()
    series: Mapping[str, tuple[Mapping[str, str], ...]] | None = None
    source: str = ""


@dataclass(frozen=True)
class DoctorFinding:
    """One broken link: `code` (CODES), the object it concerns (`Kind/namespace/name`),
    the workload it hurts ("" for the platform), what is wrong and what to change."""

    code: str
    object: str
    message: str
    workload: str = ""
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain data for `--output yaml|json`."""
        return {"code": self.code, "object": self.object, "workload": self.workload,
                "link": CODES[self.code][0], "message": self.message, "fix": self.fix or CODES[self.code][1]}

    def __str__(self) -> str:
        return f"{self.object}: {self.message} [{self.code}] (fix: {self.fix or CODES[self.code][1]})"


@dataclass(frozen=True)
class WorkloadStatus:
    """A workload's replicas: desired (its HPA's or Deployment's), Running, Pending."""

    workload: str
    namespace: str
    desired: int
    running: int
    pending: int
    autoscaler: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"workload": self.workload, "namespace": self.namespace, "desired": self.desired,
                "running": self.running, "pending": self.pending, "autoscaler": self.autoscaler}


@dataclass(frozen=True)
class Report:
    """What doctor found: per workload its status, then every finding (sorted)."""

    workloads: tuple[WorkloadStatus, ...]
    findings: tuple[DoctorFinding, ...]
    notes: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        """No finding."""
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        """Plain data for `--output yaml|json`."""
        return {"healthy": self.healthy, "workloads": [w.as_dict() for w in self.workloads],
                "findings": [f.as_dict() for f in self.findings], "notes": list(self.notes)}


# -- helpers -------------------------------------------------------------------------------------
@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector paused (and restored as it was) while a large cluster
    is read and checked. A 5,000-node dump is millions of dicts and lists; every burst of
    allocations made the collector walk all the containers made so far, so decoding its
    175 MB took 6.4 s instead of 1.4 s (bench/bench_doctor.py), and the checks, run with the
    whole snapshot live, paid it again. Decoded JSON holds no reference cycle, so there is
    nothing for the collector to find; whatever cycle is made meanwhile waits for the next
    collection after this block."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _meta(o: Mapping[str, Any]) -> Mapping[str, Any]:
    return o.get("metadata") or {}


def _labels(o: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(o).get("labels") or {}


def _ref(kind: str, o: Mapping[str, Any]) -> str:
    ns = _meta(o).get("namespace")
    return f"{kind}/{ns}/{_meta(o).get('name')}" if ns else f"{kind}/{_meta(o).get('name')}"


def decode_release(secret: Mapping[str, Any]) -> HelmRelease | None:
    """A Helm storage Secret (`type: helm.sh/release.v1`, data.release: base64 of Helm's
    base64 of gzipped JSON; helm pkg/storage/driver/util.go decodeRelease) as a
    HelmRelease, None for another Secret. A release that does not decode raises ValueError."""
    if secret.get("type") != _HELM_RELEASE_TYPE:
        return None
    raw = base64.b64decode((secret.get("data") or {}).get("release", ""))
    data = base64.b64decode(raw)
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    rel = json.loads(data)
    if not isinstance(rel, Mapping):
        raise ValueError("the release is not a JSON object")
    return HelmRelease(str(rel.get("name", "")), str(rel.get("namespace", "")), int(rel.get("version", 0)),
                       str((rel.get("info") or {}).get("status", "")), rel.get("config") or {},
                       str(rel.get("manifest") or ""))


def _deployed(releases: Iterable[HelmRelease]) -> dict[tuple[str, str], HelmRelease]:
    """(namespace, name) -> the newest deployed version of each release."""
    out: dict[tuple[str, str], HelmRelease] = {}
    for r in releases:
        if r.status != "deployed":
            continue
        key = (r.namespace, r.name)
        if key not in out or r.version > out[key].version:
            out[key] = r
    return out


def _diff(want: Any, got: Any, path: str = "") -> list[str]:
    """Paths where `got` differs from `want` (mappings compared key by key)."""
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        out = []
        for k in sorted(set(want) | set(got), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in got:
                out.append(f"{p} (missing)")
            elif k not in want:
                out.append(f"{p} (not in the fleet)")
            else:
                out += _diff(want[k], got[k], p)
        return out
    if isinstance(want, bool) or isinstance(got, bool):
        return [] if want is got else [path]
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return [] if want == got else [path]
    return [] if want == got else [path]


def _manifest_images(manifest: str) -> dict[tuple[str, str], set[str]]:
    """(object name, container name) -> images, from a release's rendered manifest (only
    the `name:` and `image:` lines of containers are needed; the manifest is helm's YAML)."""
    import yaml
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: dict[tuple[str, str], set[str]] = {}
    for text in re.split(r"(?m)^---\s*$", manifest):
        if not re.search(r"(?m)^kind: (DaemonSet|Deployment|StatefulSet)\s*$", text):
            continue              # helm writes `kind:` at the top level of each document
        doc = yaml.load(text, Loader=loader)
        if not isinstance(doc, Mapping) or doc.get("kind") not in ("DaemonSet", "Deployment", "StatefulSet"):
            continue
        spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            out.setdefault((str(_meta(doc).get("name")), str(c.get("name"))), set()).add(str(c.get("image")))
    return out


def _owner_name(pod: Mapping[str, Any]) -> str | None:
    """The pod's controller's name, its ReplicaSet's hash suffix cut (Deployment pods)."""
    for o in _meta(pod).get("ownerReferences") or ():
        if o.get("controller"):
            name = str(o.get("name"))
            if o.get("kind") == "ReplicaSet":
                hash_ = _labels(pod).get("pod-template-hash")
                if hash_ and name.endswith("-" + hash_):
                    return name[:-len(hash_) - 1]
            return name
    return None


def _gpu_pod(pod: Mapping[str, Any]) -> bool:
    """Does the pod ask for GPUs (an nvidia.com/* limit or a resource claim)?"""
    spec = pod.get("spec") or {}
    return bool(spec.get("resourceClaims")) or any(
        k.startswith("nvidia.com/") for c in spec.get("containers") or ()
        for k in ((c.get("resources") or {}).get("limits") or {}))


def _running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not _meta(pod).get("deletionTimestamp")


def _pending_message(pod: Mapping[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or c.get("reason") or "")
    return ""


def _node(obj: Mapping[str, Any]) -> Node:
    """The scheduler's view of a Node object (name, labels, taints, unschedulable, GPU
    allocatable): built directly, as the API server already validated the object (the
    inventory reader's checks cost 2 ms a node, most of doctor's time on 5,000 nodes)."""
    from gpuvalues.planners.scheduling.inventory import Taint
    spec = obj.get("spec") or {}
    taints = tuple(Taint(str(t.get("key", "")), str(t.get("effect", "")), str(t.get("value") or ""))
                   for t in spec.get("taints") or ())
    return Node(str(_meta(obj).get("name")), labels=dict(_labels(obj)), taints=taints,
                allocatable=_gpu_allocatable(obj), unschedulable=bool(spec.get("unschedulable")))


def _gpu_allocatable(obj: Mapping[str, Any]) -> dict[str, int]:
    """The node's allocatable nvidia.com/* resources (integers: extended resources are)."""
    out = {}
    for k, v in ((obj.get("status") or {}).get("allocatable") or {}).items():
        if str(k).startswith("nvidia.com/"):
            try:
                out[str(k)] = int(str(v))
            except ValueError:
                out[str(k)] = 0
    return out


def _ds_admits(ds: Mapping[str, Any], node: Node) -> bool:
    """Would the DaemonSet controller run a pod of `ds` on `node`: the scheduler's static
    filters (fit's) with the tolerations every DaemonSet pod gets
    (pkg/controller/daemon/util AddOrUpdateDaemonPodTolerations: unschedulable, not-ready...)."""
    spec = dict(((ds.get("spec") or {}).get("template") or {}).get("spec") or {})
    spec["tolerations"] = [*(spec.get("tolerations") or ()),
                           {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    spec.pop("nodeName", None)
    return static_reason(pod_shape(spec, _ref("DaemonSet", ds)), node) is None


# -- the checks ----------------------------------------------------------------------------------
@dataclass
class _Ctx:
    fleet: Fleet
    snap: Snapshot
    findings: list[DoctorFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    broken_pools: set[str] = field(default_factory=set)
    explained: set[str] = field(default_factory=set)    # workloads whose Pending pods a finding explains

    def add(self, code: str, obj: str, message: str, workload: str = "", fix: str = "") -> None:
        self.findings.append(DoctorFinding(code, obj, message, workload, fix or CODES[code][1]))


def _group_nodes(ctx: _Ctx) -> dict[str, list[tuple[Mapping[str, Any], Node]]]:
    """Node group -> its live nodes: the pool's selector and the group label the printed
    install puts on them (GROUP_LABEL)."""
    layout = ctx.fleet.layout
    out: dict[str, list[tuple[Mapping[str, Any], Node]]] = {}
    if layout is None:
        return out
    groups = {g.name: g for g in layout.node_groups}
    for obj in ctx.snap.nodes:
        labels = _labels(obj)
        name = labels.get(GROUP_LABEL)
        if name in groups:
            pool = ctx.fleet.spec.pool(groups[name].pool)
            if all(labels.get(k) == v for k, v in pool.selector.items()):
                out.setdefault(name, []).append((obj, _node(obj)))
    return out


def _platform_pods(ctx: _Ctx, component: str) -> list[Mapping[str, Any]]:
    platform = ctx.fleet.platform
    name = f"gpu-inference-{component}"
    return [p for p in ctx.snap.pods if _labels(p).get("app.kubernetes.io/name") == name
            and _labels(p).get("app.kubernetes.io/instance") == platform.name
            and _meta(p).get("namespace") == platform.namespace]


def _platform_ds(ctx: _Ctx, component: str) -> Mapping[str, Any] | None:
    platform = ctx.fleet.platform
    name = f"gpu-inference-{component}"
    for ds in ctx.snap.daemonsets:
        if _labels(ds).get("app.kubernetes.io/name") == name and \
                _labels(ds).get("app.kubernetes.io/instance") == platform.name and \
                _meta(ds).get("namespace") == platform.namespace:
            return ds
    return None


def _check_node_side(ctx: _Ctx) -> None:
    fleet, layout = ctx.fleet, ctx.fleet.layout
    if layout is None:
        return
    parts = install_parts(fleet.spec, fleet.platform.values, operator_values(fleet))
    mine = {part: comp for part, comp in AGENT_COMPONENTS.items()
            if parts.get(part) == "the platform release"}
    by_group = _group_nodes(ctx)
    agents = {part: {(p.get("spec") or {}).get("nodeName"): p for p in _platform_pods(ctx, comp)}
              for part, comp in mine.items()}
    daemonsets = {part: _platform_ds(ctx, comp) for part, comp in mine.items()}
    for g in layout.node_groups:
        pool = fleet.spec.pool(g.pool)
        want_labels, want_alloc, _, _, _ = group_node(pool, g, layout)
        for obj, node in by_group.get(g.name, ()):
            ref = _ref("Node", obj)
            labels = node.labels
            broke = False
            # the install order's labels: the config selectors
            want_dp = g.labels.get(deviceplugin.CONFIG_LABEL)
            if want_dp is not None and labels.get(deviceplugin.CONFIG_LABEL) != want_dp:
                ctx.add("DR003", ref, f"{deviceplugin.CONFIG_LABEL}={labels.get(deviceplugin.CONFIG_LABEL)!r}, "
                        f"its node group {g.name} selects {want_dp!r}")
                broke = True
            want_mig = g.labels.get(migparted.MIG_CONFIG_LABEL)
            if want_mig is not None and labels.get(migparted.MIG_CONFIG_LABEL) != want_mig:
                ctx.add("DR005", ref, f"{migparted.MIG_CONFIG_LABEL}={labels.get(migparted.MIG_CONFIG_LABEL)!r}, "
                        f"its node group {g.name} selects {want_mig!r}")
                broke = True
            if g.mig_devices is not None and labels.get(MIG_STATE_LABEL) == "failed":
                ctx.add("DR004", ref, f"{MIG_STATE_LABEL}=failed: mig-manager could not apply "
                        f"{labels.get(migparted.MIG_CONFIG_LABEL)!r}; node group {g.name}'s "
                        f"MIG resources are not advertised")
                broke = True
            # the node agents: each one the platform deploys must run where its DaemonSet admits
            for part, comp in mine.items():
                if part == MIG_MANAGER and g.mig_devices is None:
                    continue
                pod = agents[part].get(node.name)
                if pod is not None and _running(pod):
                    continue
                ds = daemonsets[part]
                if ds is None:
                    why = f"no DaemonSet gpu-inference-{comp} of release {fleet.platform.name}"
                elif not _ds_admits(ds, node):
                    why = f"DaemonSet {_meta(ds).get('name')} does not admit the node (selector, affinity or taints)"
                elif pod is None:
                    why = f"DaemonSet {_meta(ds).get('name')} has no pod on the node"
                else:
                    why = f"pod {_meta(pod).get('name')} is {(pod.get('status') or {}).get('phase')}"
                what = {GFD: "its labels (nvidia.com/gpu.product...) are not produced",
                        DEVICE_PLUGIN: "no GPU resource is advertised",
                        MIG_MANAGER: "the MIG layout is not applied",
                        NFD: "feature.node.kubernetes.io/pci-10de.present is not produced"}[part]
                ctx.add("DR002", ref, f"{part} not Running on the node of group {g.name}: {why}; {what}")
                broke = True
            if not broke:
                gpu_want = {k: v for k, v in want_alloc.items() if v}
                have = {k: v for k, v in node.allocatable.items() if k.startswith("nvidia.com/")}
                wrong = {k: v for k, v in gpu_want.items() if have.get(k, 0) != v}
                if wrong:
                    shown = ", ".join(f"{k}: {have.get(k, 0)}" for k in sorted(wrong))
                    ctx.add("DR006", ref, f"node group {g.name} should advertise "
                            + ", ".join(f"{k}: {v}" for k, v in sorted(wrong.items()))
                            + f"; the node advertises {shown}"
                            + (f" (and {', '.join(sorted(set(have) - set(gpu_want)))})" if set(have) - set(gpu_want) else ""))
                    broke = True
            if not broke:       # the resources are right: GFD's labels must be the group's too
                broke = _check_gfd_labels(ctx, ref, g, pool, labels, want_labels)
            if broke:
                ctx.broken_pools.add(g.pool)
            # quarantine: the remediation controller's taint
            if any(t.key == TAINT_KEY for t in node.taints):
                state = (_meta(obj).get("annotations") or {}).get(ANN_STATE, "")
                ctx.add("DR014", ref, f"taint {TAINT_KEY} (remediation state {state or 'unknown'}): "
                        f"no new GPU pod lands on it")
                ctx.broken_pools.add(g.pool)
    _ = want_labels if layout.node_groups else None


def _check_gfd_labels(ctx: _Ctx, ref: str, g: Any, pool: Any, labels: Mapping[str, str],
                      want: Mapping[str, str]) -> bool:
    """GFD's labels on a node whose agents run and whose config labels are the group's:
    each one the group's node carries (group_node: the device plugin's and GFD's
    behaviour, held to upstream by tests/oracle) must have that value. Only the labels
    the fleet expects are compared (GFD writes more, e.g. replicas 1 on whole GPUs).
    True when one differs (the node's resources are then not checked again)."""
    wrong = False
    config = g.labels.get(deviceplugin.CONFIG_LABEL)
    for label, code in GFD_LABEL_CODES.items():
        if label not in want or labels.get(label) == want[label]:
            continue
        got = labels.get(label)
        shown = f"{label}={got!r}" if got is not None else f"{label} missing"
        fix = ""
        if got is None:
            fix = "GFD has not written the label: read its pod's log on the node"
        if code == "DR019":
            msg = f"{shown}: node group {g.name} (pool {pool.name}) is {want[label]!r} ({pool.gpu.name})"
            # GFD appends -SHARED to the product of a sharing config with renameByDefault false
            if got is not None and got.removesuffix("-SHARED") == want[label].removesuffix("-SHARED"):
                code, fix = "DR021", (f"GFD read a sharing config with another renameByDefault than the "
                                      f"group's {config!r}: restart the GFD pod on the node")
                msg += ": the -SHARED suffix is the sharing config's, not the GPU's"
        elif code == "DR020":
            msg = f"{shown}: the plan's MIG strategy for node group {g.name} is {want[label]!r}"
            fix = fix or (f"set GFD's migStrategy to {want[label]!r} (the device-plugin config {config!r} "
                          f"says it; an env MIG_STRATEGY on the GFD DaemonSet overrides it): GFD relabels at its next pass")
        elif code == "DR021":
            msg = f"{shown}: node group {g.name}'s config {config!r} gives {want[label]!r}"
        else:
            msg = (f"{shown}: pool {pool.name} has gpusPerNode {want[label]}"
                   + (", the node fewer: a GPU is lost (or masked)" if got is not None and got.isdigit()
                      and int(got) < int(want[label]) else ""))
        ctx.add(code, ref, msg, fix=fix)
        wrong = True
    return wrong


def _manifest_configmaps(manifest: str) -> dict[str, Mapping[str, Any]]:
    """ConfigMap name -> the object as the release's manifest renders it."""
    import yaml
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = {}
    for text in re.split(r"(?m)^---\s*$", manifest):
        if not re.search(r"(?m)^kind: ConfigMap\s*$", text):
            continue
        doc = yaml.load(text, Loader=loader)
        if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
            out[str(_meta(doc).get("name"))] = doc
    return out


def _data_diff(want: Mapping[str, Any], got: Mapping[str, Any]) -> list[str]:
    """How a ConfigMap's data differs from the rendered one, key by key: YAML documents
    compared as data (a reformatted document is no drift), other text line by line."""
    import yaml
    out = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            out.append(f"{key} (missing)")
            continue
        if key not in want:
            out.append(f"{key} (not rendered)")
            continue
        a, b = str(want[key]), str(got[key])
        if a == b:
            continue
        try:
            da, db = yaml.safe_load(a), yaml.safe_load(b)
        except yaml.YAMLError:
            da = db = None
        if isinstance(da, (Mapping, list)) and isinstance(db, (Mapping, list)):
            paths = _diff(da, db)
            if paths:
                out.append(f"{key}: " + ", ".join(paths[:4]) + (" ..." if len(paths) > 4 else ""))
            continue
        la = [x.strip() for x in a.splitlines() if x.strip()]
        lb = [x.strip() for x in b.splitlines() if x.strip()]
        if la != lb:
            gone = [x for x in la if x not in lb]
            new = [x for x in lb if x not in la]
            what = "; ".join([*(f"without {x.split(',', 1)[0]!r}" for x in gone[:3]),
                              *(f"with {x.split(',', 1)[0]!r}" for x in new[:3])]) or "lines reordered"
            out.append(f"{key}: {what}")
    return out


def _check_configmaps(ctx: _Ctx, platform: HelmRelease | None) -> None:
    """Drift of the platform's ConfigMaps against what its release rendered (the Helm
    record's manifest: with the fleet's values, DR016 otherwise, what the fleet renders).
    A drift is named in the findings it explains (DRIFT_CONFIGMAPS), else as DR018."""
    if platform is None:
        return
    try:
        rendered = _manifest_configmaps(platform.manifest)
    except Exception:          # _check_images already notes an unreadable manifest
        return
    live = {(_meta(cm).get("namespace"), _meta(cm).get("name")): cm for cm in ctx.snap.configmaps}
    for name, want in sorted(rendered.items()):
        component = _labels(want).get("app.kubernetes.io/name", "")
        if component not in DRIFT_CONFIGMAPS:
            continue
        what, explains = DRIFT_CONFIGMAPS[component]
        ns = _meta(want).get("namespace") or platform.namespace
        ref = f"ConfigMap/{ns}/{name}"
        got = live.get((ns, name))
        diff = ["the ConfigMap is missing"] if got is None else _data_diff(want.get("data") or {}, got.get("data") or {})
        if not diff:
            continue
        said = (f"{ref} ({what}) differs from what release {platform.name} renders: "
                + "; ".join(diff[:4]) + (" ..." if len(diff) > 4 else ""))
        hit = [i for i, f in enumerate(ctx.findings) if f.code in explains]
        for i in hit:
            f = ctx.findings[i]
            ctx.findings[i] = DoctorFinding(f.code, f.object, f"{f.message}; {said} (edited outside helm)",
                                            f.workload, (f.fix or CODES[f.code][1])
                                            + f"; `helm upgrade` release {platform.name} restores {ref}")
        if not hit:
            ctx.add("DR018", ref, said)


def _adapter_rules(ctx: _Ctx) -> list[Mapping[str, Any]] | None:
    """The platform's adapter rules (its ConfigMap's config.yaml), None without one."""
    import yaml
    platform = ctx.fleet.platform
    for cm in ctx.snap.configmaps:
        if _labels(cm).get("app.kubernetes.io/name") == "gpu-inference-prometheus-adapter" and \
                _labels(cm).get("app.kubernetes.io/instance") == platform.name:
            try:
                doc = yaml.safe_load((cm.get("data") or {}).get("config.yaml", "")) or {}
            except yaml.YAMLError:
                return []
            return list(doc.get("rules") or []) if isinstance(doc, Mapping) else []
    return None


def _dcgm_fields(ctx: _Ctx) -> set[str] | None:
    platform = ctx.fleet.platform
    for cm in ctx.snap.configmaps:
        if _labels(cm).get("app.kubernetes.io/name") == "gpu-inference-dcgm-exporter" and \
                _labels(cm).get("app.kubernetes.io/instance") == platform.name:
            text = (cm.get("data") or {}).get("counters.csv", "")
            return {line.split(",", 1)[0].strip() for line in text.splitlines()
                    if line.strip() and not line.lstrip().startswith("#")}
    return None


def _served(rules: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Metric name the adapter serves -> (series, the label naming the pod), as
    prometheus-adapter v0.12.0 names them (pkg/naming/metric_namer.go: `as` replaces the
    `matches` capture; the pod resource override names the pod label)."""
    out = {}
    for rule in rules:
        m = _SERIES_NAME.search(str(rule.get("seriesQuery", "")))
        if not m:
            continue
        series = m.group(1)
        name = (rule.get("name") or {}).get("as") or series
        pod_label = "pod"
        for label, res in ((rule.get("resources") or {}).get("overrides") or {}).items():
            if (res or {}).get("resource") == "pod":
                pod_label = label
        out[name] = (series, pod_label)
    return out


def _check_metrics(ctx: _Ctx, hpa_of: Mapping[str, Mapping[str, Any]],
                   pods_of: Mapping[str, set[str]]) -> None:
    snap, fleet = ctx.snap, ctx.fleet
    if not hpa_of:
        return
    api = next((a for a in snap.apiservices if _meta(a).get("name") == CUSTOM_METRICS_APISERVICE), None)
    available = api is not None and any(c.get("type") == "Available" and c.get("status") == "True"
                                        for c in (api.get("status") or {}).get("conditions") or ())
    if api is None:
        ctx.add("DR008", f"APIService/{CUSTOM_METRICS_APISERVICE}", "missing: no HPA reads a custom metric")
    elif not available:
        cond: Mapping[str, Any] = next((c for c in (api.get("status") or {}).get("conditions") or () if c.get("type") == "Available"), {})
        ctx.add("DR008", f"APIService/{CUSTOM_METRICS_APISERVICE}",
                f"not Available ({cond.get('reason') or 'no status'}: {cond.get('message') or ''})".rstrip(": )") + ")")
    rules = _adapter_rules(ctx)
    served = _served(rules) if rules is not None else {}
    fields = _dcgm_fields(ctx)
    for workload, hpa in hpa_of.items():
        ref = _ref("HorizontalPodAutoscaler", hpa)
        for m in (hpa.get("spec") or {}).get("metrics") or ():
            if m.get("type") != "Pods":
                continue
            name = str(((m.get("pods") or {}).get("metric") or {}).get("name", ""))
            if name not in served:
                ctx.add("DR009", ref, f"metric {name!r}: no rule of the adapter's ConfigMap serves it"
                        + ("" if rules is not None else " (no adapter ConfigMap of the platform release)"),
                        workload)
                continue
            series, pod_label = served[name]
            if series.startswith("DCGM_") and fields is not None and series not in fields:
                ctx.add("DR012", ref, f"metric {name!r} reads {series}, which the DCGM exporter's "
                        "counters.csv does not collect", workload)
                continue
            if snap.series is None:
                continue
            # the series must name this workload's pods by the label the rule reads
            mine = pods_of.get(workload, set())
            found = snap.series.get(series, ())
            by_label: dict[str, set[str]] = {}
            for s in found:
                for k, v in s.items():
                    if k.endswith("pod"):
                        by_label.setdefault(k, set()).add(v)
            if by_label.get(pod_label, set()) & mine:
                continue
            other = sorted(k for k, v in by_label.items() if k != pod_label and v & mine)
            if other:
                ctx.add("DR011", ref, f"metric {name!r}: {series} names the workload's pods by "
                        f"{', '.join(other)}, the adapter rule by {pod_label}", workload)
            else:
                ctx.add("DR010", ref, f"metric {name!r}: no {series} series of the workload's pods in Prometheus"
                        + (f" ({len(found)} series of other pods)" if found else ""), workload)
    _ = fleet


def _check_workloads(ctx: _Ctx) -> tuple[list[WorkloadStatus], dict[str, Mapping[str, Any]], dict[str, set[str]]]:
    snap, fleet = ctx.snap, ctx.fleet
    deployed = _deployed(snap.releases)
    statuses: list[WorkloadStatus] = []
    hpa_of: dict[str, Mapping[str, Any]] = {}
    pods_of: dict[str, set[str]] = {}
    nodes: list[Node] = []          # read only to replay fit for a Pending pod without a message
    for r in fleet.workloads:
        wl = r.workload or r.name
        rel = deployed.get((r.namespace, r.name))
        ref = f"Release/{r.namespace}/{r.name}"
        if rel is None:
            ctx.add("DR001", ref, f"workload {wl}: no deployed Helm release {r.name} in {r.namespace}",
                    wl)
            statuses.append(WorkloadStatus(wl, r.namespace, 0, 0, 0))
            continue
        pods = [p for p in snap.pods if _meta(p).get("namespace") == r.namespace
                and _labels(p).get("app.kubernetes.io/instance") == r.name and _gpu_pod(p)
                and not _meta(p).get("deletionTimestamp")]
        running = sum(_running(p) for p in pods)
        pods_of[wl] = {str(_meta(p).get("name")) for p in pods}
        pending = [p for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
        hpa = next((h for h in snap.hpas if _meta(h).get("namespace") == r.namespace
                    and _labels(h).get("app.kubernetes.io/instance") == r.name), None)
        so = next((s for s in snap.scaledobjects if _meta(s).get("namespace") == r.namespace
                   and _labels(s).get("app.kubernetes.io/instance") == r.name), None)
        desired = len(pods)
        scaler = ""
        if hpa is not None:
            hpa_of[wl] = hpa
            scaler = _ref("HorizontalPodAutoscaler", hpa)
            desired = int((hpa.get("status") or {}).get("desiredReplicas") or desired)
        if so is not None:
            scaler = _ref("ScaledObject", so)
            ready = next((c for c in (so.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None)
            if ready is not None and ready.get("status") != "True":
                ctx.add("DR017", scaler, f"Ready={ready.get('status')} ({ready.get('reason') or ''}: "
                        f"{ready.get('message') or ''})", wl)
        statuses.append(WorkloadStatus(wl, r.namespace, desired, running, len(pending), scaler))
        # values drift: the release's values against the fleet's
        drift = _diff(dict(r.values), dict(rel.config))
        if drift:
            ctx.add("DR016", ref, f"{len(drift)} value(s) differ from the fleet's: {', '.join(drift[:5])}"
                    + (" ..." if len(drift) > 5 else ""), wl)
        _check_images(ctx, rel, pods, wl)
        # PDB blocking a drain
        for pdb in snap.pdbs:
            if _meta(pdb).get("namespace") != r.namespace or _labels(pdb).get("app.kubernetes.io/instance") != r.name:
                continue
            st = pdb.get("status") or {}
            if st.get("expectedPods", 0) and st.get("disruptionsAllowed", 0) == 0 \
                    and st.get("currentHealthy", 0) >= st.get("expectedPods", 0):
                ctx.add("DR013", _ref("PodDisruptionBudget", pdb),
                        f"{st.get('currentHealthy')} of {st.get('expectedPods')} pods healthy and no disruption "
                        f"allowed (minAvailable {(pdb.get('spec') or {}).get('minAvailable')}, maxUnavailable "
                        f"{(pdb.get('spec') or {}).get('maxUnavailable')}): a node drain waits forever", wl)
        if pending:
            placement = next((p for p in fleet.placements if p.workload == wl), None)
            pool = placement.pool.name if placement is not None else None
            if placement is not None and placement.mode == "dra":
                _check_dra(ctx, r, placement, pending)
            if pool not in ctx.broken_pools and wl not in ctx.explained:
                msg = _pending_message(pending[0])
                if not msg:
                    spec = pending[0].get("spec") or {}
                    nodes = nodes or [_node(n) for n in snap.nodes]
                    reasons = [static_reason(pod_shape(spec), n) for n in nodes]
                    msg = "; ".join(sorted({x for x in reasons if x})) or "the pods fit a node's filters: not scheduled yet"
                ctx.add("DR007", _ref("Pod", pending[0]),
                        f"{len(pending)} pod(s) Pending: {msg}", wl)
    platform = deployed.get((fleet.platform.namespace, fleet.platform.name))
    if platform is None:
        ctx.add("DR001", f"Release/{fleet.platform.namespace}/{fleet.platform.name}",
                f"the platform release {fleet.platform.name} is not deployed in {fleet.platform.namespace}")
    else:
        drift = _diff(dict(fleet.platform.values), dict(platform.config))
        if drift:
            ctx.add("DR016", f"Release/{platform.namespace}/{platform.name}",
                    f"{len(drift)} value(s) differ from the fleet's: {', '.join(drift[:5])}"
                    + (" ..." if len(drift) > 5 else ""))
        _check_images(ctx, platform, [p for p in snap.pods if _meta(p).get("namespace") == platform.namespace
                                      and _labels(p).get("app.kubernetes.io/instance") == platform.name], "")
    return statuses, hpa_of, pods_of


def _check_dra(ctx: _Ctx, release: Release, placement: Placement, pending: Sequence[Mapping[str, Any]]) -> None:
    """DR023/DR024: the Pending pods of a DRA workload whose devices nothing publishes. Its
    DeviceClass missing counts when the snapshot holds DRA objects at all or the scheduler's
    message names the class (a dump without `kubectl get deviceclasses` proves nothing); no
    ResourceSlice of the driver on the pool's nodes counts once its DeviceClass exists."""
    wl = release.workload or release.name
    gpu = release.values.get("gpu") or {}
    dra = (gpu.get("dra") or {}) if isinstance(gpu, Mapping) else {}
    klass = str(dra.get("deviceClassName") or deviceplugin.DRA_GPU_CLASS)
    said = _pending_message(pending[0])
    if not any(_meta(c).get("name") == klass for c in ctx.snap.deviceclasses):
        if ctx.snap.deviceclasses or ctx.snap.resourceslices or klass in said:
            ctx.add("DR023", f"DeviceClass/{klass}", f"{len(pending)} pod(s) Pending: their ResourceClaims ask "
                    f"for DeviceClass {klass}, which does not exist" + (f" (scheduler: {said})" if said else ""), wl)
            ctx.explained.add(wl)
        return
    selector = placement.pool.selector
    pool_nodes = {str(_meta(n).get("name")) for n in ctx.snap.nodes
                  if all(_labels(n).get(k) == v for k, v in selector.items())}
    published = {str((s.get("spec") or {}).get("nodeName")) for s in ctx.snap.resourceslices
                 if (s.get("spec") or {}).get("driver") == deviceplugin.DRA_DRIVER
                 and (s.get("spec") or {}).get("devices")}
    if pool_nodes and not pool_nodes & published:
        ctx.add("DR024", _ref("Pod", pending[0]), f"{len(pending)} pod(s) Pending: no ResourceSlice of driver "
                f"{deviceplugin.DRA_DRIVER} publishes a device on the {len(pool_nodes)} node(s) of pool "
                f"{placement.pool.name}" + (f" (scheduler: {said})" if said else ""), wl)
        ctx.explained.add(wl)


def _check_images(ctx: _Ctx, rel: HelmRelease, pods: Sequence[Mapping[str, Any]], workload: str) -> None:
    """Image drift: a pod's container image that its owner's rendered manifest does not name."""
    try:
        images = _manifest_images(rel.manifest)
    except Exception:          # an unreadable manifest: the values check still runs
        ctx.notes.append(f"release {rel.namespace}/{rel.name}: its manifest does not parse; images not checked")
        return
    seen: set[tuple[str, str, str]] = set()
    for p in pods:
        owner = _owner_name(p)
        spec = p.get("spec") or {}
        for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            want = images.get((str(owner), str(c.get("name"))))
            image = str(c.get("image"))
            if want is None or image in want or (owner, c.get("name"), image) in seen:
                continue
            seen.add((str(owner), str(c.get("name")), image))
            ctx.add("DR015", _ref("Pod", p), f"container {c.get('name')} runs {image}; release {rel.name} "
                    f"renders {', '.join(sorted(want))}", workload)


def diagnose(fleet: Fleet, snap: Snapshot) -> Report:
    """Every broken link between `fleet` and the cluster `snap` shows (module docstring)."""
    ctx = _Ctx(fleet, snap)
    with paused_gc():
        _check_node_side(ctx)
        statuses, hpa_of, pods_of = _check_workloads(ctx)
        _check_metrics(ctx, hpa_of, pods_of)
        platform = _deployed(snap.releases).get((fleet.platform.namespace, fleet.platform.name))
        _check_configmaps(ctx, platform)
    if snap.series is None and hpa_of:
        ctx.notes.append("no Prometheus series given: series and their pod labels not checked")
    findings = sorted(set(ctx.findings), key=lambda f: (f.workload, f.code, f.object, f.message))
    return Report(tuple(statuses), tuple(findings), tuple(ctx.notes))
