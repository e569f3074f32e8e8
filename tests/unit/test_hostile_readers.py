"""The readers' new machinery (issue 25), against independent definitions on generated
cases: the JSON position finder against a position-tracking parse, duplicate keys, the
Kubernetes name and label rules against apimachinery's regexes as written in
validation.go, `topo --best`'s link classes against their O(m^2 x classes) definition,
and its stated bound against brute force."""
from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuvalues import kube
from gpuvalues.yamlio.loader import parse_yaml
from gpuvalues.errors import GpuValuesError, InventoryError
from gpuvalues.io import cluster, present
from gpuvalues.planners.scheduling import topology

_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                     max_leaves=20)


def _paths(data, path=()):
    yield path
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, path + (i,))


@settings(max_examples=200, deadline=None)
@given(data=_JSON, indent=st.sampled_from([None, 1, 4]))
def test_json_locate_finds_every_value(data, indent):
    """At the offset found for each path, the JSON decoder reads exactly that path's value."""
    text = json.dumps(data, indent=indent)
    for path in _paths(data):
        value = data
        for step in path:
            value = value[step]
        i = cluster._json_locate(text, 0, path)
        assert json.JSONDecoder().raw_decode(text, i)[0] == value, (text, path)


def test_json_duplicates_are_placed():
    text = '{"a": 1,\n "b": {"c": [1, {"d": 1, "d": 2}]}}'
    path, at = cluster._json_duplicate(text, 0)
    assert path == ("b", "c", 1, "d") and text[at:].startswith('"d": 2')
    assert cluster._json_duplicate('{"a": {"b": 1}, "c": [1, 2]}', 0) is None        # control


def test_yaml_duplicate_keys_refused_in_data_files():
    with pytest.raises(GpuValuesError) as exc:
        parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", source="f", unique_keys=True)
    assert exc.value.code == "GV039" and (exc.value.line, exc.value.column) == (4, 3)
    assert parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\n") == {"a": 1, "b": {"c": 2}}       # the old reading
    assert parse_yaml("x: &m {k: 1}\ny: {<<: *m, k: 2}\n", unique_keys=True)["y"] == {"k": 2}


# apimachinery/pkg/util/validation/validation.go, as written there
_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(f"{_DNS1123_LABEL}(\\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile("([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile("(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_NAMES = st.one_of(st.from_regex(r"[a-z0-9.\-]{1,12}", fullmatch=True), st.text(max_size=12),
                   st.sampled_from(["a" * 253, "a" * 254, "a\n", "$(id)", "a.-b", "-a", "a..b", "ab\n"]))


@settings(max_examples=300, deadline=None)
@given(name=_NAMES)
def test_node_names_as_the_api_server_validates_them(name):
    upstream = len(name) <= 253 and bool(_DNS1123_SUBDOMAIN.fullmatch(name))   # IsDNS1123Subdomain
    assert (kube.node_name_problem(name) is None) == upstream


@settings(max_examples=300, deadline=None)
@given(prefix=st.none() | _NAMES, name=_NAMES, value=_NAMES)
def test_labels_as_the_api_server_validates_them(prefix, name, value):
    key = name if prefix is None else f"{prefix}/{name}"
    ok_key = (len(name) <= 63 and bool(_QUALIFIED_NAME.fullmatch(name)) and "/" not in name and
              (prefix is None or (len(prefix) <= 253 and bool(_DNS1123_SUBDOMAIN.fullmatch(prefix)))))
    ok_value = len(value) <= 63 and bool(_LABEL_VALUE.fullmatch(value))
    assert (kube.label_problem(key, value) is None) == (ok_key and ok_value), (key, value)


def test_quantities_and_counts_are_bounded():
    from gpuvalues.planners.scheduling.inventory import resource_amount, gpu_info_from_labels

    with pytest.raises(InventoryError, match="out of range"):
        resource_amount("cpu", "1e400")
    with pytest.raises(InventoryError, match="out of range"):
        resource_amount("nvidia.com/gpu", str(2 ** 21))
    assert resource_amount("nvidia.com/gpu", str(2 ** 20)) == 2 ** 20                  # the bound itself
    assert resource_amount("memory", "4Ei") == 4 * 2 ** 60
    for bad in ("abc", "1" + "0" * 30, "-1", "٣", "1.5"):
        with pytest.raises(InventoryError):
            gpu_info_from_labels({"nvidia.com/gpu.count": bad}, {})
    assert gpu_info_from_labels({"nvidia.com/gpu.count": "1024"}, {}).count == 1024


# ------------------------------------------------------------------ topo --best
def _classes_by_definition(score, m, alone):
    cls, reps = [-1] * m, []
    for i in range(m):
        if i not in alone:
            for c, r in enumerate(reps):
                if r not in alone and all(score[i][k] == score[r][k] and score[k][i] == score[k][r]
                                          for k in range(m) if k not in (i, r)):
                    cls[i] = c
                    break
        if cls[i] < 0:
            cls[i] = len(reps)
            reps.append(i)
    return cls


@st.composite
def _symmetric(draw):
    m = draw(st.integers(2, 9))
    values = draw(st.lists(st.sampled_from([10, 20, 40, 130, 1210]), min_size=m * m, max_size=m * m))
    score = [[0] * m for _ in range(m)]
    for i in range(m):
        for j in range(i + 1, m):
            score[i][j] = score[j][i] = values[i * m + j]
    alone = set(draw(st.lists(st.integers(0, m - 1), max_size=2)))
    return score, m, alone


@settings(max_examples=300, deadline=None)
@given(case=_symmetric())
def test_link_classes_equal_their_definition(case):
    score, m, alone = case
    assert topology._twin_classes(score, m, alone) == _classes_by_definition(score, m, alone)


@settings(max_examples=100, deadline=None)
@given(case=_symmetric(), size=st.integers(2, 4))
def test_the_stated_bound_is_at_least_the_best_set(case, size):
    score, m, _ = case
    if size > m:
        return
    best = max(sum(score[a][b] for a, b in itertools.combinations(s, 2))
               for s in itertools.combinations(range(m), size))
    assert topology._score_bound(score, size) >= best


def test_a_greedy_answer_says_so_with_its_bound():
    n = 256                                     # past MAX_EXACT_GPUS: greedy, stated
    links = tuple(tuple("X" if i == j else ("NV4" if i // 2 == j // 2 else "SYS") for j in range(n))
                  for i in range(n))
    topo = topology.Topology(gpus=tuple(range(n)), links=links)
    report = present.topology_report(topo, best=2)["bestGpuSet"]
    assert report["gpus"] == [0, 1] and report["exact"] is False and report["scoreUpperBound"] >= report["score"]
    small = topology.Topology(gpus=tuple(range(8)), links=tuple(r[:8] for r in links[:8]))
    exact = present.topology_report(small, best=2)["bestGpuSet"]
    assert exact["exact"] is True and exact["scoreUpperBound"] == exact["score"]
