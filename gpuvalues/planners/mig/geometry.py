"""MIG geometry: place GPU instances on the memory-slice axis, enumerate valid layouts.

The rule (MIG User Guide; `nvidia-smi mig -lgipp`): each GPU-instance profile may start
only at the memory slices its catalog entry lists and occupies `memory_slices` consecutive
slices; instances must not overlap; per-profile `max_instances` and group limits (at most
one media-extension `+me` instance) hold; compute slices add up to at most the GPU's.

Public API:
- `place(gpu, profiles)` -> list of `InstancePlacement(profile, start)` sorted by start, or
  `MigLayoutError` saying which instance has no start left and why.
- `can_place(gpu, profiles)` -> bool.
- `enumerate_layouts(gpu, maximal=True, profiles=None)` -> list of `GpuLayout`.
- `GpuLayout` (frozen): `counts`, `placements`, `used_slots`, `free_slots`, `picture()`.
- `layouts_svg(layouts)` -> an SVG drawing of layouts (slots on the x axis).
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Sequence

from gpuvalues.catalog import GpuModel, MigProfile, get_gpu
from gpuvalues.errors import CatalogError, MigLayoutError


class InstancePlacement(NamedTuple):
    """One GPU instance: `profile` name and its first memory slice `start`."""

    profile: str
    start: int


def _size_key(p: MigProfile) -> tuple[int, int, str]:
    return (-p.memory_slices, -p.compute_slices, p.name)


def _slots_text(start: int, size: int) -> str:
    return f"slot {start}" if size == 1 else f"slots {start}-{start + size - 1}"


def _profile_counts(gpu: GpuModel, profiles: Iterable[str] | Mapping[str, int]) -> Counter[str]:
    if isinstance(profiles, str):
        profiles = [profiles]
    if isinstance(profiles, Mapping):
        counts: Counter[str] = Counter()
        for name, n in profiles.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise MigLayoutError(f"count for {name} must be a non-negative integer, got {n!r}")
            if n:
                counts[name] += n
    else:
        counts = Counter(profiles)
    if gpu.mig is None:
        raise MigLayoutError(f"{gpu.name} does not support MIG; share it with time-slicing or MPS instead")
    canonical: Counter[str] = Counter()
    for name, n in counts.items():
        try:        # a driver branch's name counts as the catalog's (GB200 1g.24gb = 1g.23gb)
            canonical[gpu.profile(name).name] += n
        except CatalogError:
            raise MigLayoutError(f"profile {name!r} does not exist on {gpu.name}; "
                                 f"its profiles are: {', '.join(gpu.profile_names)}") from None
    return canonical


def _check_counts(gpu: GpuModel, counts: Counter[str]) -> None:
    mig = gpu.geometry
    for name, n in counts.items():
        p = gpu.profile(name)
        if n > p.max_instances:
            raise MigLayoutError(f"{n} x {name} requested; {gpu.name} allows at most {p.max_instances}")
    for lim in mig.limits:
        n = sum(counts[p] for p in lim.profiles)
        if n > lim.max:
            used = ", ".join(f"{counts[p]} x {p}" for p in lim.profiles if counts[p])
            raise MigLayoutError(f"{used} requested; {gpu.name} allows at most {lim.max} "
                                 f"{lim.name} instance{'s' if lim.max != 1 else ''} in total "
                                 f"(among {', '.join(lim.profiles)})")
    mem = sum(gpu.profile(n).memory_slices * c for n, c in counts.items())
    if mem > mig.memory_slices:
        raise MigLayoutError(f"the profiles need {mem} memory slices; {gpu.name} has {mig.memory_slices}")


def _check_compute(gpu: GpuModel, counts: Counter[str]) -> None:
    # Checked after placement: a failed placement explains more precisely.
    comp = sum(gpu.profile(n).compute_slices * c for n, c in counts.items())
    if comp > gpu.geometry.compute_slices:
        raise MigLayoutError(f"the profiles need {comp} compute slices; {gpu.name} has {gpu.geometry.compute_slices}")


def _search(profs: Sequence[MigProfile], total: int) -> tuple[list[int] | None, list[int]]:
    """Backtracking over allowed starts; returns (starts or None, deepest partial starts)."""
    best: list[int] = []
    failed: set[tuple[int, int]] = set()
    starts: list[int] = []

    def rec(i: int, used: int) -> bool:
        nonlocal best
        if i == len(profs):
            return True
        if (i, used) in failed:
            return False
        p = profs[i]
        mask = (1 << p.memory_slices) - 1
        # identical instances in a row: start after the previous one (no symmetric retries)
        lo = starts[-1] if i and profs[i - 1] is p else -1
        for s in p.starts:
            if s <= lo:
                continue
            m = mask << s
            if used & m:
                continue
            starts.append(s)
            if len(starts) > len(best):
                best = list(starts)
            if rec(i + 1, used | m):
                return True
            starts.pop()
        failed.add((i, used))
        return False

    ok = rec(0, 0)
    return (list(starts) if ok else None), best


def _order(gpu: GpuModel, counts: Counter[str]) -> list[MigProfile]:
    # Biggest and least flexible first; ties by catalog order so messages are stable.
    order = {p.name: i for i, p in enumerate(gpu.profiles)}
    names = sorted(counts, key=lambda n: (-gpu.profile(n).memory_slices, len(gpu.profile(n).starts), order[n]))
    return [gpu.profile(n) for n in names for _ in range(counts[n])]


@functools.lru_cache(maxsize=65536)
def _place_cached(gpu_name: str, key: tuple[tuple[str, int], ...]) -> tuple[InstancePlacement, ...]:
    gpu = get_gpu(gpu_name)
    counts = Counter(dict(key))
    _check_counts(gpu, counts)
    profs = _order(gpu, counts)
    found, best = _search(profs, gpu.geometry.memory_slices)
    if found is None:
        raise MigLayoutError(_explain(gpu, profs, best))
    _check_compute(gpu, counts)
    return tuple(sorted((InstancePlacement(p.name, s) for p, s in zip(profs, found)), key=lambda x: x.start))


def _explain(gpu: GpuModel, profs: Sequence[MigProfile], best: Sequence[int]) -> str:
    seen: Counter[str] = Counter()
    parts = []
    used: set[int] = set()
    for p, s in zip(profs, best):
        seen[p.name] += 1
        tag = f"{p.name} #{seen[p.name]}" if sum(q is p for q in profs) > 1 else p.name
        parts.append(f"{tag} uses {_slots_text(s, p.memory_slices)}")
        used.update(p.slots(s))
    nxt = profs[len(best)]
    seen[nxt.name] += 1
    tag = f"{nxt.name} #{seen[nxt.name]}" if sum(q is nxt for q in profs) > 1 else nxt.name
    free = [i for i in range(gpu.geometry.memory_slices) if i not in used]
    allowed = ", ".join(map(str, nxt.starts))
    msg = "; ".join(parts + [f"no allowed start left for {tag} (allowed {allowed}, size {nxt.memory_slices})"])
    msg += f"; free slots: {', '.join(map(str, free)) or 'none'}"
    return f"cannot place these profiles on {gpu.name}: {msg}. Drop or shrink an instance, e.g. use smaller profiles"


def place(gpu: str | GpuModel, profiles: Iterable[str] | Mapping[str, int]) -> list[InstancePlacement]:
    """Place MIG instances on one GPU.

    `profiles` is a list of profile names (repeats allowed) or a mapping name -> count.
    Returns `InstancePlacement(profile, start)` items sorted by start slot; raises `MigLayoutError`
    for an unknown profile, a count over the per-profile or group maximum, or instances
    that cannot all get an allowed, non-overlapping start.
    """
    model = get_gpu(gpu)
    counts = _profile_counts(model, profiles)
    key = tuple(sorted(counts.items()))
    return list(_place_cached(model.name, key))


def can_place(gpu: str | GpuModel, profiles: Iterable[str] | Mapping[str, int]) -> bool:
    """True if `place` would succeed."""
    try:
        place(gpu, profiles)
    except MigLayoutError:
        return False
    return True


@dataclass(frozen=True)
class GpuLayout:
    """A valid MIG layout of one GPU: instances at concrete start slots."""

    gpu: str
    placements: tuple[InstancePlacement, ...]

    @property
    def counts(self) -> dict[str, int]:
        """Profile name -> instance count (mig-parted's `mig-devices`)."""
        return dict(sorted(Counter(p.profile for p in self.placements).items(),
                           key=lambda kv: _size_key(get_gpu(self.gpu).profile(kv[0]))))

    @property
    def key(self) -> tuple[tuple[str, int], ...]:
        """The layout's instance counts as sorted (profile, count) pairs; equal layouts share a key."""
        return tuple(sorted(Counter(p.profile for p in self.placements).items()))

    @property
    def used_slots(self) -> frozenset[int]:
        """Memory slices the placed instances occupy."""
        gpu = get_gpu(self.gpu)
        return frozenset(s for p in self.placements for s in gpu.profile(p.profile).slots(p.start))

    @property
    def free_slots(self) -> tuple[int, ...]:
        """Memory slices no instance occupies, ascending."""
        gpu = get_gpu(self.gpu)
        return tuple(s for s in range(gpu.geometry.memory_slices) if s not in self.used_slots)

    @property
    def compute_slices(self) -> int:
        """Compute slices the placed instances use."""
        gpu = get_gpu(self.gpu)
        return sum(gpu.profile(p.profile).compute_slices for p in self.placements)

    def label(self) -> str:
        """Short text such as `1x3g.40gb+1x2g.20gb+2x1g.10gb`."""
        return "+".join(f"{n}x{p}" for p, n in self.counts.items()) or "empty"

    def picture(self, labels: Mapping[int, str] | None = None) -> str:
        """Two-line ASCII drawing of memory slots 0..N-1; `labels` maps start -> text."""
        return layout_picture(self, labels)


def layout_picture(layout: GpuLayout, labels: Mapping[int, str] | None = None) -> str:
    """ASCII picture: a slot ruler and one box per instance (`.` marks a free slot)."""
    gpu = get_gpu(layout.gpu)
    n = gpu.geometry.memory_slices
    texts = {p.start: (labels or {}).get(p.start, p.profile) for p in layout.placements}
    sizes = {p.start: gpu.profile(p.profile).memory_slices for p in layout.placements}
    w = max([6] + [len(t) + 2 for s, t in texts.items() if sizes[s] == 1]
            + [-(-(len(t) + 2) // sizes[s]) for s, t in texts.items()])
    ruler = "".join(f"{i:<{w}}" for i in range(n)).rstrip()
    row, s = "", 0
    while s < n:
        if s in texts:
            span = w * sizes[s]
            row += "[" + texts[s][: span - 2].center(span - 2) + "]"
            s += sizes[s]
        else:
            row += "[" + ".".center(w - 2) + "]"
            s += 1
    return f"slot {ruler}\n     {row}"


@functools.lru_cache(maxsize=256)
def _enumerate(gpu_name: str, allowed: tuple[str, ...], maximal: bool) -> tuple[GpuLayout, ...]:
    gpu = get_gpu(gpu_name)
    names = list(allowed)
    feasible: list[tuple[tuple[str, int], ...]] = []

    def ok(counts: dict[str, int]) -> bool:
        try:
            _place_cached(gpu_name, tuple(sorted((k, v) for k, v in counts.items() if v)))
            return True
        except MigLayoutError:
            return False

    def rec(i: int, counts: dict[str, int]) -> None:
        if i == len(names):
            if any(counts.values()):
                feasible.append(tuple(sorted((k, v) for k, v in counts.items() if v)))
            return
        name = names[i]
        n = 0
        while True:
            counts[name] = n
            rec(i + 1, counts)
            counts[name] = n + 1
            if not ok(counts):  # infeasible -> every bigger count is infeasible too
                break
            n += 1
        counts[name] = 0

    rec(0, {})
    result = []
    for key in feasible:
        counts = dict(key)
        if maximal and any(ok({**counts, p: counts.get(p, 0) + 1}) for p in names):
            continue
        result.append(GpuLayout(gpu_name, _place_cached(gpu_name, key)))
    # Largest instances first, then by label, so output is stable.
    result.sort(key=lambda L: (sorted((-gpu.profile(p.profile).memory_slices for p in L.placements)), L.label()))
    return tuple(result)


def enumerate_layouts(gpu: str | GpuModel, maximal: bool = True,
                      profiles: Iterable[str] | None = None) -> list[GpuLayout]:
    """All valid layouts of `gpu` over `profiles` (default: all its profiles).

    One `GpuLayout` per distinct multiset of profiles (with a canonical placement). With
    `maximal=True` only layouts to which no further instance of an allowed profile can be
    added are returned. Raises `MigLayoutError` if the GPU has no MIG or a profile is unknown.
    """
    model = get_gpu(gpu)
    if model.mig is None:
        raise MigLayoutError(f"{model.name} does not support MIG; it has no MIG layouts")
    allowed = tuple(model.profile_names if profiles is None else dict.fromkeys(profiles))
    try:
        for p in allowed:
            model.profile(p)
    except CatalogError as exc:
        raise MigLayoutError(str(exc)) from None
    return list(_enumerate(model.name, allowed, maximal))


def max_instances(gpu: GpuModel | str, profile: str) -> int:
    """How many instances of `profile` one GPU holds (0 when it has no such profile)."""
    n = 0
    while n < 64 and can_place(gpu, {profile: n + 1}):
        n += 1
    return n
