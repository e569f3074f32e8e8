"""The project's JSON Schemas (schemas/, draft 2020-12): where they are, read once,
and a format-checking validator per schema. Used by validation and by the inventory.

`is_valid(schema, instance)` is the start-up fast path: a compiled check of the keywords
our schemas use, as strict as jsonschema's Draft 2020-12 validator, that answers True
only when jsonschema would find no error. Anything it does not model (a keyword, a
`format`, a non-local `$ref`, a Python type YAML/JSON does not produce, `uniqueItems` on
items other than strings and numbers) makes it answer False, and the caller asks
jsonschema, which also words every error: importing jsonschema alone costs about 40 ms,
more than the whole check. tests/unit/test_schema_fast.py compares the two verdicts.
"""
from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuvalues.bundle import INVENTORY_SCHEMA, SCHEMAS, SPEC_SCHEMA, VALUES_SCHEMA  # noqa: F401 (re-exported)
from gpuvalues.errors import GpuValuesError

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


@functools.lru_cache(maxsize=8)
def _schema_cached(path: str, mtime: float) -> dict[str, Any]:
    try:
        schema: dict[str, Any] = json.loads(Path(path).read_text())
        return schema
    except FileNotFoundError:
        raise GpuValuesError(f"schema not found: {path}") from None


def load_schema(path: str | Path) -> dict[str, Any]:
    """Read a JSON Schema file (cached until it changes on disk)."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime
    except FileNotFoundError:
        raise GpuValuesError(f"schema not found: {p}") from None
    return _schema_cached(str(p), mtime)


_VALIDATORS: dict[int, tuple[dict[str, Any], Draft202012Validator]] = {}


def validator_for(schema: dict[str, Any]) -> Draft202012Validator:
    """A Draft 2020-12 validator with format checking, cached per schema object.

    The schemas themselves are checked against the meta-schema in the tests
    (check_schema costs more than validating a spec), not on every run.
    """
    hit = _VALIDATORS.get(id(schema))
    if hit is None or hit[0] is not schema:
        from jsonschema import Draft202012Validator
        hit = (schema, Draft202012Validator(
            schema, format_checker=Draft202012Validator.FORMAT_CHECKER))
        _VALIDATORS[id(schema)] = hit
    return hit[1]


# ---------------------------------------------------------------- the fast path

Check = Callable[[Any], bool]


class _Unsupported(Exception):
    """The schema uses something the fast path does not model: always ask jsonschema."""


class _Unsure(Exception):
    """The instance holds something the fast path does not model: ask jsonschema.

    A check's True and False are both exact (so `not` and `oneOf` may use them); doubt is
    only ever this exception, which ends the whole check."""


# Keywords with no say in validation (annotations, and $defs, reached through $ref).
_IGNORED = {"$comment", "$defs", "title", "description", "default", "examples",
            "deprecated", "readOnly", "writeOnly", "then", "else"}
# At the root only: jsonschema switches dialect on a subschema's $schema, and $id moves
# the base of the $refs below it.
_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_JSON_TYPES = (dict, list, str, int, float, bool, type(None))


def _kind(x: Any) -> type:
    """x's exact type, one of JSON's (YAML as Helm reads it gives only these)."""
    t = type(x)
    if t not in _JSON_TYPES:
        raise _Unsure
    return t


# jsonschema's type checker for Draft 2020-12 (jsonschema._types), on exact types.
_TYPE_TESTS: dict[str, Check] = {
    "object": lambda x: _kind(x) is dict,
    "array": lambda x: _kind(x) is list,
    "string": lambda x: _kind(x) is str,
    "boolean": lambda x: _kind(x) is bool,
    "null": lambda x: x is None,
    "number": lambda x: _kind(x) in (int, float),
    "integer": lambda x: _kind(x) is int or (type(x) is float and x.is_integer()),
}


def _equal(one: Any, two: Any) -> bool:
    """jsonschema._utils.equal (const, enum): True and 1 differ, 1 and 1.0 do not."""
    if one is two:
        return True
    t1, t2 = _kind(one), _kind(two)
    if t1 is str or t2 is str:
        return bool(one == two)
    if t1 is list and t2 is list:
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two))
    if t1 is dict and t2 is dict:
        return len(one) == len(two) and all(k in two and _equal(v, two[k]) for k, v in one.items())
    if t1 is bool or t2 is bool:
        return t1 is t2 and bool(one == two)
    return bool(one == two)


def _number(x: Any) -> bool:
    return _TYPE_TESTS["number"](x)


class _Compiler:
    """Turns a schema (and the subschemas it refers to) into one `Check`."""

    def __init__(self, root: dict[str, Any]):
        self.root = root
        self.refs: dict[str, Check] = {}

    def ref(self, ref: str) -> Check:
        if not ref.startswith("#/") or "%" in ref:
            raise _Unsupported(ref)
        if ref not in self.refs:
            target: Any = self.root
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(target, list) and part.isdigit() and int(part) < len(target):
                    target = target[int(part)]
                elif isinstance(target, dict) and part in target:
                    target = target[part]
                else:
                    raise _Unsupported(ref)
            box: list[Check] = []
            self.refs[ref] = lambda x: box[0](x)     # a cycle reaches the box, filled below
            box.append(self.compile(target))
        return self.refs[ref]

    def compile(self, schema: Any) -> Check:
        if schema is True:
            return lambda x: True
        if schema is False:
            return lambda x: False
        if not isinstance(schema, dict):
            raise _Unsupported(schema)
        at_root = schema is self.root
        found = [self.keyword(k, v, schema) for k, v in schema.items() if k not in _IGNORED
                 and not (at_root and (k == "$id" or (k, v) == ("$schema", _DIALECT)))]
        checks = [c for c in found if c is not None]
        if len(checks) == 1:
            return checks[0]
        return lambda x: all(c(x) for c in checks)

    def keyword(self, k: str, v: Any, schema: dict[str, Any]) -> Check | None:
        sub = self.compile
        if k == "type":
            names = [v] if isinstance(v, str) else v
            if not isinstance(names, list) or any(n not in _TYPE_TESTS for n in names):
                raise _Unsupported(k)
            tests = [_TYPE_TESTS[n] for n in names]
            return lambda x: any(t(x) for t in tests)
        if k == "$ref":
            return self.ref(v)
        if k == "properties":
            props = [(name, sub(s)) for name, s in v.items()]
            return lambda x: _kind(x) is not dict or \
                all(c(x[name]) for name, c in props if name in x)
        if k == "additionalProperties":
            names = schema.get("properties", {})
            joined = "|".join(schema.get("patternProperties", {}))
            rest = sub(v) if isinstance(v, dict) else None

            def extras_ok(x: Any) -> bool:
                if _kind(x) is not dict:
                    return True
                for key in x:
                    if type(key) is not str:
                        raise _Unsure
                    if key in names or (joined and re.search(joined, key)):
                        continue
                    if rest is None:
                        if not v:
                            return False
                    elif not rest(x[key]):
                        return False
                return True
            return extras_ok
        if k == "patternProperties":
            pats = [(p, sub(s)) for p, s in v.items()]

            def patterns_ok(x: Any) -> bool:
                if _kind(x) is not dict:
                    return True
                for key, val in x.items():
                    if type(key) is not str:
                        raise _Unsure
                    if not all(c(val) for p, c in pats if re.search(p, key)):
                        return False
                return True
            return patterns_ok
        if k == "propertyNames":
            names_ok = sub(v)
            return lambda x: _kind(x) is not dict or all(names_ok(key) for key in x)
        if k == "required":
            return lambda x: _kind(x) is not dict or all(name in x for name in v)
        if k == "items":
            if "prefixItems" in schema:
                raise _Unsupported(k)
            each = sub(v)
            return lambda x: _kind(x) is not list or all(each(i) for i in x)
        if k in ("minItems", "maxItems", "minLength", "maxLength", "minProperties",
                 "maxProperties"):
            kind = list if k.endswith("Items") else str if k.endswith("Length") else dict
            if k.startswith("min"):
                return lambda x: _kind(x) is not kind or len(x) >= v
            return lambda x: _kind(x) is not kind or len(x) <= v
        if k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not _number(v):
                raise _Unsupported(k)
            # the comparisons jsonschema makes (_keywords.py), so NaN passes alike
            fails: Check = {"minimum": lambda x: x < v, "maximum": lambda x: x > v,
                     "exclusiveMinimum": lambda x: x <= v,
                     "exclusiveMaximum": lambda x: x >= v}[k]
            return lambda x: not _number(x) or not fails(x)
        if k == "pattern":
            return lambda x: _kind(x) is not str or re.search(v, x) is not None
        if k == "const":
            return lambda x: _equal(x, v)
        if k == "enum":
            return lambda x: any(_equal(each, x) for each in v)
        if k == "uniqueItems":
            def unique(x: Any) -> bool:
                if not v or _kind(x) is not list:
                    return True
                # on strings and (non-NaN) numbers, a set's == is jsonschema's equal()
                if any(type(i) not in (str, int, float) or (type(i) is float and math.isnan(i))
                       for i in x):
                    raise _Unsure
                return len(set(x)) == len(x)
            return unique
        if k in ("allOf", "anyOf", "oneOf"):
            subs = [sub(s) for s in v]
            if k == "allOf":
                return lambda x: all(c(x) for c in subs)
            if k == "anyOf":
                return lambda x: any(c(x) for c in subs)
            return lambda x: sum(1 for c in subs if c(x)) == 1
        if k == "not":
            negated = sub(v)
            return lambda x: not negated(x)
        if k == "if":
            cond, then, else_ = sub(v), sub(schema.get("then", True)), sub(schema.get("else", True))
            return lambda x: then(x) if cond(x) else else_(x)
        raise _Unsupported(k)      # format, $id inside, dependent*, unevaluated*, ...


_FAST: dict[int, tuple[dict[str, Any], Check | None]] = {}


def fast_check(schema: dict[str, Any]) -> Check | None:
    """The compiled check of `schema` (cached per schema object), None when the schema
    uses what the fast path does not model. It returns the exact verdict or raises
    `_Unsure`; `is_valid` is what callers want."""
    hit = _FAST.get(id(schema))
    if hit is None or hit[0] is not schema:
        try:
            check: Check | None = _Compiler(schema).compile(schema)
        except (_Unsupported, _Unsure):
            check = None
        hit = _FAST[id(schema)] = (schema, check)
    return hit[1]


def is_valid(schema: dict[str, Any], instance: Any) -> bool:
    """True when `instance` certainly passes `schema` (Draft 2020-12, as validator_for's
    validator judges it); False when it fails or the fast path cannot tell."""
    check = fast_check(schema)
    try:
        return check is not None and check(instance)
    except (_Unsure, RecursionError, TypeError, re.error):
        return False
