"""The fleet: one computation, from a spec, of everything a cluster needs to serve it.

    spec -> placement (pool and GPU resource per workload) -> sizing (replicas at peak)
         -> layout (every pool's node groups: whole-GPU/tensor-parallel nodes, sharing,
            the MIG layout by the optimal planner, mig-parted and device-plugin configs)
         -> releases (one platform release, one release per workload)

`build_fleet(spec)` runs it once; `plan`, `values`, `validate` and `render` all use the
same `Fleet`, so what one prints is what another writes. Problems are `findings`
(errors and warnings, each placed at the spec line that causes it), so one run reports
every cause; `gpuvalues.checks.fleet.check_fleet` adds the checks of the releases'
values. Nothing here runs helm or touches files.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gpuvalues import catalog
from gpuvalues.errors import Finding, GpuValuesError
from gpuvalues.fleet import sizing
from gpuvalues.fleet.layout import Layout, NodeGroup, choose_pools, lay_out
from gpuvalues.fleet.placement import Placement, candidates
from gpuvalues.fleet.releases import (Release, gpu_operator_release, platform_release, warning,
                                      workload_release)
from gpuvalues.fleet.spec import NodePool, Spec
from gpuvalues.planners import deviceplugin
from gpuvalues.yamlio.loader import format_path

__all__ = ["Fleet", "Release", "NodeGroup", "Placement", "build_fleet", "expected_nodes"]


@dataclass(frozen=True)
class Fleet:
    """A spec's fleet: placements, the node side (`layout`) and the releases, with every
    finding. `releases[0]` is the platform release; then one per workload that could be
    built, in spec order."""

    spec: Spec
    placements: tuple[Placement, ...]
    peaks: Mapping[str, int]
    layout: Layout | None
    releases: tuple[Release, ...]
    findings: tuple[Finding, ...] = ()
    decisions: tuple[str, ...] = ()
    gpu_operator: Release | None = None     # the gpu-operator chart's values (gpuOperator: true)

    @property
    def platform(self) -> Release:
        """The platform release."""
        return self.releases[0]

    @property
    def workloads(self) -> tuple[Release, ...]:
        """The workload releases, in spec order."""
        return self.releases[1:]

    def release(self, workload: str) -> Release:
        """The release of `workload` (a `GpuValuesError` naming the workloads if none)."""
        for r in self.workloads:
            if r.workload == workload:
                return r
        self.spec.workload(workload)        # unknown name: SpecError listing the workloads
        raise GpuValuesError(f"workload {workload!r} has no release: see the fleet's errors")

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The findings of severity error."""
        return tuple(f for f in self.findings if f.severity == "error")

    def node_side(self) -> dict[str, Any]:
        """What goes on the nodes, as data: the mig-parted config, the named device-plugin
        configs and the labels of each node group (with how many nodes get them). `plan`
        prints it and `values --artifacts` writes it, from this one function."""
        if self.layout is None:
            return {}
        out: dict[str, Any] = {}
        if self.layout.mig_parted:
            out["mig-parted-config.yaml"] = dict(self.layout.mig_parted)
        if self.layout.device_plugin_configs:
            out["device-plugin-configs.yaml"] = dict(self.layout.device_plugin_configs)
        out["node-labels.yaml"] = {g.name: dict(g.labels) for g in self.layout.node_groups}
        out["node-groups.yaml"] = [{"name": g.name, "pool": g.pool, "nodes": g.nodes,
                                    "labels": dict(g.labels), "workloads": list(g.workloads)}
                                   for g in self.layout.node_groups]
        return out


def _finding(spec: Spec, exc: GpuValuesError, default_path: tuple) -> Finding:
    """A placed error as a finding (the error's own position when it has one)."""
    if exc.line is not None or exc.source:
        return Finding(exc.code, exc.message, exc.field or format_path(default_path),
                       exc.source or "", exc.line, exc.column)
    source, line, col = spec.position(*default_path)
    return Finding(exc.code, exc.message, exc.field or format_path(default_path), source, line, col)


def build_fleet(spec: Spec, *, objective: str = "gpus", baselines: bool = False,
                time_limit: float = 30.0) -> Fleet:
    """The fleet of `spec` (see the module docstring). Never raises for a problem of the
    spec: each becomes a finding, and a workload that cannot be placed or built has no
    release. `objective` (gpus | cost), `baselines` (the MIG planner's comparison plans)
    and `time_limit` go to the MIG solve."""
    if not 0 < time_limit < float("inf"):
        raise GpuValuesError("time limit must be > 0 seconds", field="time_limit")
    findings: list[Finding] = list(spec.warnings)

    def warn(code: str, message: str, *path: Any) -> None:
        findings.append(warning(spec, code, message, *path))

    options: list[tuple[Placement, ...]] = []
    for wi, _w in enumerate(spec.workloads):
        try:
            options.append(candidates(spec, wi))
        except GpuValuesError as exc:
            findings.append(_finding(spec, exc, ("workloads", wi)))

    def peak_of(p: Placement) -> int:
        return sizing.peak_replicas(spec, spec.workload(p.workload), p.mode)

    placements = choose_pools(spec, options, peak_of)
    peaks = {p.workload: peak_of(p) for p in placements}
    try:
        layout = lay_out(spec, placements, peaks, objective=objective, baselines=baselines,
                         time_limit=time_limit)
    except GpuValuesError as exc:
        findings.append(_finding(spec, exc, ("cluster", "nodePools")))
        return Fleet(spec, tuple(placements), peaks, None,
                     (platform_release(spec, None, ()),), tuple(findings))
    findings += _shortage_findings(spec, layout, placements)
    workloads = []
    for p in placements:
        wi = [w.name for w in spec.workloads].index(p.workload)
        try:
            workloads.append(workload_release(spec, wi, p, layout, warn))
        except GpuValuesError as exc:
            findings.append(_finding(spec, exc, ("workloads", wi)))
    releases = (platform_release(spec, layout, workloads), *workloads)
    return Fleet(spec, tuple(placements), peaks, layout, releases, tuple(findings),
                 layout.notes, gpu_operator_release(spec, layout, workloads))


def _shortage_findings(spec: Spec, layout: Layout, placements: list[Placement]) -> list[Finding]:
    """One finding per pool whose node groups cannot hold its workloads' peak: an error
    when the spec fixes maxReplicas or a workload gets nothing, else a warning (maxReplicas
    is then capped at what the layout gives). A fixed maxReplicas that the whole pool could
    not hold even alone is the semantic rule GV005's, reported once, there."""
    fixed = spec.autoscaling.max_replicas is not None
    by_name = {p.workload: p for p in placements}
    by_pool: dict[str, list] = {}
    for s in layout.shortages:
        p = by_name[s.workload]
        if fixed and s.wanted * p.gpus_per_replica > p.pool.gpus * p.units_per_gpu:
            continue
        by_pool.setdefault(s.pool, []).append(s)
    out = []
    for pool_name, items in by_pool.items():
        pi = [p.name for p in spec.node_pools].index(pool_name)
        severe = fixed or any(s.got == 0 for s in items)
        text = "; ".join(f"{s.workload} wants {s.wanted} replicas, gets {s.got} ({s.why})"
                         for s in items)
        holders = sorted(layout.held.get(pool_name, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        if any(n for _, n in holders):     # who holds the capacity, not only who is starved
            text += "; its GPUs are held by " + ", ".join(
                f"{w} ({n} GPU{'s' if n != 1 else ''})" for w, n in holders if n)
        source, line, col = spec.position("cluster", "nodePools", pi)
        out.append(Finding("GV015", f"pool {pool_name} cannot hold its workloads at peak: {text}",
                           f"cluster.nodePools[{pi}]", source, line, col,
                           "error" if severe else "warning",
                           "" if severe else "maxReplicas is capped at what the pool holds"))
    return out


def group_node(pool: NodePool, group: NodeGroup, layout: Layout) -> tuple[dict, dict, dict, int, str]:
    """What a node of `group` (of `pool`) carries once its config is applied: (labels,
    allocatable, MIG instances per profile, replicas per GPU, MIG strategy), the device
    plugin's and GFD's behaviour as the project believes it (tests/oracle compares it with
    upstream)."""
    gpu = pool.gpu
    config = (layout.device_plugin_configs.get(group.device_plugin_config)
              if group.device_plugin_config else None)
    products = deviceplugin.gfd_products(gpu, config) or [catalog.gfd_product_label(gpu.name)]
    labels = {"nvidia.com/gpu.count": str(pool.gpus_per_node), **group.labels,
              "nvidia.com/gpu.product": products[-1]}
    alloc: dict[str, int] = {}
    mig_profiles: dict[str, int] = {}
    replicas, strategy = 1, "none"
    sharing = (config or {}).get("sharing") or {}
    kind = "timeSlicing" if sharing.get("timeSlicing") else "mps" if sharing.get("mps") else None
    if group.labels.get(deviceplugin.DEPLOY_LABEL) == "false":
        pass                          # no device plugin on the node: no extended resources
    elif group.mig_devices is not None or (config or {}).get("flags", {}).get("migStrategy") == "mixed":
        strategy = "mixed"
        labels["nvidia.com/mig.strategy"] = "mixed"
        for devs in group.mig_devices or (None,) * pool.gpus_per_node:
            if devs is None:
                alloc["nvidia.com/gpu"] = alloc.get("nvidia.com/gpu", 0) + 1
            for prof, n in (devs or {}).items():
                mig_profiles[prof] = mig_profiles.get(prof, 0) + n
                name = catalog.mig_resource_name(prof)
                alloc[name] = alloc.get(name, 0) + n
    elif kind:
        res = sharing[kind]["resources"][0]
        replicas = res["replicas"]
        labels["nvidia.com/gpu.replicas"] = str(replicas)
        labels["nvidia.com/gpu.sharing-strategy"] = "mps" if kind == "mps" else "time-slicing"
        renamed = res.get("rename") or sharing[kind].get("renameByDefault")
        alloc["nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"] = pool.gpus_per_node * replicas
    else:
        alloc["nvidia.com/gpu"] = pool.gpus_per_node
    # GFD's sharing labeler: "true" only under an MPS config with no MIG-enabled GPU; the
    # chart's MPS control daemon selects on it (k8s-device-plugin internal/lm/nvml.go,
    # newSharingLabeler / isMPSCapable)
    labels["nvidia.com/mps.capable"] = str(kind == "mps" and strategy == "none").lower()
    return labels, alloc, mig_profiles, replicas, strategy


def offered_resources(fleet: Fleet) -> dict[str, set[str]]:
    """Pool -> the extended resources some node of the pool offers (group_node)."""
    out: dict[str, set[str]] = {}
    if fleet.layout is None:
        return out
    for g in fleet.layout.node_groups:
        pool = fleet.spec.pool(g.pool)
        _, alloc, _, _, _ = group_node(pool, g, fleet.layout)
        out.setdefault(g.pool, set()).update(k for k, v in alloc.items() if v)
    return out


def expected_nodes(fleet: Fleet):
    """An `Inventory` of the fleet's nodes as they will look once the node side is applied:
    the node groups' labels plus the labels and allocatable resources the device plugin and
    GFD derive from each group's config (`group_node`). CPU and memory are left out
    (gpuvalues.planners.scheduling.fit treats them as unlimited)."""
    from gpuvalues.planners.scheduling.inventory import GpuInfo, Inventory, Node

    spec, layout = fleet.spec, fleet.layout
    nodes = []
    for pool in spec.node_pools:
        gpu = pool.gpu
        index = 0
        for g in (layout.groups_of(pool.name) if layout else ()):
            labels, alloc, mig_profiles, replicas, strategy = group_node(pool, g, layout)
            info = GpuInfo(product=labels["nvidia.com/gpu.product"], count=pool.gpus_per_node,
                           mig_capable=gpu.mig_capable, mig_strategy=strategy,
                           mig_profiles=mig_profiles, replicas=replicas,
                           sharing_strategy=labels.get("nvidia.com/gpu.sharing-strategy", "none"))
            for _ in range(g.nodes):
                index += 1
                nodes.append(Node(f"{g.name}-{index:03d}", labels=labels, capacity=alloc,
                                  allocatable=alloc, gpu=info))
    return Inventory(tuple(nodes), source="fleet")
