"""An exact reference for the MIG planners on small fleets, independent of `gpuvalues.planners`.

It reads only catalog data (profiles, allowed starts, slice counts, instance and group
limits, usable memory) and the planner's input dataclasses; it never calls `mig`, `milp` or
`replan`. The route differs from the planner's configuration ILP:

1. every feasible MIG layout of one GPU, by walking its memory slices left to right and
   placing, at each slice, nothing or any profile allowed to start there (every profile,
   media-extension ones included, not only the base ones the planner uses);
2. each instance reduced to its class, the (model, weight) pairs it can serve; layouts whose
   class counts another layout's dominate are dropped (a spare instance costs nothing);
3. the fewest GPUs by increasing totals: per pool, the Pareto set of class counts that t GPUs
   can build, summed over pools, and a memoised DP that gives each class's instances to
   models decides whether every need is met;
4. re-plan: every choice of how many nodes of each current group change (kept GPUs keep
   their instances and count only if used; changed nodes' GPUs take any layout), first the
   fewest GPUs under the budgets, then the fewest changes within `gpu_slack` of it.

Sizes are meant for a few pools, a few GPUs and a few models (property tests); it is
exponential beyond.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction
from functools import lru_cache
from typing import Mapping, Sequence

from gpuvalues.catalog import get_gpu

GIB_PER_GB = Fraction(10 ** 9, 2 ** 30)   # demands are in GB (10^9 bytes), usable memory in GiB


@lru_cache(maxsize=None)
def all_layouts(gpu_name: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Every feasible MIG layout of one GPU (the empty one too) as sorted (profile, count) tuples."""
    gpu = get_gpu(gpu_name)
    geo = gpu.mig
    out: set = set()

    def ok(counts: Counter) -> bool:
        if any(counts[p.name] > p.max_instances for p in geo.profiles):
            return False
        if any(sum(counts[n] for n in lim.profiles) > lim.max for lim in geo.limits):
            return False
        return sum(gpu.profile(n).compute_slices * c for n, c in counts.items()) <= geo.compute_slices

    def walk(slot: int, chosen: Counter) -> None:
        if slot >= geo.memory_slices:
            if ok(chosen):
                out.add(tuple(sorted((n, c) for n, c in chosen.items() if c)))
            return
        walk(slot + 1, chosen)
        for p in geo.profiles:
            if slot in p.starts and slot + p.memory_slices <= geo.memory_slices:
                chosen[p.name] += 1
                if ok(chosen):
                    walk(slot + p.memory_slices, chosen)
                chosen[p.name] -= 1

    walk(0, Counter())
    return tuple(sorted(out))


def _need(d) -> Fraction:
    return Fraction(d.replicas) if d.replicas is not None else Fraction(d.throughput)


def _weight(d, pool, gpu, itype: str, mem_gib: float) -> Fraction | None:
    """What one instance of `itype` gives demand `d` in `pool` (None: it cannot serve it)."""
    if d.pools is not None and pool.name not in d.pools:
        return None
    if itype in d.excluded_profiles:
        return None
    if d.allowed_profiles is not None and itype not in d.allowed_profiles:
        return None
    if d.memory_gb is not None and Fraction(d.memory_gb) * GIB_PER_GB > Fraction(mem_gib) + Fraction(1, 10 ** 9):
        return None
    if d.throughput is None:
        return Fraction(1)
    t = None
    for key, v in d.throughput_per_instance.items():
        g, _, p = key.rpartition("/")
        if p == itype and g and get_gpu(g).name == gpu.name:
            t = v
    if t is None:
        t = d.throughput_per_instance.get(itype)
    return Fraction(t) if t else None


def _mig_mode(pool) -> bool:
    return bool(pool.mig_enabled and get_gpu(pool.gpu).mig is not None and not pool.sharing)


class Fleet:
    """The reference's view of pools and demands: instance classes and per-GPU layout vectors."""

    def __init__(self, demands: Sequence, pools: Sequence) -> None:
        self.demands, self.pools = list(demands), list(pools)
        self.needs = tuple(_need(d) for d in self.demands)
        classes: dict[tuple, int] = {}
        self.cls: list[dict[str, int | None]] = []     # per pool: itype -> class index (None: serves nothing)
        for pool in self.pools:
            gpu = get_gpu(pool.gpu)
            types = ([(p.name, p.memory_gib) for p in gpu.mig.profiles] if _mig_mode(pool)
                     else [("gpu", gpu.memory_gib)])
            m = {}
            for name, mem in types:
                sig = tuple((i, w) for i, d in enumerate(self.demands)
                            for w in [_weight(d, pool, gpu, name, mem)] if w is not None)
                m[name] = classes.setdefault(sig, len(classes)) if sig else None
            self.cls.append(m)
        # integers for the DP: each model's need and weights scaled by their common denominator
        scale = []
        for i, need in enumerate(self.needs):
            ws = [w for sig in classes for j, w in sig if j == i] + [need]
            den = 1
            for w in ws:
                den = den * w.denominator // math.gcd(den, w.denominator)
            scale.append(den)
        self.needs = tuple(int(n * scale[i]) for i, n in enumerate(self.needs))
        self.classes = [tuple((i, int(w * scale[i])) for i, w in sig)
                        for sig, _ in sorted(classes.items(), key=lambda kv: kv[1])]
        # more instances of a class than its models could use change nothing: counts are capped
        self.caps = tuple(int(sum(-(-self.needs[i] // w) for i, w in sig)) for sig in self.classes)
        self.layouts = [self._pool_layouts(k) for k in range(len(self.pools))]

    def vector(self, k: int, devices: Mapping[str, int] | None) -> tuple[int, ...]:
        """The class counts of one GPU of pool `k` with these mig-devices (None: MIG off)."""
        v = [0] * len(self.classes)
        if _mig_mode(self.pools[k]):
            items = [] if devices is None else list(devices.items())
        else:
            items = [("gpu", 1)] if devices is None else []
        for name, n in items:
            c = self.cls[k].get(name)
            if c is not None:
                v[c] = min(v[c] + n, self.caps[c])
        return tuple(v)

    def add(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        """Two class-count vectors together (capped)."""
        return tuple(min(x + y, c) for x, y, c in zip(a, b, self.caps))

    def total(self, vecs, start: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """The capped sum of `vecs` (onto `start`)."""
        out = (0,) * len(self.classes) if start is None else start
        for v in vecs:
            out = self.add(out, v)
        return out

    def _pool_layouts(self, k: int) -> list[tuple[int, ...]]:
        pool = self.pools[k]
        if _mig_mode(pool):
            vecs = {self.vector(k, dict(lay)) for lay in all_layouts(get_gpu(pool.gpu).name)}
        else:
            vecs = {self.vector(k, None)}
        return pareto(v for v in vecs if any(v))

    def feasible(self, counts: tuple[int, ...]) -> bool:
        """Can instances with these class counts meet every need? (DP over classes)"""
        return _cover(tuple(self.classes), counts, self.needs)


def pareto(vecs) -> list[tuple[int, ...]]:
    """The vectors no other vector dominates (componentwise >=)."""
    vecs = sorted(set(vecs), key=lambda v: -sum(v))
    out: list[tuple[int, ...]] = []
    for v in vecs:
        if not any(all(a >= b for a, b in zip(w, v)) for w in out):
            out.append(v)
    return out


@lru_cache(maxsize=200_000)
def _cover(classes: tuple, counts: tuple[int, ...], needs: tuple[int, ...]) -> bool:
    needs = tuple(max(0, n) for n in needs)
    if not any(needs):
        return True
    if not classes:
        return False
    sig, rest = classes[0], classes[1:]
    c, more = counts[0], counts[1:]
    useful = [(i, w) for i, w in sig if needs[i] > 0]
    if c == 0 or not useful:
        return _cover(rest, more, needs)
    if len(useful) == 1:   # one model can use them: give it all it needs
        (i, w), = useful
        left = list(needs)
        left[i] -= c * w
        return _cover(rest, more, tuple(left))
    # give a_i instances to model i (no more than it still needs), the rest stay spare
    caps = [min(c, -(-needs[i] // w)) for i, w in useful]
    for split in itertools.product(*(range(int(cap) + 1) for cap in caps)):
        if sum(split) > c:
            continue
        left = list(needs)
        for (i, w), a in zip(useful, split):
            left[i] -= a * w
        if _cover(rest, more, tuple(left)):
            return True
    return False


def _reach(fleet: Fleet, k: int, kept: Sequence[tuple[int, ...]], free: int, t: int,
           memo: dict) -> list[tuple[int, ...]]:
    """Pareto set of class counts of exactly `t` used GPUs in pool k: some of the `kept`
    GPUs (as they are) plus GPUs of changed nodes (at most `free`) with any layout."""
    zero = (0,) * len(fleet.classes)
    if ("new", 0) not in memo:
        memo[("new", 0)] = [zero]
        for u in range(len(kept) + 1):
            memo[("kept", u)] = pareto(fleet.total(c) for c in itertools.combinations(kept, u))
    for n in range(1, min(t, free) + 1):
        if ("new", n) not in memo:
            memo[("new", n)] = pareto(fleet.add(s, v) for s in memo[("new", n - 1)] for v in fleet.layouts[k])
    out = []
    for u in range(min(t, len(kept)) + 1):
        if t - u <= free:
            out += [fleet.add(a, b) for a in memo[("kept", u)] for b in memo[("new", t - u)]]
    return pareto(out)


def _fewest(fleet: Fleet, kept: Sequence[Sequence[tuple[int, ...]]], free: Sequence[int],
            limit: int | None = None) -> int | None:
    """Fewest GPUs (at most `limit`) that meet every need, per pool from `kept` GPUs and `free` new ones."""
    cap = [len(kept[k]) + free[k] for k in range(len(fleet.pools))]
    top = sum(cap) if limit is None else min(sum(cap), limit)
    cache: dict = {}
    memos: list[dict] = [{} for _ in fleet.pools]
    for total in range(top + 1):
        for split in _splits(total, cap):
            sets = []
            for k, t in enumerate(split):
                if (k, t) not in cache:
                    cache[(k, t)] = _reach(fleet, k, kept[k], free[k], t, memos[k])
                sets.append(cache[(k, t)])
            if any(not s for s in sets):
                continue
            for combo in itertools.product(*sets):
                if fleet.feasible(fleet.total(combo)):
                    return total
    return None


def _splits(total: int, cap: Sequence[int]):
    if not cap:
        if total == 0:
            yield ()
        return
    for t in range(min(total, cap[0]) + 1):
        for rest in _splits(total - t, cap[1:]):
            yield (t,) + rest


def fewest_gpus(demands: Sequence, pools: Sequence) -> int | None:
    """The plan's first objective: fewest GPUs over the pools' capacities (None: no plan)."""
    fleet = Fleet(demands, pools)
    return _fewest(fleet, [[] for _ in pools], [p.gpus_per_node * p.nodes for p in pools])


def replan_optimum(demands: Sequence, pools: Sequence, nodes: Sequence, *, gpu_slack: int = 0,
                   max_node_changes: int | None = None,
                   max_unavailable_per_pool: int | None = None) -> tuple[int, int] | None:
    """(fewest GPUs, fewest changed nodes within `gpu_slack` of it) for a running fleet.

    `nodes`: (pool name, per-GPU mig-devices or None) for every listed node; a pool's nodes
    beyond those listed are unconfigured (all GPUs None). None when no re-plan fits."""
    fleet = Fleet(demands, pools)
    index = {p.name: k for k, p in enumerate(pools)}
    groups: list[Counter] = [Counter() for _ in pools]
    for pool_name, gpus in nodes:
        groups[index[pool_name]][tuple(None if g is None else tuple(sorted(g.items())) for g in gpus)] += 1
    for k, p in enumerate(pools):
        left = p.nodes - sum(groups[k].values())
        if left:
            groups[k][(None,) * p.gpus_per_node] += left
    glist = [sorted(g.items(), key=str) for g in groups]

    def choices():
        per_pool = [list(itertools.product(*(range(n + 1) for _, n in glist[k]))) for k in range(len(pools))]
        for combo in itertools.product(*per_pool):
            per = [sum(c) for c in combo]
            if max_unavailable_per_pool is not None and max(per, default=0) > max_unavailable_per_pool:
                continue
            if max_node_changes is not None and sum(per) > max_node_changes:
                continue
            yield combo, sum(per)

    def gpus_for(combo, limit=None):
        kept, free = [], []
        for k, pool in enumerate(pools):
            ks = []
            for (sig, n), ch in zip(glist[k], combo[k]):
                for _ in range(n - ch):
                    ks += [v for g in sig for v in [fleet.vector(k, None if g is None else dict(g))] if any(v)]
            kept.append(ks)
            free.append(pool.gpus_per_node * sum(combo[k]))
        return _fewest(fleet, kept, free, limit)

    allowed = list(choices())
    # changing a node never costs GPUs (it may keep its layout): the maximal choices give the optimum
    best = None
    for combo, _ in allowed:
        if any(all(a >= b for a, b in zip(_flat(o), _flat(combo))) and o != combo for o, _ in allowed):
            continue
        g = gpus_for(combo, best)
        if g is not None and (best is None or g < best):
            best = g
    if best is None:
        return None
    for combo, n in sorted(allowed, key=lambda cn: cn[1]):
        if gpus_for(combo, best + gpu_slack) is not None:
            return best, n
    raise AssertionError("unreachable: the optimum's own choice fits")


def _flat(combo):
    return tuple(x for c in combo for x in c)
