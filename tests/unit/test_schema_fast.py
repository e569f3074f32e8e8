"""The fast schema check (gpuvalues.schemas.is_valid) gives jsonschema's verdict.

`validate` skips importing jsonschema when the fast check passes, so a fast "valid"
that jsonschema would refuse would hide an error. Checked two ways, each case against
Draft202012Validator itself: every keyword the fast path models on tiny schemas over a
pool of awkward values (True vs 1, 1.0 as an integer, NaN, empty containers), and the
project's three schemas on thousands of seeded mutations of real specs, values and
inventories. "Unsure" (the fast path declines) is allowed, but must stay rare.
"""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from gpuvalues import schemas
from gpuvalues.yamlio.loader import load_yaml
from gpuvalues.checks.rules import chart_defaults, coalesce

ROOT = Path(__file__).resolve().parents[2]

POOL = [None, True, False, 0, 1, -1, 2, 1.0, 0.5, -0.0, 2 ** 70, float("nan"), float("inf"),
        "", "a", "A_b", "1", "true", "img:latest", "x" * 70, [], [1], [1, 1.0], ["a", "a"],
        ["a", "b"], [True, 1], [None], [[1], [1]], {}, {"a": 1}, {"b": "x"}, {"a": True}]


def verdict(schema, instance):
    """The fast path's answer: True, False or "unsure"."""
    check = schemas.fast_check(schema)
    assert check is not None, f"the fast path does not model {schema}"
    try:
        return check(instance)
    except schemas._Unsure:
        return "unsure"


def reference(schema, instance) -> bool:
    return Draft202012Validator(schema).is_valid(instance)


KEYWORD_SCHEMAS = [
    {"type": t} for t in ("object", "array", "string", "boolean", "null", "number", "integer")
] + [
    {"type": ["integer", "string"]}, True, False, {}, {"not": {"type": "string"}},
    {"properties": {"a": {"type": "integer"}}}, {"required": ["a"]},
    {"properties": {"a": {}}, "additionalProperties": False},
    {"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
    {"patternProperties": {"^a": True, "^b$": True}, "additionalProperties": False},
    {"propertyNames": {"pattern": "^[a-z]+$", "maxLength": 1}},
    {"items": {"type": "integer"}}, {"items": False}, {"minItems": 1}, {"maxItems": 1},
    {"uniqueItems": True}, {"uniqueItems": False}, {"minLength": 1}, {"maxLength": 1},
    {"minProperties": 1}, {"maxProperties": 0},
    {"minimum": 0}, {"maximum": 1}, {"exclusiveMinimum": 0}, {"exclusiveMaximum": 1.0},
    {"pattern": "^[a-z]"}, {"not": {"pattern": ":latest(@|$)"}},
    {"const": 1}, {"const": True}, {"const": [1]}, {"const": {"a": 1}}, {"const": None},
    {"enum": [0, "a", None, [1], {"a": 1}]}, {"enum": [False]},
    {"anyOf": [{"type": "integer"}, {"type": "string"}]},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {"allOf": [{"type": "number"}, {"minimum": 1}]},
    {"if": {"type": "integer"}, "then": {"minimum": 1}, "else": {"type": "string"}},
    {"if": {"required": ["a"]}, "then": {"required": ["b"]}}, {"then": False},
    {"$defs": {"n": {"type": "integer"}}, "items": {"$ref": "#/$defs/n"}},
    {"$defs": {"t": {"type": "object", "properties": {"k": {"$ref": "#/$defs/t"}},
                     "additionalProperties": False}}, "$ref": "#/$defs/t"},
]


@pytest.mark.parametrize("schema", KEYWORD_SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_each_keyword_as_jsonschema_judges(schema):
    unsure = 0
    for instance in POOL + [{"a": v} for v in POOL] + [{"a": 1, "b": v} for v in POOL]:
        got = verdict(schema, instance)
        if got == "unsure":
            unsure += 1
            continue
        assert got == reference(schema, instance), (schema, instance)
    assert unsure <= 3      # uniqueItems on [True, 1], [None], [[1], [1]]


@pytest.mark.parametrize("schema", [{"format": "ipv4"}, {"multipleOf": 2},
                                    {"items": {"$ref": "other.json#/x"}},
                                    {"properties": {"a": {"$id": "x", "type": "string"}}},
                                    {"prefixItems": [{}], "items": False},
                                    {"$schema": "http://json-schema.org/draft-07/schema#"},
                                    {"items": {"$schema": schemas._DIALECT}}])
def test_what_it_does_not_model_goes_to_jsonschema(schema):
    assert schemas.fast_check(schema) is None
    assert schemas.is_valid(schema, "1.2.3.4") is False


# ------------------------------------------------------------------ real documents

def _leaves(x, path=()):
    yield path
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, path + (i,))


def _nudged(v, rng):
    """A value near `v` that is likely to cross a bound or pattern."""
    if isinstance(v, bool):
        return rng.choice([not v, int(v), str(v).lower()])
    if isinstance(v, (int, float)):
        return rng.choice([v + 1, v - 1, -v, v * 1000, float(v), v + 0.5, 0, str(v)])
    if isinstance(v, str):
        return rng.choice([v + "X", v.upper(), v[:-1], "", v + ":latest", v * 9, " " + v, 7])
    if isinstance(v, list):
        return rng.choice([[], v + v[:1], v[:-1], v * 20, {}])
    if isinstance(v, dict):
        return rng.choice([{}, [], {**v, "unknownKey": 1}, dict(list(v.items())[1:])])
    return rng.choice(POOL)


def _mutated(doc, rng):
    out = copy.deepcopy(doc)
    for _ in range(rng.choice([1, 1, 2, 3])):
        paths = list(_leaves(out))[1:]
        if not paths:
            return out
        *parent_path, last = rng.choice(paths)
        parent = out
        for p in parent_path:
            parent = parent[p]
        if isinstance(parent, dict) and rng.random() < 0.15:
            del parent[last]
        else:
            parent[last] = _nudged(parent[last], rng) if rng.random() < 0.8 else rng.choice(POOL)
    return out


def _specs():
    return [load_yaml(p).data for p in sorted((ROOT / "examples").glob("*.yaml"))]


def _values():
    """Every example's releases and the chart's scenario values, merged over the chart
    defaults as check_values merges them."""
    from gpuvalues.checks.spec import load_spec
    from gpuvalues.fleet import build_fleet

    defaults = chart_defaults()
    docs = [dict(r.values) for p in sorted((ROOT / "examples").glob("*.yaml"))
            for r in build_fleet(load_spec(p)).releases]
    files = sorted((ROOT / "charts" / "gpu-inference" / "ci").glob("*-values.yaml")) + \
        sorted((ROOT / "examples" / "values").glob("*.yaml"))
    docs += [load_yaml(p).data or {} for p in files]
    return [coalesce(defaults, d) for d in docs]


def _inventories():
    from gpuvalues.planners.scheduling.inventory import from_nvidia_smi

    csv = "index, name, memory.total [MiB], mig.mode.current\n" + "".join(
        f"{i}, NVIDIA H100 80GB HBM3, 81559 MiB, Disabled\n"
        for i in range(8))
    topo = (ROOT / "examples" / "topology" / "hgx-h100-nv18.txt").read_text()
    return [from_nvidia_smi({"h100": (csv, topo), "t4": (csv.replace("H100 80GB HBM3", "T4"),
                                                        None)}).to_dict()]


@pytest.mark.parametrize("schema_path, docs, n", [
    (schemas.SPEC_SCHEMA, _specs, 300),
    (schemas.VALUES_SCHEMA, _values, 15),
    (schemas.INVENTORY_SCHEMA, _inventories, 1000),
])
def test_real_documents_and_their_mutations_as_jsonschema_judges(schema_path, docs, n):
    schema = schemas.load_schema(schema_path)
    ref = Draft202012Validator(schema)
    rng = random.Random(15)
    seen = {True: 0, False: 0, "unsure": 0}
    for doc in docs():
        assert verdict(schema, doc) is True and ref.is_valid(doc)
        for _ in range(n):
            instance = _mutated(doc, rng)
            got = verdict(schema, instance)
            seen[got] += 1
            if got != "unsure":
                assert got == ref.is_valid(instance), (instance, list(ref.iter_errors(instance))[:1])
    assert seen["unsure"] <= 0.02 * sum(seen.values())
    assert min(seen[True], seen[False]) >= 0.1 * sum(seen.values()), seen
