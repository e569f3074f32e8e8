"""The project's JSON Schemas (schemas/, draft 2020-12): where they are, read once,
and a format-checking validator per schema. Used by validation and by the inventory."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from jsonschema import Draft202012Validator

from gpuvalues.bundle import INVENTORY_SCHEMA, SCHEMAS, SPEC_SCHEMA, VALUES_SCHEMA  # noqa: F401 (re-exported)
from gpuvalues.errors import GpuValuesError


@functools.lru_cache(maxsize=8)
def _schema_cached(path: str, mtime: float) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise GpuValuesError(f"schema not found: {path}") from None


def load_schema(path: str | Path) -> dict:
    """Read a JSON Schema file (cached until it changes on disk)."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime
    except FileNotFoundError:
        raise GpuValuesError(f"schema not found: {p}") from None
    return _schema_cached(str(p), mtime)


_VALIDATORS: dict[int, tuple[dict, Draft202012Validator]] = {}


def validator_for(schema: dict) -> Draft202012Validator:
    """A Draft 2020-12 validator with format checking, cached per schema object.

    The schemas themselves are checked against the meta-schema in the tests
    (check_schema costs more than validating a spec), not on every run.
    """
    hit = _VALIDATORS.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = (schema, Draft202012Validator(
            schema, format_checker=Draft202012Validator.FORMAT_CHECKER))
        _VALIDATORS[id(schema)] = hit
    return hit[1]
