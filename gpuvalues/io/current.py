"""Read a fleet's current MIG layout (`plan --current FILE`) into a `CurrentLayout`.

Two file forms:

1. A mig-parted config plus the node labels that select it (what the cluster runs):

       version: v1
       mig-configs:                        # NVIDIA/mig-parted api/spec/v1 (as deployed)
         a100-1:
           - devices: all
             mig-enabled: true
             mig-devices: {"3g.40gb": 2}
       nodes:                              # node -> its labels (and optionally pool, pods)
         gpu-node-1:
           labels: {nvidia.com/mig.config: a100-1, nvidia.com/device-plugin.config: a100}
           pods: 2                         # GPU pods running there (for "pods displaced")

   A node's pool is `pool:` or its `nvidia.com/device-plugin.config` label (the plans name
   device-plugin configs after pools). `devices: all | [indices]`, `mig-enabled` and
   `device-filter` follow mig-parted's `MigConfigSpec` (api/spec/v1/spec.go): an entry with a
   device-filter applies only when the pool's GPU has one of those PCI IDs.

2. An inventory from a live cluster (`gpuvalues inventory` output, kind: Inventory): each
   node's `nvidia.com/mig.config` label and its MIG devices (GFD's `nvidia.com/mig-<profile>.count`
   labels, `gpu.migProfiles`). GFD counts devices per node, not per GPU, so the node's devices
   are split into per-GPU layouts first-fit (largest instances first, each GPU checked with
   `mig.place`); a node whose devices fit no split is an error.

Bad input raises `PlanError` naming file, line:col and field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from gpuvalues.catalog import get_gpu
from gpuvalues.errors import CatalogError, GpuValuesError, PlanError
from gpuvalues.kube import label_problem, node_name_problem
from gpuvalues.planners.mig import geometry as mig
from gpuvalues.planners.deviceplugin import CONFIG_LABEL
from gpuvalues.planners.scheduling.inventory import KIND as INVENTORY_KIND, Inventory
from gpuvalues.planners.mig.migparted import MIG_CONFIG_LABEL, validate_mig_parted_config
from gpuvalues.planners.mig.replan import CurrentLayout, CurrentNode
from gpuvalues.yamlio.loader import Loaded, format_path, load_yaml, parse_field


# A node runs at most a few hundred pods (the kubelet's default max-pods is 110) and a GPU
# at most 7 MIG instances (mig.place refuses more): bounds far above both, checked before
# any loop runs over a count.
MAX_PODS = 100_000
MAX_INSTANCES = 1024


def _err(loaded: Loaded, path: tuple, msg: str, code: str | None = None, *, key: bool = False) -> PlanError:
    line, col = loaded.position(path, key=key)
    return PlanError(msg, source=loaded.source, line=line, column=col, field=format_path(path) or None,
                     code=code)


def _count(loaded: Loaded, path: tuple, value: Any, what: str, most: int) -> int:
    """`value` as a count in 0..most, else a placed PlanError (GV000 type, GV038 range)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise _err(loaded, path, f"{what} must be a non-negative integer, got {value!r}", "GV000")
    if value < 0:
        raise _err(loaded, path, f"{what} must be a non-negative integer, got {value!r}", "GV038")
    if value > most:
        raise _err(loaded, path, f"{what} must be at most {most:,}, got {value!r}", "GV038")
    return value


def _check_labels(loaded: Loaded, path: tuple, labels: Any) -> Mapping:
    if not isinstance(labels, Mapping):
        raise _err(loaded, path, f"labels must be a mapping of label keys to values, got "
                                 f"{type(labels).__name__}", "GV000")
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            bad_key = label_problem(key, "") is not None     # point at the key, else the value
            raise _err(loaded, path + (key,), problem, "GV037", key=bad_key)
    return labels


def load_current(path: str | Path, pools: Sequence[Any]) -> CurrentLayout:
    """The current layout in `path` for the spec's `pools` (objects with name, gpu, gpus_per_node)."""
    loaded = load_yaml(path)
    data = loaded.data
    if not isinstance(data, Mapping):
        raise _err(loaded, (), "the current layout must be a YAML mapping: a mig-parted config with `nodes`, "
                               f"or an inventory (kind: {INVENTORY_KIND})")
    by_name = {p.name: p for p in pools}
    if data.get("kind") == INVENTORY_KIND:
        return _from_inventory(loaded, by_name)
    if "mig-configs" in data:
        return _from_mig_parted(loaded, by_name)
    raise _err(loaded, (), "expected a mig-parted config (`mig-configs`) with `nodes`, or an inventory "
                           f"(kind: {INVENTORY_KIND})")


def _pool_of(loaded, path, name, explicit, labels, by_name):
    pool = explicit if explicit is not None else labels.get(CONFIG_LABEL)
    if pool is not None and not isinstance(pool, str):
        raise _err(loaded, path + ("pool",), f"node {name!r}: pool must be a pool name (a string), got "
                                             f"{type(pool).__name__}", "GV000")
    if pool is None:
        raise _err(loaded, path, f"node {name!r}: say its pool (`pool:` or the {CONFIG_LABEL} label)")
    if pool not in by_name:
        raise _err(loaded, path, f"node {name!r}: pool {pool!r} is not a node pool of the spec "
                                 f"(cluster.nodePools: {', '.join(by_name)})")
    return by_name[pool]


def _canonical(gpu, devices: Mapping, loaded, path) -> dict[str, int]:
    out: dict[str, int] = {}
    for prof, count in devices.items():
        try:
            name = gpu.profile(str(prof)).name   # accepts driver-branch aliases (GB200 1g.24gb)
        except CatalogError as exc:
            raise _err(loaded, path + (prof,), exc.message) from None
        _count(loaded, path + (prof,), count, "instance count", MAX_INSTANCES)
        out[name] = out.get(name, 0) + count
    return out


def _from_mig_parted(loaded: Loaded, by_name) -> CurrentLayout:
    data = loaded.data
    cfg = {"version": data.get("version"), "mig-configs": data.get("mig-configs")}
    try:
        validate_mig_parted_config(cfg, source=loaded.source)
    except GpuValuesError as exc:
        field = exc.field or "mig-configs"
        parts = tuple(int(p) if p.isdigit() else p for p in field.replace("[", ".").replace("]", "").split("."))
        raise _err(loaded, parts, exc.message) from None
    nodes_doc = data.get("nodes")
    if not isinstance(nodes_doc, Mapping) or not nodes_doc:
        raise _err(loaded, ("nodes",), "list the nodes: `nodes: {<node>: {labels: {nvidia.com/mig.config: <config>, "
                                       + CONFIG_LABEL + ": <pool>}}}`")
    out = []
    for name, nd in nodes_doc.items():
        path = ("nodes", name)
        problem = node_name_problem(name)
        if problem:
            raise _err(loaded, path, problem, "GV037", key=True)
        if not isinstance(nd, Mapping):
            raise _err(loaded, path, f"node {name!r}: expected a mapping with labels (and optionally pool, pods)",
                       "GV000")
        unknown = sorted(set(nd) - {"labels", "pool", "pods"}, key=str)
        if unknown:
            raise _err(loaded, path + (unknown[0],), f"node {name!r}: unknown key {unknown[0]!r} "
                                                     "(a node has labels, pool and pods)", "GV000")
        labels = _check_labels(loaded, path + ("labels",), nd.get("labels", {}))
        pool = _pool_of(loaded, path, name, nd.get("pool"), labels, by_name)
        pods = nd.get("pods")
        if pods is not None:
            _count(loaded, path + ("pods",), pods, "pods", MAX_PODS)
        config = labels.get(MIG_CONFIG_LABEL)
        gpu = get_gpu(pool.gpu)
        gpus: list = [None] * pool.gpus_per_node
        if config is not None:
            if config not in data["mig-configs"]:
                raise _err(loaded, path + ("labels", MIG_CONFIG_LABEL),
                           f"node {name!r}: mig config {config!r} is not in mig-configs")
            for i, entry in enumerate(data["mig-configs"][config]):
                epath = ("mig-configs", config, i)
                filt = entry.get("device-filter")
                if filt is not None:
                    wanted = {f.upper() for f in ([filt] if isinstance(filt, str) else filt)}
                    if not wanted & {f.upper() for f in gpu.device_filter}:
                        continue   # the entry is for another GPU model
                devs = entry.get("devices")
                idxs = range(pool.gpus_per_node) if devs == "all" else devs
                for idx in idxs:
                    if not isinstance(idx, int) or not 0 <= idx < pool.gpus_per_node:
                        raise _err(loaded, epath + ("devices",), f"device index {idx!r} is not a GPU of a "
                                                                 f"{pool.gpus_per_node}-GPU node in pool {pool.name!r}")
                    if entry.get("mig-enabled"):
                        md = _canonical(gpu, entry.get("mig-devices") or {}, loaded, epath + ("mig-devices",))
                        if md and not mig.can_place(gpu, md):
                            raise _err(loaded, epath + ("mig-devices",),
                                       f"{md} cannot be placed on one {gpu.name}")
                        gpus[idx] = md
                    else:
                        gpus[idx] = None
        out.append(CurrentNode(str(name), pool.name, config, tuple(gpus), pods))
    return CurrentLayout(tuple(out), source=loaded.source)


def split_node(gpu, counts: Mapping[str, int], gpus: int) -> list[dict[str, int]] | None:
    """Per-GPU mig-devices for a node's device counts: first-fit, largest instances first."""
    per: list[dict[str, int]] = [dict() for _ in range(gpus)]
    items = sorted(((p, c) for p, c in counts.items() if c), key=lambda pc: -gpu.profile(pc[0]).memory_slices)
    for prof, count in items:
        for _ in range(count):
            for g in per:
                trial = {**g, prof: g.get(prof, 0) + 1}
                if mig.can_place(gpu, trial):
                    g.update(trial)
                    break
            else:
                return None
    return per


def _from_inventory(loaded: Loaded, by_name) -> CurrentLayout:
    try:
        inv = Inventory.from_dict(loaded.data, source=loaded.source)
    except GpuValuesError as exc:
        raise _err(loaded, parse_field(loaded.data, exc.field), exc.message, exc.code) from None
    where = {nd.get("name"): i for i, nd in enumerate(loaded.data.get("nodes") or []) if isinstance(nd, Mapping)}
    out = []
    for node in inv.nodes:
        path = ("nodes", where.get(node.name, 0))
        pool = _pool_of(loaded, path, node.name, None, node.labels, by_name)
        gpu = get_gpu(pool.gpu)
        counts = _canonical(gpu, dict(node.gpu.mig_profiles), loaded, path + ("gpu", "migProfiles"))
        if counts:
            split = split_node(gpu, counts, pool.gpus_per_node)
            if split is None:
                raise _err(loaded, path + ("gpu", "migProfiles"),
                           f"node {node.name!r}: MIG devices {counts} do not fit {pool.gpus_per_node} {gpu.name} GPUs")
            gpus = tuple(split)
        else:
            gpus = (None,) * pool.gpus_per_node
        out.append(CurrentNode(node.name, pool.name, node.labels.get(MIG_CONFIG_LABEL), gpus, None))
    return CurrentLayout(tuple(out), source=loaded.source)


def replan_table(d: Mapping) -> str:
    """The text report of a re-plan (`Replan.to_dict()`)."""
    lines = [f"GPUs used: {d['gpus_used']} (fewest found {d['gpus_optimum']}, certified bound {d['gpus_bound']:g}, "
             f"LP bound {d['gpus_lp_bound']:g})",
             f"nodes changed: {d['nodes_changed']} (certified bound {d['changes_bound']:g}, LP bound "
             f"{d['changes_lp_bound']:g}; {'both minima proven' if d['optimal'] else 'not proven minimal'}), "
             f"{d['nodes_drained']} of them drained; pods displaced: "
             f"{d['pods_displaced']}{' (estimated: one per MIG instance)' if d['pods_estimated'] else ''}"]
    if d["changes"]:
        lines.append("changes:")
        lines += [f"  {c['node']}: {c['from'] or '(unconfigured)'} -> {c['to']}" for c in d["changes"]]
    for u in d.get("unlisted_changes", ()):
        lines.append(f"  {u['nodes']} unlisted node(s) of pool {u['pool']}: (unconfigured) -> {u['to']}")
    for w in d["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"
