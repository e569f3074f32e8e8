"""MIG placement: NVIDIA's documented combinations, hand-computed cases, and a brute-force oracle.

The oracle below is written independently of gpuvalues.planners.mig.geometry: it walks the memory slots left
to right and tries every (profile, allowed start) that begins at the slot, so it lists every
set of non-overlapping instances; a multiset is feasible when some such set realises it.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuvalues import catalog
from gpuvalues.errors import GpuValuesError, MigLayoutError
from gpuvalues.io import present
from gpuvalues.planners.mig import geometry as mig

DATA = Path(__file__).parent / "data"
OPERATOR = yaml.safe_load((DATA / "operator_mig_configs.yaml").read_text())
MIG_GPUS = [g.name for g in catalog.all_gpus() if g.mig]


@lru_cache(maxsize=None)
def oracle(gpu_name: str) -> frozenset:
    """Every feasible profile multiset (as a sorted tuple of (name, count))."""
    gpu = catalog.get_gpu(gpu_name)
    n = gpu.mig.memory_slices
    found = set()

    def walk(slot, chosen):
        if slot >= n:
            c = Counter(chosen)
            if not c:
                return
            if any(c[p.name] > p.max_instances for p in gpu.profiles):
                return
            if any(sum(c[x] for x in lim.profiles) > lim.max for lim in gpu.mig.limits):
                return
            if sum(gpu.profile(x).compute_slices * k for x, k in c.items()) > gpu.mig.compute_slices:
                return
            found.add(tuple(sorted(c.items())))
            return
        walk(slot + 1, chosen)  # leave the slot empty
        for p in gpu.profiles:
            if slot in p.starts and slot + p.memory_slices <= n:
                walk(slot + p.memory_slices, chosen + [p.name])

    walk(0, [])
    return frozenset(found)


def assert_valid(gpu_name, placements, wanted):
    gpu = catalog.get_gpu(gpu_name)
    used = set()
    for prof, start in placements:
        p = gpu.profile(prof)
        assert start in p.starts, (prof, start)
        slots = set(range(start, start + p.memory_slices))
        assert not (slots & used), placements
        used |= slots
    assert Counter(p for p, _ in placements) == Counter(wanted)


@pytest.mark.parametrize("gpu", MIG_GPUS)
def test_all_layouts_match_oracle(gpu):
    ours = {L.key for L in mig.enumerate_layouts(gpu, maximal=False)}
    assert ours == set(oracle(gpu))
    for L in mig.enumerate_layouts(gpu, maximal=False):
        assert_valid(gpu, L.placements, Counter(dict(L.key)))


@pytest.mark.parametrize("gpu", MIG_GPUS)
def test_maximal_layouts_match_oracle(gpu):
    feas = oracle(gpu)
    names = catalog.get_gpu(gpu).profile_names

    def plus(key, p):
        c = Counter(dict(key))
        c[p] += 1
        return tuple(sorted(c.items()))

    expected = {k for k in feas if not any(plus(k, p) in feas for p in names)}
    assert {L.key for L in mig.enumerate_layouts(gpu)} == expected


def test_a100_base_maximal_layouts_hand_computed():
    # Hand-derived from the A100 -lgipp rule (1g {0..6}, 2g {0,2,4}, 3g {0,4}:4, 4g {0}:4, 7g {0}:8).
    expected = {
        "1x7g.40gb", "1x4g.20gb+1x3g.20gb", "1x4g.20gb+1x2g.10gb+1x1g.5gb", "1x4g.20gb+3x1g.5gb",
        "2x3g.20gb", "1x3g.20gb+2x2g.10gb", "1x3g.20gb+1x2g.10gb+2x1g.5gb", "1x3g.20gb+4x1g.5gb",
        "3x2g.10gb+1x1g.5gb", "2x2g.10gb+3x1g.5gb", "1x2g.10gb+5x1g.5gb", "7x1g.5gb",
    }
    got = {L.label() for L in mig.enumerate_layouts("A100-40GB", profiles=["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"])}
    assert got == expected


@pytest.mark.parametrize("entry", OPERATOR["balanced"], ids=lambda e: e["device_filter"][0])
def test_operator_all_balanced_places(entry):
    ids = {f: g.name for g in catalog.all_gpus() for f in g.device_filter}
    for f in entry["device_filter"]:
        if f in ids:
            placements = mig.place(ids[f], entry["mig-devices"])
            assert_valid(ids[f], placements, entry["mig-devices"])


@pytest.mark.parametrize("entry", OPERATOR["all_profile"], ids=lambda e: e["profile"])
def test_operator_all_profile_places_and_one_more_fails(entry):
    for gpu in entry["gpus"]:
        assert_valid(gpu, mig.place(gpu, {entry["profile"]: entry["count"]}), {entry["profile"]: entry["count"]})
        with pytest.raises(MigLayoutError, match="allows at most"):
            mig.place(gpu, {entry["profile"]: entry["count"] + 1})


def test_issue_example_message():
    with pytest.raises(MigLayoutError) as exc:
        mig.place("A100-40GB", ["4g.20gb", "2g.10gb", "2g.10gb"])
    msg = str(exc.value)
    assert "4g.20gb uses slots 0-3" in msg
    assert "no allowed start left for 2g.10gb #2 (allowed 0, 2, 4" in msg
    assert "free slots: 6, 7" in msg


@pytest.mark.parametrize("profiles, pattern", [
    (["3g.40gb", "3g.40gb", "1g.10gb"], "memory slices"),               # 3g takes 4 memory slices: 4+4+1 > 8
    (["1g.10gb+me", "1g.10gb+me"], "at most 1"),                        # one media-extension instance
    (["2g.20gb"] * 4, "at most 3"),
    (["1g.10gb"] * 8, "at most 7"),
    # memory adds up to 8, but a 1-slice profile cannot start at slot 7
    (["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb", "1g.10gb"], "no allowed start left for 1g.10gb #2"),
    (["7g.80gb", "1g.10gb"], "memory slices"),
    (["3g.20gb"], "does not exist on A100-80GB"),
    (["1g.5gb"], "its profiles are: 1g.10gb"),
])
def test_invalid_a100_80gb(profiles, pattern):
    with pytest.raises(MigLayoutError, match=pattern):
        mig.place("A100-80GB", profiles)


@pytest.mark.parametrize("gpu, profiles, expected", [
    # 4g+3g: documented valid since R510 (MIG User Guide, concepts)
    ("A100-40GB", ["4g.20gb", "3g.20gb"], [("4g.20gb", 0), ("3g.20gb", 4)]),
    # 3 x 2g fill slots 0-5; the 1g goes to 6 (slot 7 is only reachable by 2-slice or wider profiles)
    ("A100-80GB", {"2g.20gb": 3, "1g.10gb": 1}, [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)]),
    ("A100-80GB", {"1g.20gb": 4}, [("1g.20gb", 0), ("1g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6)]),
    ("A30", {"2g.12gb": 1, "1g.6gb": 2}, [("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb", 3)]),
])
def test_hand_computed_placements(gpu, profiles, expected):
    assert [tuple(p) for p in mig.place(gpu, profiles)] == expected


def test_a30_media_extensions_are_exclusive():
    with pytest.raises(MigLayoutError, match="media-extensions"):
        mig.place("A30", ["1g.6gb+me", "2g.12gb+me"])


def test_no_mig_gpu_rejected():
    with pytest.raises(MigLayoutError, match="does not support MIG"):
        mig.place("L4", ["1g.6gb"])
    with pytest.raises(MigLayoutError, match="does not support MIG"):
        mig.enumerate_layouts("T4")


def test_bad_count_and_unknown_gpu():
    with pytest.raises(MigLayoutError, match="non-negative integer"):
        mig.place("A100-80GB", {"1g.10gb": -1})
    with pytest.raises(GpuValuesError, match="unknown GPU model"):
        mig.place("K80", ["1g.10gb"])


def test_picture_shows_slots_and_free():
    L = mig.Layout("A100-80GB", tuple(mig.place("A100-80GB", {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1})))
    pic = L.picture().splitlines()
    assert pic[0].split() == ["slot"] + [str(i) for i in range(8)]
    assert pic[1].count("[") == 4 and "3g.40gb" in pic[1] and pic[1].rstrip().endswith(".   ]")
    assert L.free_slots == (7,)


def test_svg_is_xml():
    import xml.etree.ElementTree as ET
    L = mig.enumerate_layouts("A100-80GB")[0]
    root = ET.fromstring(present.layouts_svg([("pool a", L)]))
    assert root.tag.endswith("svg")


@settings(max_examples=300, deadline=None)
@given(gpu=st.sampled_from(MIG_GPUS), data=st.data())
def test_place_agrees_with_oracle(gpu, data):
    names = catalog.get_gpu(gpu).profile_names
    counts = data.draw(st.dictionaries(st.sampled_from(names), st.integers(1, 4), min_size=1, max_size=4))
    key = tuple(sorted(counts.items()))
    if key in oracle(gpu):
        assert_valid(gpu, mig.place(gpu, counts), counts)
    else:
        with pytest.raises(MigLayoutError):
            mig.place(gpu, counts)


def test_gb200_newer_driver_name_is_placed():
    # newer drivers print 1g.24gb for GB200's one-slice profile (NVIDIA/gpu-operator#1303
    # `nvidia-smi mig -lgip`: "MIG 1g.24gb 19 7/7 20.00"); placement accepts it as 1g.23gb
    layout = mig.place("GB200", ["1g.24gb"] * 6 + ["1g.24gb+me"])
    assert sorted(p.profile for p in layout) == ["1g.23gb"] * 6 + ["1g.23gb+me"]
    with pytest.raises(MigLayoutError, match=r"2 x 1g.23gb\+me requested"):
        mig.place("GB200", ["1g.24gb+me", "1g.23gb+me"])     # one limit across both names
    with pytest.raises(MigLayoutError, match="does not exist"):
        mig.place("GB200", ["1g.25gb"])
