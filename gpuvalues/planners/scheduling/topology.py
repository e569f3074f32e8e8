"""GPU topology from `nvidia-smi topo -m`: links, NVLink cliques, node labels, GPU choice.

`parse_topo_matrix(text)` reads the matrix in every form seen in public bug reports:
tab- or space-separated, with or without the leading tab, NIC columns named `NICn` or
`mlx5_n`, `CPU Affinity` / `NUMA Affinity` / `GPU NUMA ID` present, absent, empty or
`N/A`, preamble lines (a shell prompt, "76 NICs found in the topology, only displaying
56 in the matrix.", `#` comment headers of our fixture files), the Legend and NIC Legend
sections, ANSI escape codes, trailing spaces, and the old `SOC` spelling of `SYS`.

`Topology.best_gpu_set(n)` answers "which GPUs would NVIDIA's device plugin give a pod
asking for n GPUs" the way the plugin's best-effort policy does
(NVIDIA/go-gpuallocator `gpuallocator/besteffort_policy.go` @876e7b7):

* pair score = PCIe proximity (same board 60, PIX 50, PXB 40, PHB 30, NODE 20, SYS 10)
  plus 100 per NVLink whose remote end is the peer GPU;
* set score = sum of its pair scores;
* it partitions *all* available GPUs into sets of size n (padding the last one), keeps
  the partition with the highest total score (the first such in its enumeration order),
  and returns that partition's best set -- so it prefers the choice that leaves the
  rest of the node best connected for later pods, not just the best set right now.

The plugin uses this policy only when every available device is a whole GPU without
sharing replicas (k8s-device-plugin `internal/rm/nvml_manager.go`); with time-slicing,
MPS or MIG it falls back to its simple distributed/packed policies, which this does not
model.

What `topo -m` cannot show, and what we assume instead:

* An NVLinked pair's cell reads `NV<k>` and hides its PCIe level. We score that part as
  NODE (20) when both GPUs report the same NUMA affinity and SYS (10) otherwise.
* NVSwitch machines (DGX/HGX A100, H100, ...): every GPU's NVLinks end at a switch, so
  the plugin's NVLink count (remote PCI bus id == peer GPU; upstream comment
  "TODO(klueska): Handle NVSwitch semantics") is 0 for every pair, and its choice
  falls back to PCIe/NUMA proximity. We detect a switch when a GPU's NVLink counts to
  its peers add up to more than 18 (no GPU has more than 18 NVLink ports, so such
  counts cannot be direct links) and score those links as 0 too, so `best_gpu_set`
  packs GPUs by NUMA node there, as the plugin does. Every set is NVLink-connected on
  such a machine anyway. `count_nvswitch_links=True` scores them as direct NVLinks
  instead (what patched allocators such as coldzerofear/vgpu-manager#70 do).
* The "same board" level (NVML TOPOLOGY_INTERNAL) has no `topo -m` spelling.
"""
from __future__ import annotations

import itertools
import math
import operator
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar, cast

from gpuvalues.errors import GpuValuesError, TopologyParseError
from gpuvalues.kube import is_label_key, is_label_value

# NVML topology levels as `topo -m` prints them, closest first.
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
# go-gpuallocator besteffort_policy.go calculateGPUPairScore (CrossCPU=SYS ... SameBoard).
PCIE_SCORE = {"SAME_BOARD": 60, "PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
NVLINK_SCORE = 100  # per NVLink, 1..18 links
MAX_NVLINKS_PER_GPU = 18  # Hopper/Blackwell have 18 NVLink ports, A100 12, V100 6
MAX_NUMA_NODES = 1024     # Linux's MAX_NUMNODES is at most 1024 (CONFIG_NODES_SHIFT 10)
# The most GPUs one matrix may name: far past any node (16 GPUs) or NVLink domain (72), and
# where the whole `topo` command stays under a second of CPU (bench/bench_topo_best.py).
MAX_TOPOLOGY_GPUS = 1024

_T = TypeVar("_T")
DEFAULT_TOPOLOGY_KEY = "nvidia.com/gpu.topology"
DEFAULT_LABEL_PREFIX = "topology.gpu-inference.io/"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_AFFINITY_LABELS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER = re.compile(r"(?:^|\s)GPU0(?:\s|$)")
_GPU_COL = re.compile(r"^GPU(\d+)$")
_PLAIN_CELLS = frozenset(("X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC"))
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


# The most steps the NVLink clique search may take (one step: a GPU weighed as pivot or
# branched on; picking islands from overlapping cliques counts each clique it looks at).
# Real NVLink graphs are unions of a few cliques and take 2 to 5 steps per GPU (1,024
# GPUs: 2,047 as one NVSwitch clique, 4,594 as islands of 8); a graph built to have
# exponentially many maximal cliques (3^(n/3), Moon and Moser) is refused past this
# bound instead of running for hours (GV075).
MAX_CLIQUE_WORK = 200_000


def _is_nvlink(cell: str) -> bool:
    return cell[:2] == "NV" and cell[2:].isdigit()


def _bits(mask: int) -> list[int]:
    """Positions of the set bits of `mask`, ascending (str.find over its binary digits:
    C speed for the 1,024-bit masks of a large node)."""
    digits = bin(mask)[:1:-1]
    out = []
    k = digits.find("1")
    while k >= 0:
        out.append(k)
        k = digits.find("1", k + 1)
    return out


def _too_irregular(gpus: int) -> GpuValuesError:
    return GpuValuesError(f"topology: the NVLink links of these {gpus} GPUs form more maximal cliques than "
                          f"gpuvalues searches ({MAX_CLIQUE_WORK:,} steps); real nodes' NVLink graphs are a "
                          "few cliques (NVSwitch, islands, bridged pairs)", code="GV075")


def _maximal_cliques(adj: Sequence[int], n: int) -> list[int]:
    """Every maximal clique (as a bit mask, size >= 2) of the graph whose vertex v is
    joined to the vertices of `adj[v]`: Bron-Kerbosch with Tomita's pivot, on an explicit
    stack (a 1,024-GPU NVSwitch clique is 1,024 levels deep; Python's recursion stops at
    1,000), at most MAX_CLIQUE_WORK steps."""
    found: list[int] = []
    work = 0
    # a frame: (R, P, X, branch vertices left to try); its P and X shrink as it branches
    stack: list[list[int]] = [[0, (1 << n) - 1, 0, -1]]
    while stack:
        frame = stack[-1]
        r, p, x, todo = frame
        if todo == -1:                       # first visit: report or pick a pivot
            if not p:
                stack.pop()
                if not x and r.bit_count() >= 2:
                    found.append(r)
                continue
            size, pivot, most = -1, 0, p.bit_count()
            rest = p | x
            while rest:                      # lazily: the first vertex often cannot be beaten
                low = rest & -rest
                rest ^= low
                u = low.bit_length() - 1
                work += 1
                k = (adj[u] & p).bit_count()
                if k > size:
                    size, pivot = k, u
                    if k >= most - (p >> u & 1):
                        break
            if work > MAX_CLIQUE_WORK:
                raise _too_irregular(n)
            todo = frame[3] = p & ~adj[pivot]
        if not todo:
            stack.pop()
            continue
        low = todo & -todo
        v = low.bit_length() - 1
        frame[3] = todo ^ low
        frame[1] = p & ~low
        frame[2] = x | low
        work += 1
        stack.append([r | low, p & adj[v], x & adj[v], -1])
    return found


@dataclass(frozen=True)
class Topology:
    """GPU-to-GPU links of one node, as `nvidia-smi topo -m` shows them.

    `links[i][j]` is the cell between the i-th and j-th GPU of `gpus` (`X` on the
    diagonal, `NV<k>`, `PIX`, `PXB`, `PHB`, `NODE` or `SYS`). Affinity tuples hold one
    entry per GPU, `None` when the column is absent, empty or `N/A`.
    """

    gpus: tuple[int, ...]
    links: tuple[tuple[str, ...], ...]
    cpu_affinity: tuple[str | None, ...] = ()
    numa_affinity: tuple[str | None, ...] = ()
    gpu_numa_id: tuple[str | None, ...] = ()
    nics: tuple[str, ...] = ()
    gpu_nic_links: tuple[tuple[str, ...], ...] = ()
    nic_names: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if len(self.links) != n or any(len(row) != n for row in self.links):
            raise GpuValuesError(f"topology: links must be a {n}x{n} matrix")
        # Whole-row checks at C speed (a 1,024-GPU node has 1,048,576 cells); the cell-by-cell
        # loop below runs only to name the first bad cell.
        cells: set[str] = set()
        for row in self.links:
            cells.update(row)
        ok = (all(row[i] == "X" and row.count("X") == 1 for i, row in enumerate(self.links))
              and all(c in _PLAIN_CELLS and c != "SOC" or _is_nvlink(c) for c in cells)
              and tuple(zip(*self.links)) == tuple(self.links))
        if not ok:
            self._name_bad_cell()
        for name in ("cpu_affinity", "numa_affinity", "gpu_numa_id"):
            value = getattr(self, name)
            if value and len(value) != n:
                raise GpuValuesError(f"topology: {name} needs one entry per GPU")

    def _name_bad_cell(self) -> None:
        n = len(self.gpus)
        for i in range(n):
            if self.links[i][i] != "X":
                raise GpuValuesError(f"topology: GPU{self.gpus[i]} must link to itself as X")
            for j in range(n):
                cell = self.links[i][j]
                if i != j and (cell in ("X", "SOC") or not (cell in _PLAIN_CELLS or _is_nvlink(cell))):
                    raise GpuValuesError(f"topology: bad link {cell!r} between GPU{self.gpus[i]} and GPU{self.gpus[j]}")
                if cell != self.links[j][i]:
                    raise GpuValuesError(f"topology: link GPU{self.gpus[i]}-GPU{self.gpus[j]} is {cell} one way "
                                         f"and {self.links[j][i]} the other")

    def _cached(self, name: str, make: Callable[[], _T]) -> _T:
        """A derived value computed once per (frozen) Topology."""
        value = self.__dict__.get(name)
        if value is None:
            value = make()
            object.__setattr__(self, name, value)
        return cast(_T, value)

    # -- links ------------------------------------------------------------------
    def _pos(self, gpu: int) -> int:
        index: dict[int, int] | None = self.__dict__.get("_index")
        if index is None:      # built once: gpus.index made every link lookup O(GPUs)
            index = {g: i for i, g in enumerate(self.gpus)}
            object.__setattr__(self, "_index", index)
        try:
            return index[gpu]
        except (KeyError, TypeError):
            raise GpuValuesError(f"topology: no GPU{gpu} (GPUs: {list(self.gpus)})") from None

    def link(self, a: int, b: int) -> str:
        """The `topo -m` cell between GPU indices a and b."""
        return self.links[self._pos(a)][self._pos(b)]

    def nvlinks(self, a: int, b: int) -> int:
        """Number of bonded NVLinks between GPUs a and b (0 when none)."""
        cell = self.link(a, b)
        return int(cell[2:]) if cell.startswith("NV") else 0

    @property
    def nvswitch(self) -> bool:
        """True when some GPU's NVLink counts add up beyond any GPU's port count."""
        def make() -> bool:
            for row in self.links:
                total = sum(int(c[2:]) * k for c, k in Counter(row).items() if c.startswith("NV"))
                if total > MAX_NVLINKS_PER_GPU:
                    return True
            return False
        return bool(self._cached("_nvswitch", make))

    def _nv_masks(self) -> tuple[int, ...]:
        """Per GPU position, the bit mask of the positions it shares NVLink with."""
        def make() -> tuple[int, ...]:
            out = []
            for row in self.links:
                bit = {c: "1" if c.startswith("NV") else "0" for c in set(row)}
                out.append(int("".join(map(bit.__getitem__, reversed(row))), 2))
            return tuple(out)
        return self._cached("_nvmasks", make)

    def nvlink_cliques(self) -> list[tuple[int, ...]]:
        """Maximal sets (size >= 2) of GPUs all pairwise joined by NVLink.

        Largest first, then by GPU index. A GPU without NVLink is in no clique. Bounded:
        past MAX_CLIQUE_WORK search steps the topology is refused (GV075).
        """
        return [tuple(sorted(self.gpus[i] for i in _bits(c))) for c in self._clique_masks()]

    def _clique_masks(self) -> tuple[int, ...]:
        def make() -> tuple[int, ...]:
            found = _maximal_cliques(self._nv_masks(), len(self.gpus))
            keyed = sorted((-c.bit_count(), tuple(sorted(self.gpus[i] for i in _bits(c))), c) for c in found)
            return tuple(c for _, _, c in keyed)
        return self._cached("_cliquemasks", make)

    def nvlink_islands(self) -> tuple[tuple[int, ...], ...]:
        """Disjoint NVLink groups: the largest clique, then the largest among the GPUs left,
        and so on (greedy; exact where cliques do not overlap: NVSwitch nodes, bridged pairs,
        the DGX-1 halves). A tensor-parallel pod's GPUs must lie in one island; GPUs in
        none have no NVLink peer left."""
        return self._cached("_islands", self._make_islands)

    def _make_islands(self) -> tuple[tuple[int, ...], ...]:
        # The cliques among the GPUs left are the largest of the maximal cliques cut down to
        # those GPUs (every clique lies in a maximal one), so one search serves every round.
        cliques = list(self._clique_masks())
        ids = self.gpus
        union = 0
        for c in cliques:
            union |= c
        if union.bit_count() == sum(c.bit_count() for c in cliques):   # disjoint: they are the islands
            return tuple(tuple(sorted(ids[i] for i in _bits(c))) for c in cliques)
        out: list[tuple[int, ...]] = []
        left = (1 << len(ids)) - 1
        work = 0
        while cliques:
            work += len(cliques)
            if work > MAX_CLIQUE_WORK:
                raise _too_irregular(len(ids))
            cut = [c & left for c in cliques]
            size = max(c.bit_count() for c in cut)
            if size < 2:
                break
            best = min(tuple(sorted(ids[i] for i in _bits(c))) for c in cut if c.bit_count() == size)
            out.append(best)
            taken = sum(1 << self._pos(g) for g in best)
            left &= ~taken
            cliques = [c for c in cliques if (c & left).bit_count() >= 2]
        return tuple(out)

    def tp_sets(self, size: int) -> int:
        """How many pods of `size` GPUs fit at once with each pod's GPUs inside one NVLink
        island (`size` 1: every GPU)."""
        if size <= 1:
            return len(self.gpus) if size == 1 else 0
        return sum(len(g) // size for g in self.nvlink_islands())

    def largest_nvlink_clique(self) -> int:
        """Size of the largest NVLink clique, 0 when no two GPUs share NVLink."""
        cliques = self.nvlink_cliques()
        return len(cliques[0]) if cliques else 0

    # -- labels -----------------------------------------------------------------
    def topology_value(self) -> str:
        """`NV<k>` when every GPU of the node is in an NVLink island of at least k GPUs (the
        worst GPU's group: a pod may get any GPU), else `PCIe` (some GPU has no NVLink
        peer, e.g. a GPU off a degraded NVSwitch fabric)."""
        islands = self.nvlink_islands()
        if not islands or sum(len(g) for g in islands) < len(self.gpus):
            return "PCIe"
        return f"NV{min(len(g) for g in islands)}"

    def labels(self, prefix: str = DEFAULT_LABEL_PREFIX, key: str = DEFAULT_TOPOLOGY_KEY) -> dict[str, str]:
        """Node labels: the topology label under `key`, and facts under `prefix`.

        `key` (default `nvidia.com/gpu.topology`, the seed's key; NVIDIA's GFD publishes
        no such label) carries `topology_value()` (`NV<k>` of the worst GPU, or `PCIe`).
        Under `prefix`: `nvlink-clique-size`, `nvlink-cliques` (how many maximal cliques),
        `nvlink-min-links` (fewest bonded links inside the largest clique), `nvswitch`,
        `gpus`, `numa-nodes` (distinct NUMA nodes, ranges such as `0-1` expanded),
        `max-gpus-per-numa` and `pcie-closest` (closest PCIe level between two GPUs not
        joined by NVLink, `none` if every pair is). Every value is a valid label value.
        """
        masks = self._clique_masks()
        # fewest links inside the largest clique: the distinct cells of its rows, not each pair
        inside = _bits(masks[0]) if masks else []
        pick = operator.itemgetter(*inside) if len(inside) >= 2 else None
        seen: set[str] = set()
        for i in inside:
            seen.update(pick(self.links[i]) if pick else ())
        min_links = min((int(c[2:]) for c in seen if c.startswith("NV")), default=0)
        numa = [v for v in self.numa_affinity if v is not None]
        per_numa: dict[int, int] = {}       # a GPU with affinity 0-1 counts on both nodes
        for v in numa:
            for node in numa_nodes(v):
                per_numa[node] = per_numa.get(node, 0) + 1
        cells: set[str] = set()
        for row in self.links:     # the matrix is symmetric: every pair's cell is in some row
            cells.update(row)
        pcie = [c for c in PCIE_LEVELS if c in cells]
        closest = pcie[0] if pcie else "none"
        facts = {
            "nvlink-clique-size": str(len(inside)),
            "nvlink-cliques": str(len(masks)),
            "nvlink-min-links": str(min_links),
            "nvswitch": "true" if self.nvswitch else "false",
            "gpus": str(len(self.gpus)),
            "numa-nodes": str(len(per_numa)) if numa else "unknown",
            "max-gpus-per-numa": str(max(per_numa.values())) if per_numa else "unknown",
            "pcie-closest": closest,
        }
        out = {key: self.topology_value()}
        out.update({f"{prefix}{name}": value for name, value in facts.items()})
        for k, v in out.items():
            _check_label(k, v)
        return out

    # -- allocation -------------------------------------------------------------
    def pcie_level(self, a: int, b: int) -> str:
        """PCIe level between two GPUs; estimated from NUMA affinity for NVLinked pairs."""
        cell = self.link(a, b)
        if cell in PCIE_LEVELS:
            return cell
        if cell == "X":
            return "X"
        if self.numa_affinity:
            na, nb = self.numa_affinity[self._pos(a)], self.numa_affinity[self._pos(b)]
            if na is not None and nb is not None and numa_nodes(na) == numa_nodes(nb):
                return "NODE"
        return "SYS"

    def pair_score(self, a: int, b: int, *, count_nvswitch_links: bool = False) -> int:
        """The device plugin's score for giving GPUs a and b to one pod."""
        if a == b:
            return 0
        nv = self.nvlinks(a, b)
        if self.nvswitch and not count_nvswitch_links:
            nv = 0
        return PCIE_SCORE[self.pcie_level(a, b)] + NVLINK_SCORE * nv

    def best_gpu_set(self, n: int, available: Iterable[int] | None = None, required: Iterable[int] = (),
                     *, count_nvswitch_links: bool = False) -> tuple[int, ...]:
        """GPUs the device plugin's best-effort policy would give a pod asking for n.

        `available` defaults to every GPU (ascending index, as the plugin passes them);
        `required` must all be in the result. Returns `()` when impossible, as the
        plugin does. See the module docstring for the scoring and NVSwitch behaviour.
        """
        return self.best_gpu_choice(n, available, required, count_nvswitch_links=count_nvswitch_links)[0]

    def best_gpu_choice(self, n: int, available: Iterable[int] | None = None, required: Iterable[int] = (),
                        *, count_nvswitch_links: bool = False) -> tuple[tuple[int, ...], bool, int]:
        """`best_gpu_set`'s answer, whether it is exactly upstream's (False past
        MAX_SEARCH_STATES: the greedy set), and an upper bound on any set's score (the
        score itself when exact) -- what `topo --best` states beside a greedy answer."""
        avail = sorted(self.gpus if available is None else set(available))
        pos = [self._pos(g) for g in avail]
        return _allocate(self._score_matrix(pos, count_nvswitch_links), avail, tuple(required), n)

    def _score_matrix(self, pos: list[int], count_nvswitch_links: bool) -> list[list[int]]:
        """`pair_score` between the GPUs at positions `pos`, computed once per cell: the
        NVSwitch test (O(GPUs^2)) and the position lookups once, not per pair."""
        nvswitch = self.nvswitch and not count_nvswitch_links
        numa = self.numa_affinity
        cells: set[str] = set()
        for row in self.links:
            cells.update(row)

        def score(cell: str, same: bool) -> int:      # pcie_level and pair_score's rule
            level = cell if cell in PCIE_LEVELS else ("NODE" if same else "SYS")
            nv = 0 if nvswitch or not cell.startswith("NV") else int(cell[2:])
            return PCIE_SCORE[level] + NVLINK_SCORE * nv

        by_cell = {(c, same): score(c, same) for c in cells if c != "X" for same in (False, True)}
        by_cell[("X", False)] = by_cell[("X", True)] = 0
        pick = operator.itemgetter(*pos) if len(pos) > 1 else (lambda row: tuple(row[k] for k in pos))
        numa_sub = pick(numa) if numa else (None,) * len(pos)
        # per NUMA value, which of the GPUs share it (few distinct values: computed once each)
        same_as: dict[str | None, tuple[bool, ...]] = {None: (False,) * len(pos)}
        out = []
        for i in pos:
            ni = numa[i] if numa else None
            flags = same_as.get(ni)
            if flags is None:
                flags = same_as[ni] = tuple(nj == ni for nj in numa_sub)
            out.append(list(map(by_cell.__getitem__, zip(pick(self.links[i]), flags))))
        return out

    # -- serialisation ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict (the `topology` object of schemas/inventory.schema.json)."""
        d: dict[str, Any] = {"gpus": list(self.gpus), "links": [list(r) for r in self.links]}
        if self.cpu_affinity:
            d["cpuAffinity"] = list(self.cpu_affinity)
        if self.numa_affinity:
            d["numaAffinity"] = list(self.numa_affinity)
        if self.gpu_numa_id:
            d["gpuNumaId"] = list(self.gpu_numa_id)
        if self.nics:
            d["nics"] = list(self.nics)
            d["gpuNicLinks"] = [list(r) for r in self.gpu_nic_links]
        if self.nic_names:
            d["nicNames"] = dict(self.nic_names)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Topology":
        """Inverse of `to_dict`."""
        return cls(
            gpus=tuple(int(g) for g in d["gpus"]),
            links=tuple(tuple(r) for r in d["links"]),
            cpu_affinity=tuple(d.get("cpuAffinity", ())),
            numa_affinity=tuple(d.get("numaAffinity", ())),
            gpu_numa_id=tuple(d.get("gpuNumaId", ())),
            nics=tuple(d.get("nics", ())),
            gpu_nic_links=tuple(tuple(r) for r in d.get("gpuNicLinks", ())),
            nic_names=tuple(d.get("nicNames", {}).items()),
        )


def numa_nodes(affinity: str, limit: int | None = MAX_NUMA_NODES) -> frozenset[int]:
    """The NUMA nodes of a `NUMA Affinity` cell: `0` -> {0}, `0-1` -> {0, 1}, `0-1,3` ->
    {0, 1, 3} (the CPU-list syntax the parser accepts). With `limit` None, a range wider
    than MAX_NUMA_NODES is cut there (the parser refuses such a cell)."""
    out: set[int] = set()
    for part in affinity.split(","):
        lo, _, hi = part.partition("-")
        start, stop = int(lo), int(hi or lo)
        out.update(range(start, min(stop, start + MAX_NUMA_NODES) + 1))
        if limit is not None and len(out) > limit:
            raise GpuValuesError(f"topology: NUMA affinity {affinity!r} names more than {limit} nodes")
    return frozenset(out)


def _check_label(key: str, value: str) -> None:
    if not is_label_key(key):
        raise GpuValuesError(f"topology label key {key!r} is not a valid Kubernetes label key; "
                             "use a prefix like 'example.com/' or 'example.com/gpu-'")
    if not is_label_value(value):
        raise GpuValuesError(f"topology label {key}={value!r} is not a valid label value")


# -- the go-gpuallocator best-effort search ------------------------------------------
# The most states the exact search may visit (class-count states, or candidate sets per
# step); past it `allocate_best_effort` answers greedily (see there).
MAX_SEARCH_STATES = 200_000
# Past this many GPUs the answer is greedy without trying the exact search (whose class
# detection is O(GPUs^2) per class test): nodes have at most 16 GPUs; the exact search
# is exercised up to 64 (tests/unit/test_topology.py).
MAX_EXACT_GPUS = 128


class TopologyTooIrregular(Exception):
    """The exact search would exceed MAX_SEARCH_STATES."""

    def __init__(self, gpus: int, classes: int | None) -> None:
        super().__init__(f"{gpus} GPUs in {classes} link classes" if classes else f"{gpus} GPUs")


def _twin_classes(score: list[list[int]], m: int, alone: set[int]) -> list[int]:
    """Class index per device: i joins the first class whose representative r has
    score(i, k) == score(r, k) and score(k, i) == score(k, r) for every other k (twins are
    interchangeable for the score; a class's internal pair score is one number). Devices
    in `alone` (the required ones) each get their own class.

    In O(m^2 x distinct scores), not O(m^2 x classes): i and r are twins with score(i, r)
    = w exactly when i's row with its own cell set to w equals r's row with its own cell
    set to w (the two rows then differ nowhere: the cells at i and r both hold w), so each
    class is found by dictionary lookups of those rows, one per value w in i's row."""
    symmetric = all(score[i][j] == score[j][i] for i in range(m) for j in range(i))
    cls = [-1] * m
    reps: list[int] = []
    keys: dict[tuple[int, tuple[int, ...]], int] = {}
    for i in range(m):
        if i not in alone:
            if symmetric:
                found = []
                for w in set(score[i][k] for k in range(m) if k != i):
                    row = list(score[i])
                    row[i] = w
                    c = keys.get((w, tuple(row)))
                    if c is not None:
                        found.append(c)
                if found:
                    cls[i] = min(found)
            else:
                for c, r in enumerate(reps):
                    if r not in alone and all(score[i][k] == score[r][k] and score[k][i] == score[k][r]
                                              for k in range(m) if k != i and k != r):
                        cls[i] = c
                        break
        if cls[i] < 0:
            cls[i] = len(reps)
            reps.append(i)
            if symmetric and i not in alone:
                for w in set(score[i][k] for k in range(m) if k != i):
                    row = list(score[i])
                    row[i] = w
                    keys.setdefault((w, tuple(row)), cls[i])
    return cls


def _greedy_set(score: list[list[int]], m: int, req: list[int], size: int) -> tuple[int, ...]:
    """The fallback past MAX_SEARCH_STATES: the required GPUs (or the best-scoring pair),
    then repeatedly the GPU adding the most score (lowest index on ties)."""
    chosen = list(req)
    if not chosen:        # the best pair, lowest (a, b) on ties: row maxima at C speed
        best: int | None = None
        a = 0
        for i in range(m - 1):
            v = max(score[i][i + 1:])
            if best is None or v > best:
                best, a = v, i
        assert best is not None, "a set of size >= 2 has a pair"
        chosen = [a, score[a].index(best, a + 1)]
    # each GPU's score to the chosen ones, kept up to date as they grow (O(m) per step)
    sums = [0] * m
    for j in chosen:
        for i in range(m):
            sums[i] += score[i][j]
    taken = set(chosen)
    while len(chosen) < size:
        nxt = max((i for i in range(m) if i not in taken), key=lambda i: (sums[i], -i))
        chosen.append(nxt)
        taken.add(nxt)
        for i in range(m):
            sums[i] += score[i][nxt]
    return tuple(chosen[:size])


def allocate_best_effort(pair_score: Callable[[int, int], int], available: Sequence[int], required: Sequence[int],
                         size: int) -> tuple[int, ...]:
    """Port of go-gpuallocator's `bestEffortPolicy.Allocate` over a pair-score function.

    Same result as its exhaustive enumeration (first highest-scoring partition in its
    order, then that partition's first highest-scoring set), computed with a memoised
    search over counts of interchangeable GPUs, so a 32-GPU node answers in milliseconds
    (tests/unit/test_topology.py checks equality with the exhaustive enumeration). One
    deliberate difference: a padded set (fewer than `size` GPUs) is never returned.

    Bounded: when the search would pass MAX_SEARCH_STATES (large nodes whose GPUs are
    all differently linked, or huge sets), the answer is `_greedy_set`'s instead, which
    is not guaranteed to be upstream's choice.
    """
    avail = list(available)
    req = set(required)
    if size <= 0 or len(avail) < size or len(req) > size or not req <= set(avail):
        return ()
    if size == 1:  # upstream short-cut: one-device "partitions", all scoring 0
        for g in avail:
            if not req or req == {g}:
                return (g,)
        return ()

    score = [[pair_score(a, b) if a != b else 0 for b in avail] for a in avail]
    return _allocate(score, avail, tuple(required), size)[0]


def _score_bound(score: list[list[int]], size: int) -> int:
    """An upper bound on the score of any `size` GPUs: the sum of the size*(size-1)/2
    largest pair scores (a set's score is the sum of that many distinct pairs)."""
    import heapq

    m = len(score)
    k = size * (size - 1) // 2
    pairs = itertools.chain.from_iterable(score[i][i + 1:] for i in range(m))
    return sum(heapq.nlargest(k, pairs) if k <= m else sorted(pairs, reverse=True)[:k])


# one set a partition step may take: (member slots, mask of its real GPUs, uses the padding, score)
_Choice = tuple[tuple[int, ...], int, bool, int]


def _allocate(score: list[list[int]], available: Sequence[int], required: Sequence[int],
              size: int) -> tuple[tuple[int, ...], bool, int]:
    """allocate_best_effort over a score matrix (rows and columns in `available`'s order):
    (the set, exact?, an upper bound on any set's score: its own score when exact)."""
    avail = list(available)
    req = set(required)
    if size <= 0 or len(avail) < size or len(req) > size or not req <= set(avail):
        return (), True, 0
    if size == 1:  # upstream short-cut: one-device "partitions", all scoring 0
        for g in avail:
            if not req or req == {g}:
                return (g,), True, 0
        return (), True, 0

    m = len(avail)
    padding = (-m) % size
    req_mask = sum(1 << i for i, g in enumerate(avail) if g in req)
    pad = -1  # a padding slot; all padding slots go into one set (upstream rule)

    @lru_cache(maxsize=None)
    def set_score(members: tuple[int, ...]) -> int:
        real = [i for i in members if i != pad]
        return sum(score[a][b] for a, b in itertools.combinations(real, 2))

    @lru_cache(maxsize=None)
    def choices(mask: int, pad_left: bool) -> tuple[_Choice, ...]:
        """Sets containing the lowest remaining device, in upstream iteration order."""
        items = [i for i in range(m) if mask >> i & 1]
        rest = items[1:]
        if math.comb(len(rest), size - 1) > MAX_SEARCH_STATES:
            raise TopologyTooIrregular(m, None)
        # Upstream enumerates combinations of positions [rest..., pad slots...] and drops those
        # with some but not all pads; build only the kept ones, then restore that order.
        keyed = [(combo, False) for combo in itertools.combinations(range(len(rest)), size - 1)]
        if pad_left and size - 1 >= padding:
            tail = tuple(range(len(rest), len(rest) + padding))
            keyed += [(combo + tail, True) for combo in itertools.combinations(range(len(rest)), size - 1 - padding)]
            keyed.sort()
        out = []
        for combo, used_pad in keyed:
            real = tuple(rest[k] for k in combo if k < len(rest))
            members = (items[0],) + real + ((pad,) * padding if used_pad else ())
            real_mask = (1 << items[0]) | sum(1 << k for k in real)
            out.append((members, real_mask, used_pad, set_score(members)))
        return tuple(out)

    # The best total of the rest, by GPU "link classes": GPUs with the same score to every
    # other GPU (twins: every GPU of an NVSwitch node, each island of a 4x8 node) are
    # interchangeable for the score, so the optimum depends only on how many of each class
    # remain. Required GPUs get classes of their own. This is the memoised search over
    # subsets above with subsets replaced by class counts: the same value, in
    # prod(count + 1) states instead of 2^m (a 32-GPU NVSwitch node: 33).
    def counts_of(mask: int) -> tuple[int, ...]:
        out = [0] * n_cls
        for i in range(m):
            if mask >> i & 1:
                out[cls[i]] += 1
        return tuple(out)

    def counts_score(k: tuple[int, ...]) -> int:
        total = 0
        for a in range(n_cls):
            if k[a]:
                total += k[a] * (k[a] - 1) // 2 * within[a]
                for b in range(a + 1, n_cls):
                    total += k[a] * k[b] * between[a][b]
        return total

    def sub_multisets(avail_k: tuple[int, ...], need: int, first: int) -> Iterator[tuple[int, ...]]:
        """Class counts of `need` GPUs from `avail_k`, with at least one of class `first`."""
        def rec(c: int, left: int, acc: list[int]) -> Iterator[tuple[int, ...]]:
            if c == n_cls:
                if left == 0:
                    yield tuple(acc)
                return
            lo = 1 if c == first else 0
            for k in range(lo, min(avail_k[c], left) + 1):
                acc.append(k)
                yield from rec(c + 1, left - k, acc)
                acc.pop()
        yield from rec(0, need, [])

    @lru_cache(maxsize=None)
    def best_k(k: tuple[int, ...], pad_left: bool, satisfied: bool) -> int | None:
        left = sum(k) + (padding if pad_left else 0)
        if left == 0:
            return 0 if satisfied else None
        if left == size:
            ok = satisfied or (not (pad_left and padding) and all(k[c] for c in req_cls))
            return counts_score(k) if ok else None
        first = next(c for c in range(n_cls) if k[c])
        top = None
        options = [(size, False)]
        if pad_left and size - 1 >= padding:
            options.append((size - padding, True))
        for need, used_pad in options:
            for take in sub_multisets(k, need, first):
                ok = satisfied or (not used_pad and all(take[c] for c in req_cls))
                rest = tuple(a - b for a, b in zip(k, take))
                sub = best_k(rest, pad_left and not used_pad, ok)
                if sub is not None:
                    own = counts_score(take)
                    if top is None or own + sub > top:
                        top = own + sub
        return top

    def best(mask: int, pad_left: bool, satisfied: bool) -> int | None:
        if too_many:
            raise TopologyTooIrregular(m, n_cls)
        return best_k(counts_of(mask), pad_left, satisfied)

    n_cls = 0                   # set below; unused when too_many (best() raises first)
    if m > MAX_EXACT_GPUS:
        too_many = True         # the class search itself is O(GPUs^2): skip it
    else:
        cls = _twin_classes(score, m, {i for i in range(m) if req_mask >> i & 1})
        n_cls = max(cls) + 1
        rep = [cls.index(c) for c in range(n_cls)]
        within = [score[rep[c]][next((j for j in range(m) if cls[j] == c and j != rep[c]), rep[c])]
                  for c in range(n_cls)]
        between = [[score[rep[a]][rep[b]] for b in range(n_cls)] for a in range(n_cls)]
        req_cls = {cls[i] for i in range(m) if req_mask >> i & 1}
        states = 4
        for c in range(n_cls):
            states *= cls.count(c) + 1
        too_many = states > MAX_SEARCH_STATES
    try:
        chosen = _allocate_exact(m, size, padding, pad, req_mask, avail, set_score, choices, best)
        return chosen, True, set_score(tuple(avail.index(g) for g in chosen)) if chosen else 0
    except TopologyTooIrregular:
        picked = _greedy_set(score, m, [i for i in range(m) if req_mask >> i & 1], size)
        return tuple(sorted(avail[i] for i in picked)), False, _score_bound(score, size)


def _allocate_exact(m: int, size: int, padding: int, pad: int, req_mask: int, avail: list[int],
                    set_score: Callable[[tuple[int, ...]], int],
                    choices: Callable[[int, bool], tuple[_Choice, ...]],
                    best: Callable[[int, bool, bool], int | None]) -> tuple[int, ...]:
    full = (1 << m) - 1
    target = best(full, padding > 0, False)
    if target is None:
        return ()
    # Rebuild the first partition (in upstream order) that reaches the best total.
    partition: list[tuple[int, ...]] = []
    mask, pad_left, satisfied, need = full, padding > 0, False, target
    while mask or pad_left:
        left = bin(mask).count("1") + (padding if pad_left else 0)
        if left == size:
            partition.append(tuple(i for i in range(m) if mask >> i & 1) + ((pad,) * padding if pad_left else ()))
            break
        for members, real_mask, used_pad, own in choices(mask, pad_left):
            ok = satisfied or (not used_pad and real_mask & req_mask == req_mask)
            sub = best(mask & ~real_mask, pad_left and not used_pad, ok)
            if sub is not None and own + sub == need:
                partition.append(members)
                need -= own
                mask, pad_left, satisfied = mask & ~real_mask, pad_left and not used_pad, ok
                break
    chosen: tuple[int, ...] | None = None
    chosen_score = 0
    for members in partition:
        if pad in members or not req_mask & sum(1 << k for k in members) == req_mask:
            continue
        s = set_score(members)
        if chosen is None or s > chosen_score:
            chosen, chosen_score = members, s
    return tuple(sorted(avail[i] for i in chosen)) if chosen else ()


# -- parsing --------------------------------------------------------------------------
def _tokens_with_offsets(line: str) -> list[tuple[str, int]]:
    return [(m.group(0), m.start()) for m in re.finditer(r"\S+", line)]


def _col(line: str, k: int) -> int:
    """1-based column of the k-th blank-separated token of `line` (past its end: the
    column after the line)."""
    for i, m in enumerate(re.finditer(r"\S+", line)):
        if i == k:
            return m.start() + 1
    return len(line) + 1


def parse_topo_matrix(text: str, source: str | None = None) -> Topology:
    """Parse `nvidia-smi topo -m` output into a `Topology`.

    Raises `TopologyParseError` naming the line and column (1-based, counted in the text
    once ANSI codes are removed, a tab as one column) and the field (`header`, a row, or
    `row.column` such as `GPU3.GPU5`) of the first problem. Whole rows are checked at C
    speed: a 1,024-GPU matrix (a million cells) parses in about a second.
    """
    lines = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")

    def fail(lineno: int, msg: str, col: int = 1, field: str | None = None) -> TopologyParseError:
        return TopologyParseError(msg, source=source or "<topo>", line=lineno, column=col, field=field)

    header_idx = None
    for idx, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if re.match(r"^\s*GPU\d+\s+(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)(\s|$)", line):
            raise fail(idx + 1, "matrix row before the header row (GPU0 GPU1 ... CPU Affinity)",
                       _col(line, 0), line.split()[0])
        if _HEADER.search(line):
            header_idx = idx
            break
    if header_idx is None:
        raise fail(1, "no header row naming GPU0 found; pass the output of `nvidia-smi topo -m`", 1, "header")

    header = lines[header_idx].rstrip()
    hline = header_idx + 1
    label_pos: list[tuple[str, int]] = []
    masked = header
    for label in _AFFINITY_LABELS:
        at = masked.find(label)
        if at >= 0:
            label_pos.append((label, at))
            masked = masked[:at] + " " * len(label) + masked[at + len(label):]
    label_pos.sort(key=lambda lp: lp[1])
    tokens = _tokens_with_offsets(masked)
    columns = [tok for tok, _ in tokens]
    if not columns or not _GPU_COL.match(columns[0]):
        raise fail(hline, f"header must start with GPU0, found {columns[:1]}",
                   tokens[0][1] + 1 if tokens else 1, "header")
    first_label_at = label_pos[0][1] if label_pos else None
    if first_label_at is not None:
        late = [off for _, off in tokens if off > first_label_at]
        if late:
            raise fail(hline, "device column after the affinity columns", late[0] + 1, "header")
    if len(set(columns)) != len(columns):
        seen: set[str] = set()
        dup = next(k for k, c in enumerate(columns) if c in seen or seen.add(c))  # type: ignore[func-returns-value]
        raise fail(hline, f"duplicate column name {columns[dup]} in header", tokens[dup][1] + 1, "header")
    gpu_cols = [c for c in columns if _GPU_COL.match(c)]
    if len(gpu_cols) > MAX_TOPOLOGY_GPUS:
        k = [j for j, c in enumerate(columns) if _GPU_COL.match(c)][MAX_TOPOLOGY_GPUS]
        raise TopologyParseError(f"{len(gpu_cols):,} GPU columns; gpuvalues reads matrices of up to "
                                 f"{MAX_TOPOLOGY_GPUS:,} GPUs (a node has at most 16; NVLink domains of 72)",
                                 source=source or "<topo>", line=hline, column=tokens[k][1] + 1, field="header",
                                 code="GV038")
    ncols = len(columns)

    rows: dict[str, tuple[list[str], dict[str, str | None], int]] = {}
    row_text: dict[str, str] = {}
    canon = {c: c for c in _PLAIN_CELLS}
    canon["SOC"] = "SYS"
    col_index = {c: k for k, c in enumerate(columns)}
    labels_only = [lbl for lbl, _ in label_pos]
    end_idx = len(lines)
    for idx in range(header_idx + 1, len(lines)):
        line = lines[idx].rstrip()
        lineno = idx + 1
        toks = line.split()
        if not toks or toks[0].startswith("Legend"):
            end_idx = idx
            break
        name = toks[0]
        if name not in col_index:
            raise fail(lineno, f"row {name!r} is not a column of the header ({', '.join(columns)})",
                       _col(line, 0), name)
        if name in rows:
            raise fail(lineno, f"row {name} appears twice", _col(line, 0), name)
        cells = toks[1:1 + ncols]
        if len(cells) < ncols:
            raise fail(lineno, f"row {name} has {len(cells)} link cells, the header has {ncols} columns",
                       len(line) + 1, f"{name}.{columns[len(cells)]}")
        unknown = set(cells).difference(canon)
        for cell in unknown:
            if not _is_nvlink(cell):
                k = cells.index(min(unknown - {c for c in unknown if _is_nvlink(c)}, key=cells.index))
                raise fail(lineno, f"{cells[k]!r} is not a link "
                                   "(X, NV<n>, PIX, PXB, PHB, NODE, SYS)", _col(line, 1 + k), f"{name}.{columns[k]}")
            canon[cell] = cell
        diagonal = col_index[name]
        if cells[diagonal] != "X" or cells.count("X") != 1:
            k = diagonal if cells[diagonal] != "X" else next(j for j, c in enumerate(cells) if c == "X" and j != diagonal)
            raise fail(lineno, "X must be exactly on the diagonal",
                       _col(line, 1 + k), f"{name}.{columns[k]}")
        # one string object per distinct cell (SOC read as SYS): a million cells share a few
        # objects, and comparing rows is comparing pointers
        cells = list(map(canon.__getitem__, cells))
        rest = toks[1 + ncols:]
        affinity: dict[str, str | None] = dict.fromkeys(labels_only)
        if rest and not label_pos:
            raise fail(lineno, f"row {name} has extra fields {rest} but the header has no affinity columns",
                       _col(line, 1 + ncols), name)
        if len(rest) > len(label_pos):
            raise fail(lineno, f"row {name} has {len(rest)} affinity fields, the header has {len(label_pos)}",
                       _col(line, 1 + ncols + len(label_pos)), name)
        if rest:
            tail = line.split(None, 1 + ncols)[-1]        # the affinity fields, not the million cells
            base = len(line) - len(tail)
            offsets = [(tok, base + off) for tok, off in _tokens_with_offsets(tail)]
            if len(rest) == len(label_pos) or "\t" in line:
                assigned = [(lbl, tok, off) for lbl, (tok, off) in zip(labels_only, offsets)]
            else:  # space-aligned with empty fields: match each value to the nearest header label
                assigned = [(min(label_pos, key=lambda lp: abs(lp[1] - off))[0], tok, off) for tok, off in offsets]
            for label, value, off in assigned:
                if value != "N/A" and not _CPU_LIST.match(value):
                    raise fail(lineno, f"{value!r} is not a CPU/NUMA list like 0-31,64-95 "
                                       "(columns run together in a copied output?)", off + 1, f"{name}.{label}")
                if label == "NUMA Affinity" and value != "N/A" and len(numa_nodes(value, limit=None)) > MAX_NUMA_NODES:
                    raise fail(lineno, f"{value!r} names more than "
                                       f"{MAX_NUMA_NODES} NUMA nodes", off + 1, f"{name}.{label}")
                affinity[label] = None if value == "N/A" else value
        rows[name] = (cells, affinity, lineno)
        row_text[name] = line

    last_line = end_idx
    for gcol in gpu_cols:
        if gcol not in rows:
            raise fail(last_line, f"no row for {gcol}; the matrix is cut short", 1, gcol)
    # Links must read the same both ways: the matrix of the rows given (in column order)
    # against its transpose at C speed; the pair loop runs only to name the first mismatch.
    present = [c for c in columns if c in rows]
    pick = operator.itemgetter(*[col_index[c] for c in present])
    square = [pick(rows[c][0]) if len(present) > 1 else (rows[c][0][col_index[c]],) for c in present]
    if list(zip(*square)) != square:
        for a in gpu_cols:
            cells_a, _, line_a = rows[a]
            ia = col_index[a]
            for b in present:
                ib = col_index[b]
                cells_b, _, line_b = rows[b]
                x, y = cells_a[ib], cells_b[ia]
                if x != y:
                    row, k = (b, ia) if line_b >= line_a else (a, ib)
                    raise fail(max(line_a, line_b), f"{a}-{b} is {x} in row {a} but {y} in row {b}",
                               _col(row_text[row], 1 + k), f"{row}.{columns[k]}")

    nic_names = []
    if "NIC Legend" in text:
        for line in lines[end_idx:]:
            m = _NIC_LEGEND.match(line)
            if m:
                nic_names.append((m.group(1), m.group(2)))

    gpu_pos = [col_index[g] for g in gpu_cols]
    nic_cols = [c for c in columns if not _GPU_COL.match(c)]
    nic_pos = [col_index[c] for c in nic_cols]
    gpus = tuple(int(_GPU_COL.match(g).group(1)) for g in gpu_cols)  # type: ignore[union-attr]
    gpu_pick = operator.itemgetter(*gpu_pos)
    nic_pick = operator.itemgetter(*nic_pos) if nic_pos else None

    def aff(label: str) -> tuple[str | None, ...]:
        if label not in dict(label_pos):
            return ()
        return tuple(rows[g][1][label] for g in gpu_cols)

    def cut(cells: list[str], picker: Callable[[list[str]], Any], n: int) -> tuple[str, ...]:
        got = picker(cells)
        return tuple(got) if n > 1 else (got,)

    try:
        return Topology(
            gpus=gpus,
            links=tuple(cut(rows[g][0], gpu_pick, len(gpu_pos)) for g in gpu_cols),
            cpu_affinity=aff("CPU Affinity"),
            numa_affinity=aff("NUMA Affinity"),
            gpu_numa_id=aff("GPU NUMA ID"),
            nics=tuple(nic_cols),
            gpu_nic_links=tuple(cut(rows[g][0], nic_pick, len(nic_pos)) for g in gpu_cols) if nic_pick else (),
            nic_names=tuple(nic_names),
        )
    except GpuValuesError as exc:  # e.g. duplicate GPU indices
        raise fail(hline, exc.message, 1, "header") from None


def nvlink_size(value: object) -> int | None:
    """The NVLink group size a topology label value names (`NV8` -> 8), the inverse of
    `Topology.topology_value`; None for `PCIe` or anything else."""
    m = re.fullmatch(r"NV(\d+)", str(value))
    return int(m.group(1)) if m else None
