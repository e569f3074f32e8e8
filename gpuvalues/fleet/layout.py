"""Layout: the node side of the fleet, computed once for every pool and workload together.

Per pool, in this order:
1. whole-GPU replicas (tensor parallel included) get whole nodes, packed first fit
   decreasing (a replica's GPUs stay on one node, where NVLink is);
2. time-slicing/MPS replicas get the pool's remaining nodes under one sharing config;
3. MIG workloads get the remaining nodes, laid out by the optimal planner
   (`planners.milp`, HiGHS) with each workload pinned to the one profile its pods request;
4. nodes of a MIG pool that no MIG layout needs are left usable: MIG disabled, whole GPUs.

The result says, per node group, the labels its nodes carry (device-plugin config,
mig-parted config, topology), and per workload how many units of its resource the
layout gives it at most; `shortages` say where peak demand does not fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gpuvalues.catalog import GIB_PER_GB
from gpuvalues.errors import PlanError
from gpuvalues.fleet.placement import Placement, spec_error
from gpuvalues.fleet.spec import NodePool, Spec
from gpuvalues.planners import deviceplugin, migparted, topology
from gpuvalues.yamlio import format_path, read_text

__all__ = ["NodeGroup", "Shortage", "Layout", "lay_out", "DEFAULT_DEVICE_PLUGIN_CONFIG"]

# The device plugin's config for nodes without the config label (no sharing, no MIG; the
# container features off: deviceplugin.CONTAINER_FEATURES says why).
DEFAULT_DEVICE_PLUGIN_CONFIG = {"version": "v1", "flags": {"migStrategy": "none",
                                                           **deviceplugin.CONTAINER_FEATURES}}


@dataclass(frozen=True)
class NodeGroup:
    """`nodes` nodes of `pool` configured alike.

    `labels`: what to put on them (device-plugin config, mig-parted config, topology; a DRA
    pool's opt-out of the device plugin, deviceplugin.DEPLOY_LABEL).
    `device_plugin_config`: the named config they select (None: the plugin's default).
    `mig_devices`: per GPU, the mig-devices mig-parted creates (None: MIG disabled);
    None when mig-parted does not manage the pool. `workloads`: who runs there.
    """

    name: str
    pool: str
    nodes: int
    labels: Mapping[str, str]
    device_plugin_config: str | None = None
    mig_devices: tuple[Mapping[str, int] | None, ...] | None = None
    workloads: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shortage:
    """Peak demand that does not fit: `workload` wants `wanted` pods, `pool` holds `got`."""

    workload: str
    pool: str
    wanted: int
    got: int
    why: str


@dataclass(frozen=True)
class Layout:
    """The node side of a fleet (see the module docstring)."""

    node_groups: tuple[NodeGroup, ...]
    mig_parted: Mapping[str, Any] | None
    device_plugin_configs: Mapping[str, Mapping[str, Any]]
    units: Mapping[str, int]                 # workload -> resource units at most
    plan: Any = None                         # milp.Plan of the MIG pools, or None
    notes: tuple[str, ...] = ()
    shortages: tuple[Shortage, ...] = ()

    def groups_of(self, pool: str) -> tuple[NodeGroup, ...]:
        """The node groups of one pool."""
        return tuple(g for g in self.node_groups if g.pool == pool)


def _unique(name: str, used: set[str]) -> str:
    name = name[:63].rstrip("-_.")
    base, n = name, 2
    while name in used:
        name = f"{base[:58]}-{n}"
        n += 1
    used.add(name)
    return name


def _pack_whole(pool: NodePool, wants: Sequence[tuple[Placement, int]]) -> tuple[int, dict[str, int]]:
    """First fit decreasing of whole-GPU replicas onto nodes of `pool`: (nodes used,
    replicas placed per workload). A replica's GPUs stay on one node."""
    replicas = sorted(((p.count, p.workload) for p, n in wants for _ in range(n)),
                      key=lambda r: -r[0])
    free: list[int] = []
    placed = {p.workload: 0 for p, _ in wants}
    for count, name in replicas:
        for i, room in enumerate(free):
            if room >= count:
                free[i] -= count
                break
        else:
            if len(free) == pool.nodes:
                continue                       # no node left: this replica does not fit
            free.append(pool.gpus_per_node - count)
        placed[name] += 1
    return len(free), placed


def _topology_labels(spec: Spec, pool: NodePool) -> dict[str, str]:
    topo = pool.topology
    if topo is None:
        return {}
    if topo.label:
        return {topology.DEFAULT_TOPOLOGY_KEY: topo.label}
    # regular files only, size-limited, one-line errors (yamlio); checks/spec confined the path
    return topology.parse_topo_matrix(read_text(topo.file), source=str(topo.file)).labels()


def _shared_config(spec: Spec, pool: NodePool, shared: Sequence[Placement]) -> tuple[str, dict]:
    kinds = {(p.sharing, p.replicas_per_gpu, p.renamed) for p in shared}
    if len(kinds) > 1:
        names = ", ".join(f"{p.workload} ({p.sharing} x{p.replicas_per_gpu}"
                          f"{'' if p.renamed else ', not renamed'})" for p in shared)
        raise spec_error(PlanError, f"pool {pool.name}: workloads need different sharing configs "
                         f"({names}), but a node runs one device-plugin config; give them "
                         "separate pools (nodePool) or the same sharing", spec, "cluster",
                         "nodePools", spec.node_pools.index(pool), code="GV015")
    (mode, replicas, renamed), = kinds
    cfg = deviceplugin.build_device_plugin_config(
        sharing=mode, replicas=replicas, rename_by_default=renamed, gpu=shared[0].gpu,
        mig_enabled=False)
    return f"{'mps' if mode == 'mps' else 'ts'}-{replicas}{'' if renamed else '-unrenamed'}", cfg


def lay_out(spec: Spec, placements: Sequence[Placement], peaks: Mapping[str, int], *,
            objective: str = "gpus", baselines: bool = False, time_limit: float = 30.0) -> Layout:
    """Lay out every pool for its workloads' peak replicas (`peaks`: workload -> replicas).

    Raises `PlanError` (placed in the spec) only for a pool whose workloads cannot share
    it at all; peak demand that does not fit is reported in `Layout.shortages`.
    """
    used_names: set[str] = set()
    groups: list[NodeGroup] = []
    dp_configs: dict[str, dict] = {}
    mig_configs: dict[str, list] = {}
    filters: dict[str, list] = {}
    units: dict[str, int] = {}
    notes: list[str] = []
    shortages: list[Shortage] = []
    mig_pools: list[tuple[NodePool, int, dict]] = []    # (pool, free nodes, topology labels)

    for pool in spec.node_pools:
        members = [p for p in placements if p.pool.name == pool.name]
        whole = [p for p in members if p.whole_gpus]
        migs = [p for p in members if p.mode == "mig"]
        shared = [p for p in members if p.mode == "shared"]
        dra = [p for p in members if p.mode == "dra"]
        topo = _topology_labels(spec, pool)
        if dra and len(dra) < len(members):
            raise spec_error(PlanError, f"pool {pool.name}: DRA workloads "
                             f"({', '.join(p.workload for p in dra)}) and device-plugin workloads "
                             f"({', '.join(p.workload for p in members if p.mode != 'dra')}) cannot "
                             "share it (NVIDIA's DRA driver and device plugin must not run on one "
                             "node: both would hand out the same GPUs); give them separate pools",
                             spec, "cluster", "nodePools", spec.node_pools.index(pool), code="GV015")
        if shared and migs:
            raise spec_error(PlanError, f"pool {pool.name}: MIG workloads "
                             f"({', '.join(p.workload for p in migs)}) and time-slicing/MPS "
                             f"workloads ({', '.join(p.workload for p in shared)}) cannot share "
                             "it (a node runs one device-plugin config); give them separate "
                             "pools", spec, "cluster", "nodePools", spec.node_pools.index(pool),
                             code="GV015")
        gpu = (members[0].gpu if members else None)
        mig_managed = pool.mig and (gpu is None or gpu.mig_capable) and not dra
        whole_nodes, placed = _pack_whole(pool, [(p, peaks[p.workload]) for p in whole])
        for p in whole:
            units[p.workload] = placed[p.workload] * p.count
            if placed[p.workload] < peaks[p.workload]:
                shortages.append(Shortage(p.workload, pool.name, peaks[p.workload],
                                          placed[p.workload], f"{pool.nodes} x "
                                          f"{pool.gpus_per_node} GPUs hold {placed[p.workload]} "
                                          f"replicas of {p.count} GPUs"))
        free = pool.nodes - whole_nodes
        if shared:
            name, cfg = _shared_config(spec, pool, shared)
            dp_configs[name] = cfg
            per_node = pool.gpus_per_node * shared[0].replicas_per_gpu
            slots = free * per_node
            _share_out(shared, peaks, slots, units, shortages, pool,
                       f"{free} nodes x {per_node} shared replicas")
            if free:
                groups.append(NodeGroup(_unique(pool.name, used_names), pool.name, free,
                                        {deviceplugin.CONFIG_LABEL: name, **topo}, name,
                                        workloads=tuple(p.workload for p in shared)))
            free = 0
        elif migs:
            mig_pools.append((pool, free, topo))
            free = 0                             # the MIG solve decides; spare nodes below
        whole_names = tuple(p.workload for p in whole)
        if whole_nodes or free or not members:
            count = whole_nodes + free
            if mig_managed:
                name = _unique(f"{pool.name}-whole" if members else pool.name, used_names)
                mig_configs[name] = [None] * pool.gpus_per_node
                dp_configs[pool.name] = deviceplugin.build_device_plugin_config(mig_strategy="mixed")
                labels = {**migparted.node_labels(name), deviceplugin.CONFIG_LABEL: pool.name, **topo}
                groups.append(NodeGroup(name, pool.name, count, labels, pool.name,
                                        (None,) * pool.gpus_per_node, whole_names))
                if gpu is not None and gpu.device_filter:
                    filters[name] = list(gpu.device_filter)
            elif count:
                labels = {deviceplugin.DEPLOY_LABEL: "false", **topo} if dra else dict(topo)
                groups.append(NodeGroup(_unique(pool.name, used_names), pool.name, count,
                                        labels, None, workloads=whole_names))

    plan = None
    if mig_pools:
        plan = _mig_layout(spec, placements, peaks, mig_pools, groups, dp_configs, mig_configs,
                           filters, units, notes, shortages, used_names,
                           dict(objective=objective, baselines=baselines, time_limit=time_limit))
    mig_parted = migparted.build_mig_parted_config(mig_configs, device_filters=filters or None) \
        if mig_configs else None
    return Layout(tuple(groups), mig_parted, dp_configs, units, plan, tuple(notes),
                  tuple(shortages))


def _share_out(members: Sequence[Placement], peaks: Mapping[str, int], slots: int,
               units: dict, shortages: list, pool: NodePool, what: str) -> None:
    """Give `slots` resource units to `members`: each its peak when they all fit, else in
    proportion to peak (at least one each while slots last)."""
    want = {p.workload: peaks[p.workload] * p.count for p in members}
    total = sum(want.values())
    if total <= slots:
        units.update(want)
        return
    got = {n: (slots * w) // total for n, w in want.items()}
    for n in sorted(want, key=lambda n: -want[n]):     # the remainder to the largest
        if sum(got.values()) >= slots:
            break
        got[n] += 1
    for p in members:
        units[p.workload] = got[p.workload]
        shortages.append(Shortage(p.workload, pool.name, peaks[p.workload],
                                  got[p.workload] // p.count, what))


def _mig_layout(spec, placements, peaks, mig_pools, groups, dp_configs, mig_configs, filters,
                units, notes, shortages, used_names, solve):
    """Step 3: the MIG pools' layout by the optimal planner, one solve for all of them."""
    from gpuvalues.planners import milp   # HiGHS + numpy: imported only when MIG is planned

    by_pool = {pool.name: (pool, free, topo) for pool, free, topo in mig_pools}
    members = [p for p in placements if p.mode == "mig" and p.pool.name in by_pool]
    demands = []
    for p in members:
        free = by_pool[p.pool.name][1]
        cap = p.units_per_gpu * free * p.pool.gpus_per_node
        w = next(w for w in spec.workloads if w.name == p.workload)
        demands.append(milp.ModelDemand(p.workload, replicas=min(peaks[p.workload], cap),
                                        memory_gb=w.memory_gib / GIB_PER_GB if w.memory_gib else None,
                                        allowed_profiles=(p.mig_profile,), pools=(p.pool.name,)))
    inputs = [milp.NodePool(pool.name, pool.gpu, pool.gpus_per_node, free, mig_enabled=True,
                            price_per_gpu=pool.price_per_gpu_hour)
              for pool, free, _ in mig_pools if free > 0]
    result = None
    demands = [d for d in demands if d.replicas > 0]
    if solve["objective"] == "cost" and any(p.price_per_gpu is None for p in inputs):
        raise PlanError("--objective cost needs pricePerGpuHour on every MIG node pool")
    if demands and inputs:
        try:
            result = milp.plan(demands, inputs, **solve)
        except PlanError as exc:
            notes.append(f"the optimal MIG planner could not fit the peak ({exc.message}); "
                         "split each node's GPUs in proportion to demand instead")
    layouts: dict[str, list[tuple[int, tuple]]] = {}   # pool -> [(nodes, devices per GPU)]
    if result is not None:
        notes.append(f"MIG layout by the optimal planner (HiGHS): {result.gpus_used} GPUs, gap "
                     f"{result.gap:.0%}" + ("" if result.optimal else " (time limit: not proven)"))
        for pp in result.pools:
            for g in pp.gpu_groups:
                for inst in g.instances:
                    if inst.model:
                        units[inst.model] = units.get(inst.model, 0) + g.count
            layouts[pp.pool.name] = [(ng.count, tuple(dict(d) if d else None for d in ng.devices))
                                     for ng in pp.node_groups]
    else:
        for pool, free, _ in mig_pools:
            mine = [p for p in members if p.pool.name == pool.name]
            if free and mine:
                layouts[pool.name] = [(free, _split_node(pool, mine, peaks, free))]
                for p in mine:
                    units[p.workload] = sum(d.get(p.mig_profile, 0) for d in layouts[pool.name][0][1]
                                            if d) * free
    for pool, free, topo in mig_pools:
        mine = [p for p in members if p.pool.name == pool.name]
        dp_configs[pool.name] = deviceplugin.build_device_plugin_config(mig_strategy="mixed")
        gpu = mine[0].gpu
        used = 0
        node_layouts = layouts.get(pool.name, [])
        for i, (count, devices) in enumerate(node_layouts):
            name = _unique(pool.name if len(node_layouts) == 1 else f"{pool.name}-{i + 1}",
                           used_names)
            mig_configs[name] = list(devices)
            if gpu.device_filter:
                filters[name] = list(gpu.device_filter)
            labels = {**migparted.node_labels(name), deviceplugin.CONFIG_LABEL: pool.name, **topo}
            groups.append(NodeGroup(name, pool.name, count, labels, pool.name, devices,
                                    tuple(p.workload for p in mine)))
            used += count
        spare = free - used
        whole = [g for g in groups if g.pool == pool.name and g.name.endswith("-whole")]
        if spare > 0:
            if whole:          # the pool's MIG-disabled group takes the spare nodes too
                i = groups.index(whole[0])
                groups[i] = NodeGroup(whole[0].name, pool.name, whole[0].nodes + spare,
                                      whole[0].labels, whole[0].device_plugin_config,
                                      whole[0].mig_devices, whole[0].workloads)
            else:
                name = _unique(f"{pool.name}-whole", used_names)
                mig_configs[name] = [None] * pool.gpus_per_node
                if gpu.device_filter:
                    filters[name] = list(gpu.device_filter)
                labels = {**migparted.node_labels(name), deviceplugin.CONFIG_LABEL: pool.name, **topo}
                groups.append(NodeGroup(name, pool.name, spare, labels, pool.name,
                                        (None,) * pool.gpus_per_node))
            notes.append(f"{spare} {pool.name} node(s) are not needed by the MIG layout at "
                         "peak: MIG disabled there, whole GPUs")
        for p in mine:
            got = units.get(p.workload, 0)
            units[p.workload] = got
            if got < peaks[p.workload]:
                shortages.append(Shortage(p.workload, pool.name, peaks[p.workload], got,
                                          f"{free} nodes x {pool.gpus_per_node} {gpu.name} "
                                          f"after whole-GPU replicas"))
    return result


def _split_node(pool: NodePool, mine: Sequence[Placement], peaks: Mapping[str, int],
                nodes: int) -> tuple:
    """Fallback when the planner cannot fit the peak: each node's GPUs split among the
    pool's MIG workloads in proportion to demand; a GPU holds one profile, as many as fit."""
    n = pool.gpus_per_node
    if len(mine) > n:
        raise PlanError(f"{len(mine)} MIG workloads share pool {pool.name}, whose nodes have "
                        f"only {n} GPUs", field=format_path(("cluster", "nodePools", pool.name)))
    need = {p.workload: max(1, math.ceil(peaks[p.workload] / (p.units_per_gpu * nodes)))
            for p in mine}
    share = {name: 1 for name in need}
    for _ in range(n - len(share)):              # spare GPUs go to the neediest workload
        name = max(share, key=lambda k: (need[k] / share[k], -list(share).index(k)))
        share[name] += 1
    devices: list = []
    for p in mine:
        devices += [{p.mig_profile: p.units_per_gpu}] * share[p.workload]
    return tuple(devices)
