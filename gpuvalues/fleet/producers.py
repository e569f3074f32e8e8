"""Who produces which node label: the causal model of a fleet's install (issue 22).

On a bare cluster a GPU node carries only its day-0 labels (its pool's `nodeSelector`, as
a cloud's node-pool label). Every other label a pod selects, and every GPU resource it
requests, is produced by a part of the install:

- the printed install order (`gpuvalues values`) puts each node group's labels on its
  nodes (device-plugin and mig-parted config selectors, the DRA opt-out, topology);
- node agents, each running only where its DaemonSet's node affinity matches labels that
  are already there: NFD's worker (`feature.node.kubernetes.io/*`, among them
  `pci-10de.present`, which the GPU DaemonSets select), GFD (`nvidia.com/gpu.*`,
  `nvidia.com/mig.*`, `nvidia.com/mps.capable`), mig-manager (the MIG layout and
  `nvidia.com/mig.config.state`), the device plugin (capacity and allocatable); with the
  GPU Operator, its own labeller (`nvidia.com/gpu.present`) and its copies of the agents.

`LABEL_PRODUCERS` is the one table of who produces which label; `install_parts` says which
parts a fleet's install runs (from the platform release's values and the spec);
`node_states` replays them on each node group, in causal order, from the day-0 labels;
`produced_nodes` is the result as an `Inventory` (what `render`'s fit places pods on), and
`missing_producers` names what a workload selects that nothing produces (`validate`'s GV021).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from gpuvalues.fleet.spec import GROUP_LABEL, NodePool, Spec
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import migparted
from gpuvalues.planners.scheduling import topology

if TYPE_CHECKING:
    from gpuvalues.fleet import Fleet
    from gpuvalues.fleet.layout import Layout, NodeGroup

__all__ = ["INSTALL_ORDER", "NFD", "GFD", "DEVICE_PLUGIN", "MIG_MANAGER", "GPU_OPERATOR",
           "LABEL_PRODUCERS", "GPU_NODE_TERMS", "OPT_OUT", "PAUSED", "NFD_GPU_LABEL",
           "producer_of", "install_parts", "NodeState", "node_states", "produced_nodes",
           "required_node_labels", "missing_producers", "operator_values"]

# The parts of an install that produce node state.
INSTALL_ORDER = "the printed install order"
NFD = "Node Feature Discovery"
GFD = "GPU Feature Discovery"
DEVICE_PLUGIN = "the device plugin"
MIG_MANAGER = "mig-manager"
GPU_OPERATOR = "the GPU Operator"

NFD_GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
# mig-manager's value while it pauses a GPU client (NVIDIA/mig-parted v0.13.1
# pkg/mig/reconfigure/reconfigure.go maybeSetPaused); the chart's DaemonSets avoid it too.
PAUSED = "paused-for-mig-change"

# (label key, or a prefix ending in "*"; who produces it; from what). The most specific
# entry wins (an exact key, then the longest prefix). A node group's own labels are the
# install order's whatever their key (see `producer_of`).
LABEL_PRODUCERS: tuple[tuple[str, str, str], ...] = (
    ("feature.node.kubernetes.io/*", NFD,
     "nfd-worker's feature sources, turned into labels by nfd-master (node-feature-discovery "
     "v0.18.3); pci-10de.present needs the worker's pci.deviceLabelFields [vendor]"),
    (GPU_PRESENT_LABEL, GPU_OPERATOR,
     "the GPU Operator's node labeller, on nodes with NFD's NVIDIA PCI label"),
    ("nvidia.com/gpu.deploy.*", GPU_OPERATOR,
     "the GPU Operator's per-component switches (mig-manager pauses them; the install order "
     "sets nvidia.com/gpu.deploy.device-plugin=false on DRA pools)"),
    (MIG_STATE_LABEL, MIG_MANAGER, "mig-manager, after applying nvidia.com/mig.config"),
    (migparted.MIG_CONFIG_LABEL, INSTALL_ORDER, "the node group's mig-parted config"),
    (deviceplugin.CONFIG_LABEL, INSTALL_ORDER, "the node group's device-plugin config"),
    (topology.DEFAULT_TOPOLOGY_KEY, INSTALL_ORDER, "the pool's topology (spec topology)"),
    (topology.DEFAULT_LABEL_PREFIX + "*", INSTALL_ORDER, "the pool's topology (spec topology)"),
    (GROUP_LABEL, INSTALL_ORDER, "the node's group"),
    ("nvidia.com/gpu.*", GFD, "GFD's labelers (k8s-device-plugin internal/lm)"),
    ("nvidia.com/cuda.*", GFD, "GFD's labelers"),
    ("nvidia.com/mig.*", GFD, "GFD's MIG labeler: nvidia.com/mig.capable, nvidia.com/mig.strategy"),
    ("nvidia.com/mig-*", GFD, "GFD's MIG device labels (nvidia.com/mig-<profile>.*)"),
    ("nvidia.com/mps.capable", GFD, "GFD's sharing labeler (internal/lm/nvml.go isMPSCapable)"),
    ("nvidia.com/vgpu.*", GFD, "GFD's vGPU labeler"),
)

# The node DaemonSets' default GPU node affinity (the chart's platform.gpuNodeAffinity, the
# upstream device plugin's; tests/chart holds the chart's default to this): ORed terms.
GPU_NODE_TERMS: tuple[Mapping[str, str], ...] = (
    {NFD_GPU_LABEL: "true"},
    {"feature.node.kubernetes.io/cpu-model.vendor_id": "NVIDIA"},
    {GPU_PRESENT_LABEL: "true"},
)
# Each agent's opt-out label (the chart's platform.*.nodeOptOutLabel defaults, the GPU
# Operator's names): nodes where it is "false" or PAUSED run no such pod.
OPT_OUT = {
    DEVICE_PLUGIN: deviceplugin.DEPLOY_LABEL,
    GFD: "nvidia.com/gpu.deploy.gpu-feature-discovery",
    MIG_MANAGER: "nvidia.com/gpu.deploy.mig-manager",
    "dcgm-exporter": "nvidia.com/gpu.deploy.dcgm-exporter",
}


def producer_of(key: str, group_labels: Mapping[str, str] = {}) -> str | None:
    """Who produces node label `key` (None: nothing in any install). `group_labels`: a node
    group's labels, which the install order puts on its nodes whatever their key."""
    if key in group_labels:
        return INSTALL_ORDER
    best: tuple[int, str] | None = None
    for pattern, part, _ in LABEL_PRODUCERS:
        if pattern == key:
            return part
        if pattern.endswith("*") and key.startswith(pattern[:-1]):
            if best is None or len(pattern) > best[0]:
                best = (len(pattern), part)
    return best[1] if best else None


def install_parts(spec: Spec, platform_values: Mapping[str, Any],
                  operator_values: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Part -> who deploys it, for the parts the install runs: read from the platform
    release's values (own mode) or the gpu-operator chart's (`operator_values`, operator
    mode; the operator's defaults where they say nothing), and `cluster.nfd`."""
    p = platform_values.get("platform", {})
    on = lambda part: bool(p.get(part, {}).get("enabled"))   # noqa: E731
    parts = {INSTALL_ORDER: "gpuvalues values"}
    if spec.nfd == "present":
        parts[NFD] = "the cluster (cluster.nfd: present)"
    if spec.platform.gpu_operator:
        op = operator_values or {}
        op_on = lambda key: bool(op.get(key, {}).get("enabled", True))   # noqa: E731
        parts[GPU_OPERATOR] = "the GPU Operator"
        if NFD not in parts and op_on("nfd"):
            parts[NFD] = "the GPU Operator"
        for part, key in ((GFD, "gfd"), (DEVICE_PLUGIN, "devicePlugin"), (MIG_MANAGER, "migManager")):
            if op_on(key):
                parts[part] = "the GPU Operator"
        return parts
    release = "the platform release"
    if on("nfd"):
        parts[NFD] = release
    for part, key in ((GFD, "gfd"), (DEVICE_PLUGIN, "devicePlugin"), (MIG_MANAGER, "migManager")):
        if on(key):
            parts[part] = release
    return parts


def _runs(labels: Mapping[str, str], opt_out: str | None, require: tuple[str, ...] = ()) -> bool:
    """Would a node DaemonSet's pod schedule on a node with `labels` (GPU_NODE_TERMS, the
    opt-out label not false/PAUSED, every `require` key present)?"""
    if opt_out and labels.get(opt_out) in ("false", PAUSED):
        return False
    if any(k not in labels for k in require):
        return False
    return any(all(labels.get(k) == v for k, v in term.items()) for term in GPU_NODE_TERMS)


@dataclass(frozen=True)
class NodeState:
    """A node of `group` once the install has run: its labels and allocatable resources,
    the MIG devices per profile it advertises, which parts ran on it, and why the others
    did not."""

    group: str
    pool: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    mig_profiles: Mapping[str, int] = field(default_factory=dict)
    replicas: int = 1
    strategy: str = "none"
    ran: tuple[str, ...] = ()
    why_not: Mapping[str, str] = field(default_factory=dict)


def node_states(spec: Spec, layout: Layout | None, platform_values: Mapping[str, Any],
                operator_values: Mapping[str, Any] | None = None) -> tuple[NodeState, ...]:
    """One NodeState per node group: the parts of the install replayed in causal order
    (install order -> NFD -> the GPU Operator's labeller -> mig-manager -> GFD -> device
    plugin) from the day-0 labels. The agents' outputs are the project's model of them
    (`gpuvalues.fleet.group_node`; tests/oracle compares it with upstream)."""
    from gpuvalues.fleet import group_node

    parts = install_parts(spec, platform_values, operator_values)
    out = []
    for g in (layout.node_groups if layout else ()):
        pool = spec.pool(g.pool)
        final, alloc, mig_profiles, replicas, strategy = group_node(pool, g, layout)
        labels = {**pool.selector, **g.labels, GROUP_LABEL: g.name}
        ran, why = [INSTALL_ORDER], {}
        if NFD in parts:
            labels[NFD_GPU_LABEL] = "true"     # every pool node has NVIDIA GPUs
            ran.append(NFD)
        else:
            why[NFD] = "not deployed, and the spec does not say cluster.nfd: present"
        if GPU_OPERATOR in parts and labels.get(NFD_GPU_LABEL) == "true":
            labels[GPU_PRESENT_LABEL] = "true"
            ran.append(GPU_OPERATOR)
        mig_applied = g.mig_devices is None
        if g.mig_devices is not None:
            if MIG_MANAGER not in parts:
                why[MIG_MANAGER] = "not deployed"
            elif not _runs(labels, OPT_OUT[MIG_MANAGER], (migparted.MIG_CONFIG_LABEL,)):
                why[MIG_MANAGER] = "its DaemonSet does not schedule on the node"
            else:
                mig_applied = True
                labels[MIG_STATE_LABEL] = "success"
                ran.append(MIG_MANAGER)
        if GFD in parts and _runs(labels, OPT_OUT[GFD]):
            labels.update({k: v for k, v in final.items() if producer_of(k, g.labels) == GFD})
            ran.append(GFD)
        else:
            why[GFD] = "not deployed" if GFD not in parts else "its DaemonSet does not schedule on the node"
        if DEVICE_PLUGIN in parts and _runs(labels, OPT_OUT[DEVICE_PLUGIN]):
            ran.append(DEVICE_PLUGIN)
            if not mig_applied:
                # the GPUs keep their day-0 state, MIG disabled: one nvidia.com/gpu each
                alloc, mig_profiles = {"nvidia.com/gpu": pool.gpus_per_node}, {}
        else:
            why[DEVICE_PLUGIN] = ("not deployed" if DEVICE_PLUGIN not in parts
                                  else "its DaemonSet does not schedule on the node")
            alloc, mig_profiles = {}, {}
        out.append(NodeState(g.name, g.pool, labels, alloc, mig_profiles, replicas, strategy,
                             tuple(ran), why))
    return tuple(out)


def domain_label(fleet: Fleet, pool: NodePool, index: int) -> dict[str, str]:
    """A pool's groupDomainLabel on its `index`-th node (1-based): a day-0 label (the
    cluster's racks or NVLink cliques, like the pool's nodeSelector), as the plan assumes the
    domains: consecutive runs of as many nodes as its largest multi-node replica spans
    (the cluster's real racks or cliques may be larger; a smaller one holds no group)."""
    if not pool.group_domain_label:
        return {}
    size = max((p.nodes for p in fleet.placements if p.pool.name == pool.name), default=1)
    return {pool.group_domain_label: f"{pool.name}-{(index - 1) // size + 1}"}


def produced_nodes(fleet: Fleet):
    """An `Inventory` of the fleet's nodes as the install makes them from bare nodes
    (`node_states`): only labels and resources some part of the install produces."""
    from gpuvalues.planners.scheduling.inventory import GpuInfo, Inventory, Node

    nodes = []
    index: dict[str, int] = {}
    states = {s.group: s for s in node_states(fleet.spec, fleet.layout, fleet.platform.values,
                                              operator_values(fleet))}
    for g in (fleet.layout.node_groups if fleet.layout else ()):
        s = states.get(g.name)
        if s is None:
            continue
        pool = fleet.spec.pool(g.pool)
        gpu = pool.gpu
        info = GpuInfo(product=s.labels.get("nvidia.com/gpu.product"), count=pool.gpus_per_node,
                       mig_capable=gpu.mig_capable, mig_strategy=s.strategy,
                       mig_profiles=s.mig_profiles, replicas=s.replicas,
                       sharing_strategy=s.labels.get("nvidia.com/gpu.sharing-strategy", "none"))
        for _ in range(g.nodes):
            index[g.pool] = index.get(g.pool, 0) + 1
            nodes.append(Node(f"{g.name}-{index[g.pool]:03d}", labels={
                **s.labels, **domain_label(fleet, pool, index[g.pool])},
                              capacity=s.allocatable, allocatable=s.allocatable, gpu=info))
    return Inventory(tuple(nodes), source="install")


def required_node_labels(values: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Label key -> allowed values ((): any) that a workload release's pods require of their
    node, as the chart's `gpu-inference.affinity` helper (templates/_helpers.tpl) and
    `nodeSelector` render them: only the In/Exists requirements (NotIn also holds where a
    label is absent). tests/chart checks this against the rendered pods of every example."""
    out: dict[str, tuple[str, ...]] = {}
    gpu = values.get("gpu", {})
    mode = gpu.get("mode", "whole")
    if values.get("gpuProducts"):
        out["nvidia.com/gpu.product"] = tuple(values["gpuProducts"])
    if mode == "mig":
        out["nvidia.com/mig.strategy"] = (gpu.get("mig", {}).get("strategy", "mixed"),)
    if mode == "shared":
        if gpu.get("shared", {}).get("resourceName", "").startswith("nvidia.com/mig-"):
            out["nvidia.com/mig.strategy"] = ("mixed",)
        else:
            out["nvidia.com/gpu.sharing-strategy"] = ("time-slicing", "mps")
    topo = values.get("topology", {})
    if int(gpu.get("count", 1)) > 1 and mode in ("whole", "dra") and topo.get("values") \
            and topo.get("key", topology.DEFAULT_TOPOLOGY_KEY):
        out[topo.get("key", topology.DEFAULT_TOPOLOGY_KEY)] = tuple(topo["values"])
    for k, v in (values.get("nodeSelector") or {}).items():
        out[k] = (str(v),)
    return out


def operator_values(fleet: Fleet) -> Mapping[str, Any] | None:
    """The gpu-operator chart's values of the fleet, None without the operator."""
    return fleet.gpu_operator.values if fleet.gpu_operator is not None else None


def missing_producers(fleet: Fleet, pool: str, required: Mapping[str, tuple[str, ...]],
                      states: tuple[NodeState, ...] | None = None) -> list[tuple[str, str | None, str]]:
    """(label, its producer or None, why it is missing) for each label a workload on
    `pool` requires that no node of the pool gets from the install (`node_states`). A label
    that is produced with other values is not missing (fit reports the pods Pending).
    `states`: the fleet's `node_states`, when the caller has them."""
    layout = fleet.layout
    if states is None:
        states = node_states(fleet.spec, layout, fleet.platform.values, operator_values(fleet))
    states = tuple(s for s in states if s.pool == pool)
    groups: dict[str, NodeGroup] = {g.name: g for g in (layout.node_groups if layout else ())}
    out = []
    for key in required:
        if any(key in s.labels for s in states):
            continue          # produced; whether its value matches is fit's question
        group_labels = next((groups[s.group].labels for s in states if s.group in groups), {})
        part = producer_of(key, group_labels)
        why = next((s.why_not[part] for s in states if part in s.why_not), "")
        out.append((key, part, why))
    return out
