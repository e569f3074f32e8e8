"""Placement: for each workload, the pool it runs on and how its replicas get GPUs.

`place(spec, index)` makes the sharing decision for one workload: a pool (its
`nodePool`, else the first that can host it) and a GPU mode with exactly the resource
the chart will request per pod -- whole GPUs (tensor parallel included), one MIG
profile, a time-slicing/MPS replica, or DRA devices. Memory is fitted in GiB against
what `nvidia-smi` reports as usable (`MigProfile.memory_gib`, `GpuModel.memory_gib`),
with the spec's `memoryHeadroom` kept free, never against the GB in a profile's name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuvalues import catalog
from gpuvalues.yamlio.loader import format_path
from gpuvalues.catalog import GIB_PER_GB, GpuModel, MigProfile
from gpuvalues.errors import CatalogError, GpuValuesError, PlanError, SpecError
from gpuvalues.fleet.spec import NodePool, Spec, Workload
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import geometry as mig

__all__ = ["Placement", "place", "candidates", "usable_gib", "spec_error"]

# Resources a pod requests, per chart gpu.mode (the device plugin's names; shared
# replicas are renamed, k8s-device-plugin api/config/v1 `renameByDefault`).
WHOLE_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"


@dataclass(frozen=True)
class Placement:
    """How one workload's replicas get GPUs: on `pool`, `count` x `resource` per pod.

    `mode` is the chart's gpu.mode (whole | mig | shared | dra); `sharing` the spec's
    mode after `auto` (whole | mig | time-slicing | mps | dra); `units_per_gpu` how many
    pods' worth of the resource one GPU gives (MIG instances of the profile, shared
    replicas; 1 for whole GPUs). `why` says why, for the values file's comments.
    """

    workload: str
    pool: NodePool
    mode: str
    count: int
    sharing: str
    mig_profile: str | None = None
    replicas_per_gpu: int | None = None
    units_per_gpu: int = 1
    renamed: bool = True              # shared: advertised as nvidia.com/gpu.shared
    why: str = ""
    nodes: int = 1                    # nodes per replica: > 1 is a LeaderWorkerSet group

    @property
    def gpu(self) -> GpuModel:
        """The pool's GPU model."""
        return self.pool.gpu

    @property
    def gpus_per_replica(self) -> int:
        """Resource units one replica takes: `count` per pod x pods (nodes) per group."""
        return self.count * self.nodes

    @property
    def multi_node(self) -> bool:
        """True when a replica spans nodes (one pod of `count` GPUs per node)."""
        return self.nodes > 1

    @property
    def resource(self) -> str:
        """The extended resource each pod requests; `dra`: the DeviceClass its
        ResourceClaimTemplate claims devices of (the chart's gpu.dra.deviceClassName)."""
        if self.mode == "mig":
            return catalog.mig_resource_name(self.mig_profile)
        if self.mode == "shared":
            return SHARED_RESOURCE if self.renamed else WHOLE_RESOURCE
        if self.mode == "dra":
            return f"{deviceplugin.DRA_GPU_CLASS} (DRA claim)"
        return WHOLE_RESOURCE

    @property
    def whole_gpus(self) -> bool:
        """True when each pod takes whole GPUs (whole or DRA)."""
        return self.mode in ("whole", "dra")


def spec_error(exc_type, message: str, spec: Spec, *path: Any, code: str | None = None):
    """An error of `exc_type` placed at `path` in the spec."""
    source, line, col = spec.position(*path)
    return exc_type(message, source=source, line=line, column=col,
                    field=format_path(path), code=code)


def usable_gib(item: MigProfile | GpuModel) -> float:
    """Usable memory in GiB as nvidia-smi reports it (less than the name's GB)."""
    return item.memory_gib


def _need_gib(spec: Spec, w: Workload) -> float | None:
    return None if w.memory_gib is None else w.memory_gib * (1 + spec.memory_headroom)


def _whole_gpus(need: float | None, w: Workload, gpu: GpuModel) -> int:
    count = w.gpus_per_replica
    if need:
        count = max(count, math.ceil(need / usable_gib(gpu)))
    return count


def _smallest_profile(gpu: GpuModel, need: float) -> MigProfile | None:
    """The smallest base MIG profile with at least `need` GiB usable (None if only the
    whole GPU holds it)."""
    fits = [p for p in gpu.profiles if p.is_base and usable_gib(p) >= need
            and p.memory_slices < gpu.mig.memory_slices]
    return min(fits, key=lambda p: (p.memory_slices, p.compute_slices, usable_gib(p)), default=None)


def _replica_need_gib(spec: Spec, w: Workload) -> float | None:
    """GPU memory one replica needs in GiB for the multi-node decision: its memory need,
    at least its weights (both with the spec's headroom); None when neither is stated."""
    weights = w.weights_gb  # modelSizeGB, or parameters x dtype bytes
    need = max(_need_gib(spec, w) or 0.0,
               weights * GIB_PER_GB * (1 + spec.memory_headroom) if weights else 0.0)
    return need or None


def _nodes_per_replica(spec: Spec, wi: int, pool: NodePool, gpu: GpuModel) -> int:
    """Nodes one replica of workload `wi` spans on `pool`: its nodesPerReplica, else 1, or,
    with no GPU count stated (gpus, tensorParallel above 1), as many whole nodes as its
    memory needs (vLLM's guide: tensor parallel = GPUs per node, pipeline parallel = nodes,
    docs.vllm.ai serving/parallelism_scaling.md)."""
    w = spec.workloads[wi]
    if w.nodes_per_replica is not None:
        return w.nodes_per_replica
    if w.gpus is not None or w.tensor_parallel > 1:
        return 1
    need = _replica_need_gib(spec, w)
    per_node = pool.gpus_per_node * usable_gib(gpu)
    return max(1, math.ceil(need / per_node - 1e-9)) if need else 1


def _multi_node(spec: Spec, wi: int, pool: NodePool, gpu: GpuModel, nodes: int, mode: str,
                problems: list[tuple[str, str]]) -> Placement | None:
    """The placement of a replica over `nodes` whole nodes of `pool` (one pod per node with
    all its GPUs), or None with the reason in `problems`. A spec that cannot be multi-node
    on any pool (sharing, server, GPU counts) raises, placed at nodesPerReplica."""
    w = spec.workloads[wi]
    at = ("workloads", wi, "nodesPerReplica") if w.nodes_per_replica is not None else ("workloads", wi)
    how = (f"nodesPerReplica {nodes}" if w.nodes_per_replica is not None
           else f"its memory ({_gib(_replica_need_gib(spec, w) or 0)}) needs {nodes} nodes")
    if mode not in ("whole", "auto"):
        raise spec_error(PlanError, f"{w.name}: {how}, but sharing {mode} gives a replica part of a "
                         "GPU or a DRA claim; a multi-node group takes whole nodes (sharing: whole)",
                         spec, *at, code="GV060")
    if w.server != "vllm":
        raise spec_error(PlanError, f"{w.name}: {how}, but server {w.server} has no multi-node "
                         "mode here (vLLM runs a group over Ray: leader and workers)", spec, *at,
                         code="GV063")
    if w.tensor_parallel not in (1, pool.gpus_per_node):
        problems.append(("GV062", f"{pool.name}: tensorParallel {w.tensor_parallel} with "
                         f"{nodes} nodes per replica; a group's pods take a node each, tensor "
                         f"parallel over its {pool.gpus_per_node} GPUs (tensorParallel "
                         f"{pool.gpus_per_node} or unset)"))
        return None
    if w.gpus is not None and w.gpus != nodes * pool.gpus_per_node:
        problems.append(("GV062", f"{pool.name}: gpus {w.gpus}, but {nodes} nodes per replica "
                         f"x {pool.gpus_per_node} GPUs is {nodes * pool.gpus_per_node}"))
        return None
    if nodes > pool.nodes:
        problems.append(("GV061", f"{pool.name}: a replica spans {nodes} nodes ({how}), the pool "
                         f"has {pool.nodes}"))
        return None
    need = _replica_need_gib(spec, w)
    have = nodes * pool.gpus_per_node * usable_gib(gpu)
    if need and need > have:
        problems.append(("GV013", f"{pool.name}: {_gib(need)} needed, {nodes} nodes x "
                         f"{pool.gpus_per_node} {gpu.name} give {_gib(have)}"))
        return None
    why = (f"whole: {nodes} nodes x {pool.gpus_per_node} {gpu.name} per replica (a "
           f"LeaderWorkerSet group: tensor parallel {pool.gpus_per_node} inside a node, pipeline "
           f"parallel {nodes} across nodes; {how}"
           + (f", {_gib(need)} needed" if need and w.nodes_per_replica is not None else "") + ")")
    return Placement(w.name, pool, "whole", pool.gpus_per_node, "whole", why=why, nodes=nodes)


def _gib(x: float) -> str:
    return f"{x:.2f} GiB"


def place(spec: Spec, wi: int) -> Placement:
    """The placement of workload `wi` on the first pool that can host it, or a `PlanError`
    placed at the workload that says why no pool can host it (each pool's reason)."""
    return candidates(spec, wi)[0]


def candidates(spec: Spec, wi: int) -> tuple[Placement, ...]:
    """The placements of workload `wi` on every pool that can host it, in pool order (its
    `nodePool` only, when set); `fleet.layout.choose_pools` picks one. Raises as `place`
    does when none can; a later pool's own error only drops that pool."""
    pools = spec.pools_for(spec.workloads[wi])
    found: list[Placement] = []
    for pool in pools:
        try:
            found.append(_place_on(spec, wi, (pool,)))
        except GpuValuesError:
            continue
    return tuple(found) or (_place_on(spec, wi, pools),)   # none: raises every pool's reason


def _place_on(spec: Spec, wi: int, pools: tuple[NodePool, ...]) -> Placement:
    """The placement of workload `wi` on the first of `pools` that can host it."""
    w = spec.workloads[wi]
    sharing = spec.sharing_for(w)
    at = ("workloads", wi)
    sharing_at = ("workloads", wi, "sharing") if w.sharing else ("sharing",)
    need = _need_gib(spec, w)
    headroom = f" + {spec.memory_headroom:.0%} headroom" if spec.memory_headroom else ""
    asked = f"{_gib(w.memory_gib)}{headroom}" if need else ""     # for messages
    problems: list[tuple[str, str]] = []        # (code, why not this pool)
    for pool in pools:
        gpu = pool.gpu
        nodes = _nodes_per_replica(spec, wi, pool, gpu)
        if nodes > 1:
            placed = _multi_node(spec, wi, pool, gpu, nodes, sharing.mode, problems)
            if placed is not None:
                return placed
            continue
        whole = _whole_gpus(need, w, gpu)
        single = whole == 1 and w.tensor_parallel == 1 and (w.gpus or 1) == 1
        mode = sharing.mode
        if mode == "auto":
            if not single:
                mode = "whole"
            elif pool.mig and gpu.mig_capable and need and _smallest_profile(gpu, need):
                mode = "mig"
            elif need and need * 2 <= usable_gib(gpu):
                mode = "time-slicing"
            else:
                mode = "whole"
        if mode in ("whole", "dra"):
            if w.gpus is not None and whole > w.gpus_per_replica:   # an explicit count is honoured or refused
                problems.append(("GV013", f"{pool.name}: {asked} needs {whole} x {gpu.name} "
                                 f"({_gib(usable_gib(gpu))} usable each), but gpus is {w.gpus}: set "
                                 f"gpus: {whole} (or tensorParallel), or use a GPU with more memory"))
                continue
            if whole > pool.gpus_per_node:
                problems.append(("GV012", f"{pool.name}: a replica needs {whole} GPUs, nodes "
                                 f"have {pool.gpus_per_node}"))
                continue
            why = (f"{mode}: {whole} x {gpu.name} per replica"
                   + (f" (tensorParallel {w.tensor_parallel})" if w.tensor_parallel > 1 else "")
                   + (f" ({asked} needed, {_gib(usable_gib(gpu))} usable per GPU)"
                      if need else ""))
            return Placement(w.name, pool, mode, whole, mode, why=why)
        if not single:
            problems.append(("GV014", f"{pool.name}: {mode} gives a replica part of one GPU, "
                             f"but it needs {whole} GPUs"
                             + (f" ({asked})" if need else "")))
            continue
        if mode == "mig":
            if sharing.mig_strategy != "mixed":
                raise spec_error(SpecError, "migStrategy single is not planned by gpuvalues (it "
                                 "needs one profile on every GPU of a node); use mixed, or write "
                                 "the values by hand", spec, *sharing_at, "migStrategy")
            if not gpu.mig_capable:
                problems.append(("GV014", f"{pool.name}: {gpu.name} has no MIG"))
                continue
            if not pool.mig:
                problems.append(("GV014", f"{pool.name}: MIG is off for this pool (set mig: true)"))
                continue
            if sharing.mig_profile:
                try:
                    prof = gpu.profile(sharing.mig_profile)
                except CatalogError as exc:
                    raise spec_error(CatalogError, exc.message, spec, *sharing_at, "migProfile",
                                     code="GV001") from None
                if need and usable_gib(prof) < need:
                    problems.append(("GV013", f"{pool.name}: {prof.name} has "
                                     f"{_gib(usable_gib(prof))} usable, the model needs "
                                     f"{asked}"))
                    continue
            else:
                if not need:
                    raise spec_error(SpecError, "mig needs memoryGB (to pick the smallest profile "
                                     "that holds the model) or sharing.migProfile", spec, *at)
                prof = _smallest_profile(gpu, need)
                if prof is None:
                    problems.append(("GV013", f"{pool.name}: no MIG profile of {gpu.name} "
                                     f"holds {asked}"))
                    continue
            per = mig.max_instances(gpu, prof.name)
            # a driver branch's name the spec asks for (GB200 1g.24gb) is what the device
            # plugin advertises and mig-parted must be given: keep it
            name = sharing.mig_profile if sharing.mig_profile in prof.aliases else prof.name
            why = (f"mig: {name} ({_gib(usable_gib(prof))} usable"
                   + (f" >= {asked} needed" if need else "")
                   + f"), {per} per {gpu.name}")
            return Placement(w.name, pool, "mig", 1, "mig", mig_profile=name,
                             units_per_gpu=per, why=why)
        # time-slicing / MPS: replicas per GPU from memory, within the device plugin's limits
        if sharing.replicas_per_gpu:
            replicas = sharing.replicas_per_gpu
        elif need:
            replicas = deviceplugin.replicas_per_gpu(gpu, need, mode)
        else:
            raise spec_error(SpecError, f"{mode} needs memoryGB (to size replicas per GPU) or "
                             "sharing.replicasPerGpu", spec, *at)
        if replicas < 2:
            problems.append(("GV013", f"{pool.name}: {_gib(usable_gib(gpu))} holds only "
                             f"{replicas} replica(s) of {asked}; sharing needs >= 2"))
            continue
        if mode == "mps" and replicas > deviceplugin.mps_max_clients(gpu):
            problems.append(("GV014", f"{pool.name}: MPS allows at most "
                             f"{deviceplugin.mps_max_clients(gpu)} clients per {gpu.name}, "
                             f"asked {replicas}"))
            continue
        why = (f"{mode}: {replicas} replicas per {gpu.name}"
               + (f" ({_gib(usable_gib(gpu))} / {asked})" if need else ""))
        return Placement(w.name, pool, "shared", 1, mode, replicas_per_gpu=replicas,
                         units_per_gpu=replicas, renamed=sharing.rename_resource, why=why)
    codes = {c for c, _ in problems}
    raise spec_error(PlanError, f"no node pool can host {w.name!r} with sharing "
                     f"{sharing.mode!r}: " + "; ".join(why for _, why in problems), spec, *at,
                     code=codes.pop() if len(codes) == 1 else "GV014")
