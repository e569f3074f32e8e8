"""Layout: the node side of the fleet, computed once for every pool and workload together.

Per pool, in this order:
1. whole-GPU replicas (tensor parallel included) are packed onto nodes first fit
   decreasing; a replica's GPUs stay on one node and, for more than one GPU, inside one
   NVLink island of the pool's topology (`Topology.nvlink_islands`; a node without NVLink
   takes them over PCIe);
2. time-slicing/MPS replicas get the pool's remaining nodes under one sharing config;
3. MIG workloads get the remaining nodes and, in a MIG pool, the GPUs the whole-GPU
   replicas leave free on theirs (mig-parted sets MIG per device, and the device plugin's
   mixed strategy advertises `nvidia.com/gpu` beside `nvidia.com/mig-*`), laid out by the
   optimal planner (`planners.milp`, HiGHS) with each workload pinned to the one profile
   its pods request;
4. nodes of a MIG pool that no MIG layout needs are left usable: MIG disabled, whole GPUs.

The result says, per node group, the labels its nodes carry (device-plugin config,
mig-parted config, topology), and per workload how many units of its resource the
layout gives it at most; `shortages` say where peak demand does not fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from gpuvalues.catalog import GIB_PER_GB
from gpuvalues.errors import PlanError
from gpuvalues.fleet.placement import Placement, spec_error
from gpuvalues.fleet.spec import NodePool, Spec
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import migparted
from gpuvalues.planners.scheduling import topology
from gpuvalues.yamlio.inputs import read_text

__all__ = ["NodeGroup", "Shortage", "Layout", "lay_out", "choose_pools", "DEFAULT_DEVICE_PLUGIN_CONFIG"]

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
    held: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # pool -> workload -> GPUs
    # MIG planner pool (`plan.pools[i].pool.name`) -> (spec pool, the GPU indices of each of
    # its nodes it covers; None: every GPU): `<pool>.<k>gpu` pools are the GPUs whole-GPU
    # replicas leave free on their nodes
    mig_parts: Mapping[str, tuple[str, tuple[int, ...] | None]] = field(default_factory=dict)

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


def _kind(p: Placement) -> tuple:
    """What a placement needs of its pool's device-plugin config (two kinds that differ
    cannot share a pool, see lay_out); whole GPUs go with any but DRA."""
    if p.mode == "shared":
        return ("shared", p.sharing, p.replicas_per_gpu, p.renamed)
    return (p.mode,) if p.mode in ("mig", "dra") else ()


def _gpus_for(p: Placement, peak: int) -> int:
    """GPUs `peak` replicas of `p` take at most, alone on their GPUs."""
    return p.gpus_per_replica * peak if p.whole_gpus else -(-peak // max(p.units_per_gpu, 1))


def choose_pools(spec: Spec, options: Sequence[Sequence[Placement]],
                 peak_of) -> list[Placement]:
    """One placement per workload from its candidates (`placement.candidates`, one per pool
    that can host it): in spec order, the first pool whose GPUs not yet claimed hold the
    workload's peak (`peak_of(placement)`: replicas; GPUs as `_gpus_for` counts them, an
    estimate: node packing and MIG sharing are the layout's) and whose other workloads it
    can share nodes with; else the compatible pool with the most GPUs left, where the
    layout reports what does not fit (GV015). So `sharing: auto` and workloads without a
    nodePool spread over every pool that can serve them, instead of all taking the first."""
    left = {pool.name: pool.gpus for pool in spec.node_pools}
    kinds: dict[str, set] = {pool.name: set() for pool in spec.node_pools}

    def fits_with(p: Placement) -> bool:
        have, mine = kinds[p.pool.name], _kind(p)
        if ("dra",) in have or mine == ("dra",):
            return not have or have == {("dra",)} and mine == ("dra",)
        shared = {k for k in have if k and k[0] == "shared"}
        if mine and mine[0] == "shared":
            return ("mig",) not in have and shared <= {mine}
        return not (mine == ("mig",) and shared)

    chosen = []
    for opts in options:
        ok = [p for p in opts if fits_with(p)] or list(opts)
        need = {id(p): _gpus_for(p, peak_of(p)) for p in ok}
        pick = next((p for p in ok if left[p.pool.name] >= need[id(p)]), None) \
            or max(ok, key=lambda p: (left[p.pool.name], -ok.index(p)))
        left[pick.pool.name] -= need[id(pick)]
        kinds[pick.pool.name].add(_kind(pick))
        chosen.append(pick)
    return chosen


def _islands(spec: Spec, pool: NodePool) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """(NVLink islands, GPUs in none) of a node of `pool`, as GPU indices 0..n-1: from the
    topology file, else `NV<k>` islands of k GPUs from the label (`PCIe`: none); without a
    topology, all GPUs are one group (what the pool's spec promises)."""
    n = pool.gpus_per_node
    topo = pool.topology
    groups: tuple[tuple[int, ...], ...]
    if topo is None:
        groups = (tuple(range(n)),)
    elif topo.label:
        k = topology.nvlink_size(topo.label) or 0
        groups = tuple(tuple(range(i, i + k)) for i in range(0, n - k + 1, k)) if k > 1 else ()
    else:
        parsed = topology.parse_topo_matrix(read_text(topo.file), source=str(topo.file))
        if len(parsed.gpus) != n:         # another node's matrix: trust the pool's GPU count
            groups = (tuple(range(n)),)
        else:
            groups = tuple(tuple(parsed.gpus.index(g) for g in isl) for isl in parsed.nvlink_islands())
    inside = {i for g in groups for i in g}
    return groups, tuple(i for i in range(n) if i not in inside)


def _take(node: list[list[int]], count: int, biggest: int) -> list[int] | None:
    """Take `count` free GPUs of `node` ([free GPUs not in an island, then each island's])
    for one replica: more than one GPU from a single island; one GPU from outside the
    islands first, then the fullest island. A replica larger than every island (`biggest`,
    0 on a node without NVLink) runs over PCIe on any free GPUs: GV006 (checks.rules)
    reports that, once."""
    loose, islands = node[0], node[1:]
    if count == 1:
        pools = [loose] if loose else sorted((s for s in islands if s), key=len)
    elif count > biggest:
        if sum(len(s) for s in node) < count:
            return None
        got: list[int] = []
        for s in sorted(node, key=len, reverse=True):
            k = min(count - len(got), len(s))
            got, s[:] = got + s[:k], s[k:]
        return got
    else:
        pools = [s for s in islands if len(s) >= count]
    if not pools:
        return None
    src = pools[0]
    got, src[:] = src[:count], src[count:]
    return got


def _pack_whole(pool: NodePool, islands, wants: Sequence[tuple[Placement, int]]
                ) -> tuple[list[frozenset[int]], dict[str, int]]:
    """First fit decreasing of whole-GPU replicas onto nodes of `pool` (`_take`): per node
    opened, the GPU indices the replicas use; replicas placed per workload."""
    groups, loose = islands
    biggest = max((len(g) for g in groups), default=0)
    nodes: list[list[list[int]]] = []
    used: list[set[int]] = []
    placed = {p.workload: 0 for p, _ in wants}
    # Multi-node groups first, all or nothing: a group reserves `p.nodes` whole nodes (a
    # LeaderWorkerSet group is one pod per node with every GPU of it)
    for p, n in sorted(((p, n) for p, n in wants if p.multi_node), key=lambda pn: -pn[0].nodes):
        for _ in range(n):
            if len(nodes) + p.nodes > pool.nodes:
                break
            for _k in range(p.nodes):
                nodes.append([[] for _g in range(1 + len(groups))])
                used.append(set(range(pool.gpus_per_node)))
            placed[p.workload] += 1
    replicas = sorted(((p.count, p.workload) for p, n in wants if not p.multi_node
                       for _ in range(n)), key=lambda r: -r[0])
    for count, name in replicas:
        for node, _taken in zip(nodes, used):
            got = _take(node, count, biggest)
            if got is not None:
                break
        else:
            if len(nodes) == pool.nodes:
                continue                       # no node left: this replica does not fit
            node = [list(loose), *[list(g) for g in groups]]
            got = _take(node, count, biggest)
            if got is None:
                continue                       # no node of this pool holds it
            nodes.append(node)
            taken = set()
            used.append(taken)
        taken.update(got)
        placed[name] += 1
    return [frozenset(u) for u in used], placed


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


def _container_features(spec: Spec, groups: list[NodeGroup], dp_configs: dict[str, dict[str, Any]]
                        ) -> tuple[list[NodeGroup], dict[str, dict[str, Any]]]:
    """Each pool's `containerFeatures` in the configs its node groups select. A pool that
    turns any on gets its own configs (`<config>-<features>`, the default config's as
    `<pool>-<features>`), so no other pool's containers get them; a config no group selects
    any more is dropped. The features are per node (a device-plugin config), hence per pool."""
    pools = {p.name: p for p in spec.node_pools}
    out: list[NodeGroup] = []
    configs = dict(dp_configs)
    for g in groups:
        on = sorted(k for k, v in pools[g.pool].container_features if v)
        if not on or g.labels.get(deviceplugin.DEPLOY_LABEL) == "false":
            out.append(g)
            continue
        base = g.device_plugin_config
        name = f"{base or g.pool}-{'-'.join(on)}"
        configs[name] = deviceplugin.with_container_features(
            configs[base] if base else DEFAULT_DEVICE_PLUGIN_CONFIG, dict(pools[g.pool].container_features))
        out.append(replace(g, labels={**g.labels, deviceplugin.CONFIG_LABEL: name}, device_plugin_config=name))
    before, used = {g.device_plugin_config for g in groups}, {g.device_plugin_config for g in out}
    return out, {k: v for k, v in configs.items() if k in used or k not in before}


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
    # (pool, free nodes, topology labels, free GPU indices per partly used node,
    #  whole-GPU workloads, nodes they use)
    mig_pools: list[tuple[NodePool, int, dict, list, tuple, int]] = []
    held: dict[str, dict[str, int]] = {}

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
        islands = _islands(spec, pool) if whole else ((), ())
        opened, placed = _pack_whole(pool, islands, [(p, peaks[p.workload]) for p in whole])
        whole_nodes = len(opened)
        for p in whole:
            units[p.workload] = placed[p.workload] * p.gpus_per_replica
            held.setdefault(pool.name, {})[p.workload] = placed[p.workload] * p.gpus_per_replica
            if placed[p.workload] < peaks[p.workload]:
                nv = (f" inside NVLink groups of {', '.join(str(len(g)) for g in islands[0])} "
                      "GPUs per node" if p.count > 1 and islands[0] and
                      max(len(g) for g in islands[0]) < pool.gpus_per_node else "")
                shortages.append(Shortage(p.workload, pool.name, peaks[p.workload],
                                          placed[p.workload], f"{pool.nodes} x "
                                          f"{pool.gpus_per_node} GPUs hold {placed[p.workload]} "
                                          f"replicas of {p.gpus_per_replica} GPUs"
                                          + (f" ({p.nodes} whole nodes each)" if p.multi_node else nv)))
        free = pool.nodes - whole_nodes
        if shared:
            name, cfg = _shared_config(spec, pool, shared)
            dp_configs[name] = cfg
            per_node = pool.gpus_per_node * shared[0].replicas_per_gpu
            slots = free * per_node
            _share_out(shared, peaks, slots, units, shortages, pool,
                       f"{free} nodes x {per_node} shared replicas")
            for p in shared:
                held.setdefault(pool.name, {})[p.workload] = -(-units[p.workload] // p.units_per_gpu)
            if free:
                groups.append(NodeGroup(_unique(pool.name, used_names), pool.name, free,
                                        {deviceplugin.CONFIG_LABEL: name, **topo}, name,
                                        workloads=tuple(p.workload for p in shared)))
            free = 0
        elif migs:
            # the MIG solve decides: free nodes, and the GPUs whole replicas leave on theirs
            left = [tuple(i for i in range(pool.gpus_per_node) if i not in u) for u in opened]
            mig_pools.append((pool, free, topo, [g for g in left if g],
                              tuple(p.workload for p in whole), whole_nodes))
            continue
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
    parts: dict[str, tuple[str, tuple[int, ...] | None, int]] = {}
    if mig_pools:
        plan = _mig_layout(spec, placements, peaks, mig_pools, groups, dp_configs, mig_configs,
                           filters, units, notes, shortages, used_names, held, parts,
                           dict(objective=objective, baselines=baselines, time_limit=time_limit))
    mig_parted = migparted.build_mig_parted_config(mig_configs, device_filters=filters or None) \
        if mig_configs else None
    groups, dp_configs = _container_features(spec, groups, dp_configs)
    return Layout(tuple(groups), mig_parted, dp_configs, units, plan, tuple(notes),
                  tuple(shortages), held, {k: (owner, idx) for k, (owner, idx, _) in parts.items()})


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
                units, notes, shortages, used_names, held, parts, solve):
    """Step 3: the MIG pools' layout by the optimal planner, one solve for all of them.

    A pool's free nodes are one planner pool; the free GPUs of its nodes that whole-GPU
    replicas use partly are planner pools of their own (`<pool>.<k>gpu`, one per set of
    free GPU indices), so MIG fills them and mig-parted leaves MIG off on the rest."""
    from gpuvalues.planners.mig.milp import model as milp   # HiGHS + numpy: imported only when MIG is planned
    from gpuvalues.planners.mig.milp.plan import plan

    # parts (filled here): planner pool -> (pool, GPU indices or None for all, nodes)
    for pool, free, _, partial, _, _ in mig_pools:
        if free > 0:
            parts[pool.name] = (pool.name, None, free)
        counted: dict[tuple[int, ...], int] = {}
        for idx in partial:
            counted[idx] = counted.get(idx, 0) + 1
        for j, (idx, count) in enumerate(sorted(counted.items(), key=lambda kv: (-len(kv[0]), kv[0]))):
            name = f"{pool.name[:40]}.{len(idx)}gpu" + (f"-{j + 1}" if j else "")
            parts[name] = (pool.name, idx, count)
            notes.append(f"MIG planner pool {name}: GPUs {', '.join(map(str, idx))} of {count} "
                         f"{pool.name} node(s) whose other GPUs serve whole-GPU replicas")
    by_pool = {pool.name: pool for pool, *_ in mig_pools}
    members = [p for p in placements if p.mode == "mig" and p.pool.name in by_pool]
    demands = []
    for p in members:
        mine = [name for name, (owner, _, _) in parts.items() if owner == p.pool.name]
        gpus = sum((len(idx) if idx else p.pool.gpus_per_node) * count
                   for name, (_, idx, count) in parts.items() if name in mine)
        w = next(w for w in spec.workloads if w.name == p.workload)
        demands.append(milp.ModelDemand(p.workload, replicas=min(peaks[p.workload], p.units_per_gpu * gpus),
                                        memory_gb=w.memory_gib / GIB_PER_GB if w.memory_gib else None,
                                        allowed_profiles=(p.gpu.profile(p.mig_profile).name,),
                                        pools=tuple(mine)))
    inputs = [milp.PlanPool(name, by_pool[owner].gpu.name, len(idx) if idx else by_pool[owner].gpus_per_node,
                            count, mig_enabled=True, price_per_gpu=by_pool[owner].price_per_gpu_hour)
              for name, (owner, idx, count) in parts.items()]
    result = None
    demands = [d for d in demands if d.replicas > 0 and d.pools]
    if solve["objective"] == "cost" and any(p.price_per_gpu is None for p in inputs):
        raise PlanError("--objective cost needs pricePerGpuHour on every MIG node pool")
    if demands and inputs:
        try:
            result = plan(demands, inputs, **solve)
        except PlanError as exc:
            notes.append(f"the optimal MIG planner could not fit the peak ({exc.message}); "
                         "split each pool's free GPUs in proportion to demand instead")
    # pool -> [(nodes, devices per GPU of the node, None = MIG off)]
    layouts: dict[str, list[tuple[int, tuple]]] = {}
    partial_used: dict[str, int] = {}
    if result is not None:
        notes.append(f"MIG layout by the optimal planner (HiGHS): {result.gpus_used} GPUs, gap "
                     f"{result.gap:.0%}" + ("" if result.optimal else " (time limit: not proven)"))
        for pp in result.pools:
            owner, idx, _ = parts[pp.pool.name]
            n = by_pool[owner].gpus_per_node
            for g in pp.gpu_groups:
                models = {inst.model for inst in g.instances if inst.model}
                for inst in g.instances:
                    if inst.model:
                        units[inst.model] = units.get(inst.model, 0) + g.count
                for m in models:
                    held.setdefault(owner, {})[m] = held.get(owner, {}).get(m, 0) + g.count
            # the planner names profiles as the catalog does; a workload asking for a
            # driver branch's name (GB200 1g.24gb) gets that name on its nodes
            named = {p.gpu.profile(p.mig_profile).name: p.mig_profile for p in members
                     if p.pool.name == owner}
            for ng in pp.node_groups:
                devices = tuple({named.get(k, k): v for k, v in dict(d).items()} if d else None
                                for d in ng.devices)
                if idx is not None:
                    full: list = [None] * n
                    for pos, gi in enumerate(idx):
                        full[gi] = devices[pos]
                    devices = tuple(full)
                    partial_used[owner] = partial_used.get(owner, 0) + ng.count
                layouts.setdefault(owner, []).append((ng.count, devices))
    else:
        for pool, free, *_ in mig_pools:
            mine = [p for p in members if p.pool.name == pool.name]
            if free and mine:
                layouts[pool.name] = _split_pool(pool, mine, peaks, free)
                for p in mine:
                    gpus = sum(count * sum(1 for d in devs if d and p.mig_profile in d)
                               for count, devs in layouts[pool.name])
                    units[p.workload] = gpus * p.units_per_gpu
                    held.setdefault(pool.name, {})[p.workload] = gpus
    for pool, free, topo, partial, whole_names, whole_nodes in mig_pools:
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
            # who runs there: the MIG workloads whose profile it has, and the whole-GPU
            # ones when a GPU keeps MIG off
            runs = tuple(p.workload for p in mine if any(d and p.mig_profile in d for d in devices))
            if None in devices and whole_names:
                runs += whole_names
            groups.append(NodeGroup(name, pool.name, count, labels, pool.name, devices, runs))
            used += count
        rest = pool.nodes - used          # nodes with MIG off on every GPU
        if rest > 0:
            name = _unique(f"{pool.name}-whole", used_names)
            mig_configs[name] = [None] * pool.gpus_per_node
            if gpu.device_filter:
                filters[name] = list(gpu.device_filter)
            labels = {**migparted.node_labels(name), deviceplugin.CONFIG_LABEL: pool.name, **topo}
            all_whole = whole_nodes - partial_used.get(pool.name, 0)
            groups.append(NodeGroup(name, pool.name, rest, labels, pool.name,
                                    (None,) * pool.gpus_per_node,
                                    whole_names if all_whole > 0 else ()))
            spare = rest - max(all_whole, 0)
            if spare > 0:
                notes.append(f"{spare} {pool.name} node(s) are not needed by the MIG layout at "
                             "peak: MIG disabled there, whole GPUs")
        gpus_free = free * pool.gpus_per_node + sum(len(g) for g in partial)
        for p in mine:
            got = units.get(p.workload, 0)
            units[p.workload] = got
            if got < peaks[p.workload]:
                shortages.append(Shortage(p.workload, pool.name, peaks[p.workload], got,
                                          f"{gpus_free} {gpu.name} GPUs" + (
                                              " left after whole-GPU replicas" if whole_names
                                              else " for its MIG workloads")))
    return result


def _split_pool(pool: NodePool, mine: Sequence[Placement], peaks: Mapping[str, int],
                nodes: int) -> list[tuple[int, tuple]]:
    """Fallback when the planner cannot fit the peak: the pool's free GPUs split among its
    MIG workloads in proportion to demand (each at least one while GPUs last), a GPU holds
    one profile, as many as fit; [(nodes, devices per GPU)] with alike nodes grouped."""
    n = pool.gpus_per_node
    total = nodes * n
    need = {p.workload: max(1, math.ceil(peaks[p.workload] / p.units_per_gpu)) for p in mine}
    share = {name: 0 for name in need}
    order = sorted(need, key=lambda k: (-need[k], list(need).index(k)))
    for name in order[:total]:                   # one each while GPUs last, neediest first
        share[name] = 1
    for _ in range(total - sum(share.values())):  # the rest to the neediest per GPU held
        name = max(share, key=lambda k: (need[k] / max(share[k], 1e-9) if share[k] else 0,
                                         -list(share).index(k)))
        share[name] += 1
    flat: list = []
    for p in mine:
        flat += [{p.mig_profile: p.units_per_gpu}] * share[p.workload]
    flat += [None] * (total - len(flat))
    out: list[tuple[int, tuple]] = []
    for i in range(nodes):
        devices = tuple(flat[i * n:(i + 1) * n])
        if out and out[-1][1] == devices:
            out[-1] = (out[-1][0] + 1, devices)
        else:
            out.append((1, devices))
    return out
