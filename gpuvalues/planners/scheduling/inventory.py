"""A cluster's GPU nodes as one frozen `Inventory`, from whichever source you have.

Sources:

* `from_kubectl_json(obj)`: the output of `kubectl get nodes -o json` (a List/NodeList,
  or one Node). GPU facts come from GPU Feature Discovery labels (NVIDIA/k8s-device-plugin
  `docs/gpu-feature-discovery/README.md`, `internal/lm/resource.go`): `nvidia.com/gpu.product`,
  `.count`, `.memory` (MiB), `mig.capable`, `mig.strategy`, `nvidia.com/mig-<profile>.count`
  (mixed strategy), `<model>-MIG-<profile>` products (single strategy), `gpu.replicas` and
  `gpu.sharing-strategy`; capacity/allocatable and taints come from the Node itself.
* `from_nvidia_smi({node: (query_csv, topo_text)})`: per node, the output of
  `nvidia-smi --query-gpu=index,name,memory.total,mig.mode.current --format=csv` and,
  optionally, `nvidia-smi topo -m` (parsed by `gpuvalues.planners.scheduling.topology`).
* `from_kubernetes(kubeconfig=..., context=...)`: a live cluster through the official
  client; the same parsing as `from_kubectl_json`.
* `Inventory.from_dict` / `to_dict`: the documented format, schemas/inventory.schema.json.

Units inside the library: `cpu` in millicores, `memory`/`ephemeral-storage` in bytes,
everything else a plain integer count (extended resources are integers by definition).
In dicts, quantities use Kubernetes notation (`cpu: "500m"`, `memory: 64Gi`, `cpu: 32`).
"""
from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from gpuvalues.catalog import gfd_product_label
from gpuvalues.csvtext import Cell, CsvSyntaxError, end_column, split_line
from gpuvalues.errors import GpuValuesError, InventoryError
from gpuvalues.kube import label_problem, node_name_problem, parse_quantity
from gpuvalues.planners.scheduling.topology import DEFAULT_TOPOLOGY_KEY, Topology, nvlink_size, parse_topo_matrix
from gpuvalues.bundle import INVENTORY_SCHEMA
from gpuvalues.schemas import is_valid, load_schema, validator_for
from gpuvalues.yamlio.loader import format_path

API_VERSION = "gpuvalues/v1"
KIND = "Inventory"

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Bounds (GV038), checked where a number is read so nothing downstream sees a 401-digit
# count: any quantity at most 2^62 (bytes up to 4 EiB; what schemas/inventory.schema.json
# allows for integers), an extended resource at most 1024 GPUs x 1024 sharing replicas,
# and the GFD counts (`nvidia.com/gpu.count`, `mig-<profile>.count`, `gpu.replicas`) at
# most 1024, `gpu.memory` at most 2^24 MiB, as the schema's `gpu` fields.
MAX_QUANTITY = 2 ** 62
# Nodes in one inventory: Kubernetes supports clusters of up to 5,000 nodes (kubernetes.io,
# "Considerations for large clusters"); twice that, so every loop over nodes is bounded.
MAX_NODES = 10_000
MAX_EXTENDED = 1024 * 1024
MAX_GFD_COUNT = 1024
MAX_GPU_MEMORY_MIB = 2 ** 24
# Resources kept from a Node: everything the GPU filters need. Other vendors' extended
# resources are kept too (a pod may request them); hugepages and the like are not.
_KEEP_BASIC = ("cpu", "memory", "pods", "ephemeral-storage")


def resource_amount(name: str, value: Any) -> int:
    """A resource quantity in library units (cpu millicores, bytes, or a count).

    Raises a GpuValuesError (a ValueError) for a malformed or negative quantity, or a
    fractional amount of a countable (extended) resource.
    """
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return _resource_amount_cached(name, value)   # 5,000 nodes repeat a few quantities
    return _resource_amount(name, value)


@functools.lru_cache(maxsize=4096)
def _resource_amount_cached(name: str, value: str | int) -> int:
    return _resource_amount(name, value)


def _resource_amount(name: str, value: Any) -> int:
    q = parse_quantity(value)
    if q < 0:
        raise InventoryError(f"{name}: negative quantity {value!r}", code="GV038")
    most = MAX_EXTENDED if "/" in name and not name.startswith("hugepages-") else MAX_QUANTITY
    if q > most * (1000 if name == "cpu" else 1):
        shown = str(value) if len(str(value)) <= 24 else str(value)[:21] + "..."
        raise InventoryError(f"{name}: quantity {shown} is out of range (at most {most:,}"
                             f"{' cores' if name == 'cpu' else ''})", code="GV038")
    if name == "cpu":
        q *= 1000
        return int(q) if q.denominator == 1 else int(q) + 1  # Kubernetes rounds up to 1m
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        return int(q) if q.denominator == 1 else int(q) + 1
    if q.denominator != 1:
        raise InventoryError(f"{name}: {value!r} is not an integer; extended resources are whole numbers")
    return int(q)


def format_amount(name: str, amount: int) -> int | str:
    """Inverse of `resource_amount`: a quantity in Kubernetes notation."""
    if name == "cpu":
        return amount // 1000 if amount % 1000 == 0 else f"{amount}m"
    return amount


# isinstance(x, typing.Mapping) takes the slow ABC path; dicts (what JSON gives) first.
_MAPS = (dict, Mapping)
_MIG_COUNT = re.compile(r"nvidia\.com/mig-(.+)\.count")


def _frozen_map(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class Taint:
    """A node taint; `effect` is NoSchedule, PreferNoSchedule or NoExecute."""

    key: str
    effect: str
    value: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain data in the inventory file format."""
        d = {"key": self.key, "effect": self.effect}
        if self.value:
            d["value"] = self.value
        return d


@dataclass(frozen=True)
class GpuInfo:
    """What GPU Feature Discovery (or nvidia-smi) says about a node's GPUs.

    `count` is physical GPUs (`nvidia.com/gpu.count`; for the single MIG strategy GFD
    reports MIG devices there, and so do we). `mig_profiles` maps a MIG profile
    (`1g.10gb`) to the number of such devices on the node. `replicas` is per-GPU sharing
    replicas (1 = no sharing).
    """

    product: str | None = None
    count: int = 0
    memory_mib: int | None = None
    mig_capable: bool | None = None
    mig_strategy: str = "none"
    mig_profiles: Mapping[str, int] = field(default_factory=dict)
    replicas: int = 1
    sharing_strategy: str = "none"

    def __post_init__(self) -> None:
        object.__setattr__(self, "mig_profiles", _frozen_map(self.mig_profiles))

    def to_dict(self) -> dict[str, Any]:
        """Plain data in the inventory file format (schemas/inventory.schema.json)."""
        d: dict[str, Any] = {"count": self.count}
        if self.product is not None:
            d["product"] = self.product
        if self.memory_mib is not None:
            d["memoryMiB"] = self.memory_mib
        if self.mig_capable is not None:
            d["migCapable"] = self.mig_capable
        d["migStrategy"] = self.mig_strategy
        if self.mig_profiles:
            d["migProfiles"] = dict(sorted(self.mig_profiles.items()))
        d["replicas"] = self.replicas
        d["sharingStrategy"] = self.sharing_strategy
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GpuInfo":
        """The inverse of `to_dict`."""
        return cls(product=d.get("product"), count=int(d.get("count", 0)), memory_mib=d.get("memoryMiB"),
                   mig_capable=d.get("migCapable"), mig_strategy=d.get("migStrategy", "none"),
                   mig_profiles=dict(d.get("migProfiles", {})), replicas=int(d.get("replicas", 1)),
                   sharing_strategy=d.get("sharingStrategy", "none"))


@dataclass(frozen=True)
class Node:
    """One node: labels, taints, capacity and allocatable, GPU facts, optional topology.

    `capacity`/`allocatable` map resource names to amounts in library units (see the
    module docstring). `topology` is present when the inventory came with `topo -m`.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    capacity: Mapping[str, int] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    gpu: GpuInfo = field(default_factory=GpuInfo)
    topology: Topology | None = None
    unschedulable: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_map(self.labels))
        object.__setattr__(self, "capacity", _frozen_map(self.capacity))
        object.__setattr__(self, "allocatable", _frozen_map(self.allocatable))
        object.__setattr__(self, "taints", tuple(self.taints))

    @property
    def gpu_resources(self) -> dict[str, int]:
        """Allocatable `nvidia.com/*` resources (whole GPUs, MIG devices, shared replicas)."""
        return {k: v for k, v in self.allocatable.items() if k.startswith("nvidia.com/")}

    @property
    def nvlink_group(self) -> int:
        """GPUs in the largest NVLink clique: from `topology`, else from the topology label."""
        if self.topology is not None:
            return self.topology.largest_nvlink_clique()
        return nvlink_size(self.labels.get(DEFAULT_TOPOLOGY_KEY, "")) or 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data in the inventory file format (schemas/inventory.schema.json)."""
        d: dict[str, Any] = {"name": self.name}
        if self.labels:
            d["labels"] = dict(sorted(self.labels.items()))
        if self.taints:
            d["taints"] = [t.to_dict() for t in self.taints]
        if self.unschedulable:
            d["unschedulable"] = True
        d["capacity"] = {k: format_amount(k, v) for k, v in sorted(self.capacity.items())}
        d["allocatable"] = {k: format_amount(k, v) for k, v in sorted(self.allocatable.items())}
        d["gpu"] = self.gpu.to_dict()
        if self.topology is not None:
            d["topology"] = self.topology.to_dict()
        return d

    def to_k8s_node(self) -> dict[str, Any]:
        """A Kubernetes `v1/Node` object with these labels, taints and resources.

        For fake nodes (kwok) in tests; status carries capacity and allocatable.
        """
        node: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "spec": {},
            "status": {
                "capacity": {k: str(format_amount(k, v)) for k, v in self.capacity.items()},
                "allocatable": {k: str(format_amount(k, v)) for k, v in self.allocatable.items()},
            },
        }
        if self.taints:
            node["spec"]["taints"] = [t.to_dict() for t in self.taints]
        if self.unschedulable:
            node["spec"]["unschedulable"] = True
        return node


@dataclass(frozen=True)
class Inventory:
    """The GPU-relevant view of a cluster: its nodes, in a stable (name) order."""

    nodes: tuple[Node, ...]
    source: str | None = field(default=None, compare=False)  # where it was read from, for messages

    def __post_init__(self) -> None:
        nodes = tuple(sorted(self.nodes, key=lambda n: n.name))
        dupes = sorted(name for name, k in Counter(n.name for n in nodes).items() if k > 1)
        if dupes:
            raise InventoryError(f"node names must be unique; repeated: {', '.join(dupes)}", source=self.source)
        object.__setattr__(self, "nodes", nodes)

    def node(self, name: str) -> Node:
        """The node called `name`, else an InventoryError."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise InventoryError(f"no node named {name!r} in the inventory", source=self.source)

    def total(self, resource: str) -> int:
        """Sum of allocatable `resource` over all schedulable nodes."""
        return sum(n.allocatable.get(resource, 0) for n in self.nodes if not n.unschedulable)

    def to_dict(self) -> dict[str, Any]:
        """The documented dict form (schemas/inventory.schema.json)."""
        return {"apiVersion": API_VERSION, "kind": KIND, "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None) -> "Inventory":
        """Validate against schemas/inventory.schema.json and build the Inventory."""
        if isinstance(data, _MAPS) and isinstance(data.get("nodes"), list) and len(data["nodes"]) > MAX_NODES:
            raise InventoryError(too_many_nodes(len(data["nodes"])), source=source, field=f"nodes[{MAX_NODES}]",
                                 code="GV038")
        _validate(data, source)
        nodes = []
        for i, nd in enumerate(data["nodes"]):
            where = f"nodes[{i}]"
            capacity = _amounts(nd.get("capacity") or {}, source, f"{where}.capacity")
            allocatable = _amounts(nd.get("allocatable") or {}, source, f"{where}.allocatable")
            if "allocatable" not in nd:
                allocatable = dict(capacity)
            labels = dict(nd.get("labels") or {})
            _check_node_name(nd["name"], source, f"{where}.name")
            _check_labels(labels, source, f"{where}.labels")
            gpu = GpuInfo.from_dict(nd["gpu"]) if "gpu" in nd else _gpu_from_labels(labels, allocatable, source,
                                                                                     where)
            topology = None
            if "topology" in nd:
                try:
                    topology = Topology.from_dict(nd["topology"])
                    topology.nvlink_cliques()     # here, so a graph past the search bound is placed (GV075)
                except GpuValuesError as exc:
                    raise InventoryError(exc.message, source=source, field=f"{where}.topology",
                                         code=exc.code) from None
            taints = tuple(Taint(t["key"], t["effect"], t.get("value", "")) for t in nd.get("taints") or ())
            nodes.append(Node(name=nd["name"], labels=labels, taints=taints, capacity=capacity,
                              allocatable=allocatable, gpu=gpu, topology=topology,
                              unschedulable=bool(nd.get("unschedulable", False))))
        check_unique_names([n.name for n in nodes], source, "nodes[{}].name")
        return cls(tuple(nodes), source=source)


def _validate(data: Any, source: str | None) -> None:
    schema = load_schema(INVENTORY_SCHEMA)
    if is_valid(schema, data):
        return
    errors = sorted(validator_for(schema).iter_errors(data),
                    key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        path = format_path(err.absolute_path) if err.absolute_path else None
        raise InventoryError(err.message, source=source, field=path, code="GV000")


# -- GFD labels ------------------------------------------------------------------------
def _int_label(labels: Mapping[str, str], key: str, most: int = MAX_GFD_COUNT, least: int = 0) -> int | None:
    """A GFD label that holds a count, or None when absent. GFD writes decimal integers
    (`internal/lm/resource.go`: strconv.Itoa); anything else is a forged or broken label and
    an InventoryError naming it (field `labels.<key>`), not a silent default."""
    value = labels.get(key)
    if value is None:
        return None
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19):
        raise InventoryError(f"{value!r} is not a count (GFD writes a decimal integer)",
                             field=f"labels.{key}", code="GV000")
    n = int(value)
    if not least <= n <= most:
        raise InventoryError(f"{n:,} is out of range ({least}..{most:,})",
                             field=f"labels.{key}", code="GV038")
    return n


def gpu_info_from_labels(labels: Mapping[str, str], allocatable: Mapping[str, int]) -> GpuInfo:
    """GPU facts from GFD labels, falling back to the node's allocatable resources."""
    product = labels.get("nvidia.com/gpu.product")
    strategy = labels.get("nvidia.com/mig.strategy", "none")
    profiles: dict[str, int] = {}
    for key, _value in labels.items():
        m = _MIG_COUNT.fullmatch(key) if key.startswith("nvidia.com/mig-") else None
        if m:
            profiles[m.group(1)] = _int_label(labels, key) or 0   # the key is there: a count
    for res, amount in allocatable.items():
        if res.startswith(MIG_PREFIX):  # no count label: devices = resource / sharing replicas
            profile = res[len(MIG_PREFIX):].removesuffix(".shared")
            replicas = _int_label(labels, f"nvidia.com/mig-{profile}.replicas", least=1) or 1
            profiles.setdefault(profile, amount // replicas)
    count = _int_label(labels, "nvidia.com/gpu.count")
    if strategy == "single" and product and "-MIG-" in product:
        profile = product.split("-MIG-", 1)[1]
        if profile != "INVALID":
            profiles[profile] = count if count is not None else allocatable.get(GPU, 0)
    if count is None:
        count = allocatable.get(GPU, 0) or allocatable.get(GPU + ".shared", 0)
    mig_capable = labels.get("nvidia.com/mig.capable")
    return GpuInfo(
        product=product,
        count=count,
        memory_mib=_int_label(labels, "nvidia.com/gpu.memory", MAX_GPU_MEMORY_MIB),
        mig_capable=None if mig_capable is None else mig_capable == "true",
        mig_strategy=strategy if strategy in ("none", "single", "mixed") else "none",
        mig_profiles=profiles,
        # GFD labels MIG-mixed nodes nvidia.com/gpu.replicas=0 (the e2e fleet's upstream GFD)
        replicas=_int_label(labels, "nvidia.com/gpu.replicas", least=0) or 1,
        sharing_strategy=labels.get("nvidia.com/gpu.sharing-strategy", "none"),
    )


# -- kubectl -----------------------------------------------------------------------------
def _node_from_k8s(obj: Mapping[str, Any], source: str | None, where: str) -> Node:
    def mapping(value: Any, field: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, _MAPS):
            raise InventoryError(f"expected a map, found {type(value).__name__}", source=source,
                                 field=f"{where}.{field}")
        return value

    meta = mapping(obj.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InventoryError("node without a metadata.name string", source=source, field=f"{where}.metadata.name")
    _check_node_name(name, source, f"{where}.metadata.name")
    spec = mapping(obj.get("spec"), "spec")
    status = mapping(obj.get("status"), "status")

    def resources(key: str) -> dict[str, int]:
        out = {}
        for res, value in mapping(status.get(key), f"status.{key}").items():
            if isinstance(res, str) and (res in _KEEP_BASIC or "/" in res):
                try:
                    out[res] = resource_amount(res, value)
                except GpuValuesError as exc:
                    raise InventoryError(exc.message.removeprefix(f"{res}: "), source=source,
                                         field=f"{where}.status.{key}.{res}",
                                         code=exc.code) from None
        return out

    capacity = resources("capacity")
    allocatable = resources("allocatable") if "allocatable" in status else dict(capacity)
    taints = []
    raw_taints = spec.get("taints") or ()
    if not isinstance(raw_taints, (list, tuple)):
        raise InventoryError("expected a list", source=source, field=f"{where}.spec.taints")
    for j, t in enumerate(raw_taints):
        if not isinstance(t, _MAPS) or t.get("effect") not in TAINT_EFFECTS or not isinstance(t.get("key"), str) \
                or not t.get("key") or not isinstance(t.get("value") or "", str):
            raise InventoryError(f"taint needs a key and an effect in {TAINT_EFFECTS}",
                                 source=source, field=f"{where}.spec.taints[{j}]")
        # core/validation ValidateTaints: the key a qualified name, the value a label value
        problem = label_problem(t["key"], t.get("value") or "")
        if problem:
            raise InventoryError(f"taint: {problem}", source=source, field=f"{where}.spec.taints[{j}]",
                                 code="GV037")
        taints.append(Taint(t["key"], t["effect"], t.get("value") or ""))
    labels = dict(mapping(meta.get("labels"), "metadata.labels"))
    bad = [k for k, v in labels.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise InventoryError(f"label {bad[0]!r}: keys and values must be strings", source=source,
                             field=f"{where}.metadata.labels")
    _check_labels(labels, source, f"{where}.metadata.labels")
    return Node(name=name, labels=labels, taints=tuple(taints), capacity=capacity, allocatable=allocatable,
                gpu=_gpu_from_labels(labels, allocatable, source, f"{where}.metadata"),
                unschedulable=bool(spec.get("unschedulable")))


def _amounts(resources: Mapping[str, Any], source: str | None, field: str) -> dict[str, int]:
    out = {}
    for k, v in resources.items():
        try:
            out[k] = resource_amount(k, v)
        except GpuValuesError as exc:
            raise InventoryError(exc.message.removeprefix(f"{k}: "), source=source, field=f"{field}.{k}",
                                 code=exc.code) from None
    return out


def _check_node_name(name: str, source: str | None, field: str) -> None:
    problem = node_name_problem(name)
    if problem:
        raise InventoryError(problem, source=source, field=field, code="GV037")


def _check_labels(labels: Mapping[str, Any], source: str | None, field: str) -> None:
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            raise InventoryError(problem, source=source, field=f"{field}.{key}", code="GV037")


def _gpu_from_labels(labels: Mapping[str, str], allocatable: Mapping[str, int], source: str | None,
                     where: str) -> GpuInfo:
    """gpu_info_from_labels, its errors placed at the node (`<where>.labels.<key>`)."""
    try:
        return gpu_info_from_labels(labels, allocatable)
    except InventoryError as exc:
        raise InventoryError(exc.message, source=source, field=f"{where}.{exc.field}" if exc.field else where,
                             code=exc.code) from None


def from_kubectl_json(data: Any, source: str | None = None) -> Inventory:
    """Inventory from `kubectl get nodes -o json` (text or parsed), or a single Node."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise InventoryError(f"not JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno) from None
    if not isinstance(data, _MAPS):
        raise InventoryError("expected a JSON object (kubectl get nodes -o json)", source=source)
    if data.get("kind") == "Node":
        items = [data]
    elif isinstance(data.get("items"), list):
        items = data["items"]
    else:
        raise InventoryError("expected a NodeList/List with items, or a Node", source=source, field="kind")
    if len(items) > MAX_NODES:
        raise InventoryError(too_many_nodes(len(items)), source=source, field=f"items[{MAX_NODES}]",
                             code="GV038")
    nodes = tuple(node_from_kubectl_item(item, source, i) for i, item in enumerate(items))
    check_unique_names([n.name for n in nodes], source, "items[{}].metadata.name")
    return Inventory(nodes, source=source)


def check_unique_names(names: list[str], source: str | None, field: str) -> None:
    """A node name given twice, placed at its second occurrence (GV018)."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise InventoryError(f"node {name!r} is listed twice; node names are unique", source=source,
                                 field=field.format(i), code="GV018")
        seen.add(name)


def node_from_kubectl_item(item: Any, source: str | None, index: int) -> Node:
    """One Node of `kubectl get nodes -o json`'s items (`items[index]`, for messages)."""
    if not isinstance(item, _MAPS) or item.get("kind", "Node") != "Node":
        raise InventoryError("list item is not a Node", source=source, field=f"items[{index}]")
    try:
        return _node_from_k8s(item, source, f"items[{index}]")
    except (AttributeError, TypeError):   # a safety net: every field's type is checked above
        raise InventoryError("malformed Node: a field holds the wrong type (a list where a mapping "
                             "belongs, or the like)", source=source, field=f"items[{index}]") from None


def too_many_nodes(n: int | str) -> str:
    """The message for an inventory past MAX_NODES."""
    return (f"{n} nodes; gpuvalues reads inventories of up to {MAX_NODES:,} nodes (Kubernetes supports "
            "clusters of up to 5,000)")


# -- nvidia-smi ------------------------------------------------------------------------------
def _mib(value: str) -> int:
    m = re.fullmatch(r"\s*(\d{1,12})\s*(MiB)?\s*", value)
    if not m:
        raise InventoryError(f"{value!r} is not '<n> MiB'")
    return int(m.group(1))


def node_from_nvidia_smi(name: str, query_csv: str, topo_text: str | None = None, *,
                         labels: Mapping[str, str] | None = None, taints: Iterable[Taint] = (),
                         source: str | None = None, topology_key: str = DEFAULT_TOPOLOGY_KEY,
                         topo_source: str | None = None) -> Node:
    """One node from `nvidia-smi --query-gpu=index,name,memory.total[,mig.mode.current] --format=csv`.

    The CSV needs its header line (no `noheader`). `topo_text` (`nvidia-smi topo -m`,
    read from `topo_source`) adds the topology and its labels. Labels follow GFD so fit
    and the chart's selectors see the same keys as on a real cluster. Errors name the
    line:col and the column's header name.
    """
    def fail(msg: str, lineno: int, col: int, field: str | None) -> InventoryError:
        return InventoryError(msg, source=source, line=lineno, column=col, field=field)

    def split(line: str, lineno: int) -> list[Cell]:
        try:
            return split_line(line)
        except CsvSyntaxError as exc:
            raise fail(str(exc), lineno, exc.column, None) from None

    lines = query_csv.splitlines()
    first = next((k for k, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise fail("empty nvidia-smi CSV", 1, 1, "header")
    head_cells = split(lines[first], first + 1)
    header = [re.sub(r"\s*\[.*?\]\s*$", "", c.value) for c in head_cells]
    if "name" not in header or "memory.total" not in header:
        raise fail("CSV header must include name and memory.total "
                   "(nvidia-smi --query-gpu=index,name,memory.total,mig.mode.current --format=csv)",
                   first + 1, 1, "header")
    gpus = []
    for lineno, line in enumerate(lines[first + 1:], start=first + 2):
        if not line.strip():
            continue
        row = split(line, lineno)
        if not "".join(c.value for c in row):
            continue
        if len(row) != len(header):
            at = row[len(header)].column if len(row) > len(header) else end_column(line)
            missing = header[len(row)] if len(row) < len(header) else None
            raise fail(f"{len(row)} fields, the header has {len(header)}", lineno, at, missing)
        rec = {h: c for h, c in zip(header, row)}
        try:
            mem = _mib(rec["memory.total"].value)
        except ValueError as exc:
            raise fail(str(exc), lineno, rec["memory.total"].column, "memory.total") from None
        mig = rec["mig.mode.current"].value if "mig.mode.current" in rec else None
        if mig == "Enabled":
            raise fail("MIG is enabled on this GPU and --query-gpu does not list MIG devices; "
                       "build this node from `kubectl get nodes -o json` instead",
                       lineno, rec["mig.mode.current"].column, "mig.mode.current")
        gpus.append((rec["name"].value, mem, mig, lineno, rec["name"].column))
    if not gpus:
        raise fail("no GPU rows in the nvidia-smi CSV", len(lines), 1, None)
    products = sorted({g[0] for g in gpus})
    if len(products) > 1:
        other = next(g for g in gpus if g[0] != gpus[0][0])
        raise fail(f"mixed GPU models on one node ({', '.join(products)}); "
                   "GFD labels describe one model per node", other[3], other[4], "name")
    count = len(gpus)
    node_labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": gfd_product_label(products[0]),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(min(g[1] for g in gpus)),
    }
    migs = {g[2] for g in gpus}
    if migs & {"Enabled", "Disabled"}:
        node_labels["nvidia.com/mig.capable"] = "true"
    elif migs and migs <= {"[N/A]", "N/A"}:
        node_labels["nvidia.com/mig.capable"] = "false"
    topology = None
    if topo_text is not None:
        topology = parse_topo_matrix(topo_text, source=topo_source or (f"{source}:topo" if source else f"{name}:topo"))
        if len(topology.gpus) != count:
            raise fail(f"topo -m shows {len(topology.gpus)} GPUs but the CSV lists {count}",
                       gpus[-1][3], 1, "topology")
        try:
            node_labels.update(topology.labels(key=topology_key))
        except GpuValuesError as exc:     # the NVLink graph past the clique search's bound (GV075)
            raise InventoryError(exc.message, source=topo_source or source, field="topology", code=exc.code) from None
    node_labels.update(labels or {})
    resources = {GPU: count}
    return Node(name=name, labels=node_labels, taints=tuple(taints), capacity=resources, allocatable=resources,
                gpu=gpu_info_from_labels(node_labels, resources), topology=topology)


def from_nvidia_smi(per_node: Mapping[str, tuple[str, str | None]], source: str | None = None) -> Inventory:
    """Inventory from `{node name: (query CSV text, topo -m text or None)}`."""
    nodes = [node_from_nvidia_smi(name, csv_text, topo, source=f"{source}:{name}" if source else name)
             for name, (csv_text, topo) in per_node.items()]
    return Inventory(tuple(nodes), source=source)


