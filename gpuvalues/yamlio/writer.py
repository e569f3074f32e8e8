"""The YAML writer: block-style YAML that Helm reads back as the same data (`dump`), with a
fast path for the simple values and documents gpuvalues writes most."""
from __future__ import annotations

import re
from typing import Any

import yaml



# The inventory of a 5,000-node cluster spent 75% of its time in PyYAML's pure-Python
# emitter (and libyaml's emitter still runs PyYAML's Python representer per value). For
# the common case, nested mappings and lists whose strings are printable ASCII without
# blanks (labels, names, quantities: nothing to fold, escape or anchor), `_fast_dump`
# writes PyYAML's block layout itself and asks PyYAML only for the text of each distinct
# scalar, so the text is PyYAML's by construction (tests/unit/test_hostile_bounds.py
# compares the two on generated data). Anything else goes through PyYAML as before.
_SIMPLE = re.compile(r"[!-~]{0,64}")  # printable ASCII, no blank, short
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")
_RESOLVER = yaml.resolver.Resolver()


class _NotSimple(Exception):
    """Data `_fast_dump` does not write (PyYAML does)."""


def _fast_dump(data: Any) -> str:
    """PyYAML's block-style text for simple data (see above); _NotSimple otherwise."""
    cache: dict = {}
    seen: set[int] = set()

    def atom(v: Any) -> str:
        if isinstance(v, dict):
            return "{}"
        if isinstance(v, list):
            return "[]"
        key = (float, repr(v)) if isinstance(v, float) else (type(v), v)   # -0.0 == 0.0
        text = cache.get(key)
        if text is None:
            if isinstance(v, str):
                if not _SIMPLE.fullmatch(v):
                    raise _NotSimple
                # Plain for sure: alphanumeric start, no indicator, read back as a string
                # (the check PyYAML's emitter makes); anything else is PyYAML's to quote.
                if _PLAIN.fullmatch(v) and _RESOLVER.resolve(yaml.ScalarNode, v, (True, False)) \
                        == "tag:yaml.org,2002:str":
                    text = v
            elif isinstance(v, bool) or v is None:
                text = {True: "true", False: "false", None: "null"}[v]
            elif isinstance(v, int):
                text = str(v)                # SafeRepresenter.represent_int
            elif not isinstance(v, float):
                raise _NotSimple
            if text is None:
                text = yaml.dump(v, Dumper=yaml.SafeDumper, allow_unicode=True)
                text = text[:-5] if text.endswith("\n...\n") else text.rstrip("\n")
            cache[key] = text
        return text

    out: list[str] = []
    append = out.append
    get = cache.get

    def emit(v: Any, ind: int, lead: str) -> None:
        if id(v) in seen:                    # shared: PyYAML writes an anchor and alias
            raise _NotSimple
        seen.add(id(v))
        pad = " " * ind
        if isinstance(v, dict):
            for i, (k, x) in enumerate(v.items()):
                if k == "" or isinstance(k, (dict, list, tuple)):
                    raise _NotSimple         # PyYAML writes these as `? key` (not simple)
                pre = lead if i == 0 else pad
                key = get((type(k), k)) or atom(k)
                if x and isinstance(x, dict):
                    append(f"{pre}{key}:\n")
                    emit(x, ind + 2, " " * (ind + 2))
                elif x and isinstance(x, list):      # PyYAML: indentless in a mapping
                    append(f"{pre}{key}:\n")
                    emit(x, ind, pad)
                else:
                    value = (get((type(x), x)) if not isinstance(x, (dict, list)) else None) or atom(x)
                    append(f"{pre}{key}: {value}\n")
        else:
            for i, x in enumerate(v):
                pre = lead if i == 0 else pad
                if x and isinstance(x, (dict, list)):
                    emit(x, ind + 2, pre + "- ")
                else:
                    out.append(f"{pre}- {atom(x)}\n")

    if not isinstance(data, (dict, list)):
        raise _NotSimple
    if not data:
        return atom(data) + "\n"
    emit(data, 0, "")
    return "".join(out)


def dump(data: Any, *, dumper: type | None = None) -> str:
    """YAML text for plain data, keys in insertion order (what `values` writes). Simple
    data is written by `_fast_dump` (the same text, about 10x faster); `dumper` forces a
    PyYAML dumper class."""
    if dumper is None:
        try:
            return _fast_dump(data)
        except (_NotSimple, RecursionError, TypeError):   # TypeError: unhashable values
            pass
    return yaml.dump(data, Dumper=dumper or yaml.SafeDumper, sort_keys=False,
                     allow_unicode=True, default_flow_style=False)
