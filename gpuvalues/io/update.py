"""Edit a user's values.yaml in place, keeping comments, key order and quoting.

`update_values(path, {"autoscaling.maxReplicas": 12})` loads the file with ruamel.yaml's
round-trip mode, sets each path (creating missing mappings), and dumps it with the
file's own indentation. Before writing, the new text is read back the way Helm reads
it (gpuvalues.yamlio), each changed path is checked to have exactly the intended value
(a string like "yes" or "0755" is quoted so Helm keeps it a string), and the result is
validated against the chart's schema and semantic rules. Only then is the file replaced,
atomically; on any failure it is left untouched.

The read-modify-write holds an fcntl lock on the file (concurrent updates run in turn and
none is lost); a symlink keeps pointing at the file it names and a hard-linked file is
written through (gpuvalues.io.files.write_atomic); a read-only file (mode 0444, a
read-only filesystem) is refused before anything is read; the owner and mode are kept.
"""
from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from gpuvalues.yamlio.inputs import STDIN, decode, read_source
from gpuvalues.yamlio.loader import NotRepresentable, format_path, helm_scalar, load_text
from gpuvalues.bundle import VALUES_SCHEMA
from gpuvalues.checks.rules import Finding, check_values, values_findings, warnings_or_raise
from gpuvalues.errors import SpecError
from gpuvalues.io.files import check_writable, locked, write_atomic

_SEGMENT = re.compile(r'(?:"((?:[^"\\]|\\.)*)"|((?:[^.\[\]\\]|\\.)+))|\[(\d+)\]')


def parse_path(text: str) -> tuple:
    """`a.b[2].c` -> ("a", "b", 2, "c"). Quote or backslash-escape keys with dots:
    `podAnnotations."prometheus.io/scrape"` or `podAnnotations.prometheus\\.io/scrape`."""
    if not text:
        raise SpecError("empty path; write it like autoscaling.maxReplicas")
    out: list = []
    pos = 0
    while pos < len(text):
        if out and text[pos] == "." and not text.startswith("[", pos):
            pos += 1
        m = _SEGMENT.match(text, pos)
        if not m or m.end() == pos:
            raise SpecError(f"bad path {text!r} at character {pos + 1}; write it like "
                            "a.b[0].c", field=text)
        quoted, plain, index = m.groups()
        if index is not None:
            out.append(int(index))
        else:
            key = quoted if quoted is not None else plain
            out.append(re.sub(r"\\(.)", r"\1", key))
        pos = m.end()
    return tuple(out)


def parse_value(text: str) -> Any:
    """A `--set` value typed as Helm's `--set` types it (strvals.typedVal): true/false/null
    (any case), base-10 integers not starting with 0 (and 0 itself); anything else,
    including `yes`, `0755` and `1.5`, is a string. `[..]`/`{..}` are read as flow YAML."""
    if text.startswith(("[", "{")):
        return load_text(text, "--set").data
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "null":
        return None
    if text == "0":
        return 0
    if text and text[0] != "0" and re.fullmatch(r"[+-]?[0-9]+", text):
        value = int(text)
        if -(2 ** 63) <= value < 2 ** 63:
            return value
    return text


def parse_sets(items: Sequence[str], *, as_string: bool = False) -> dict[str, Any]:
    """`--set path=value` arguments -> {path: value}, each value typed as `helm --set`
    types it (`parse_value`), or kept a string with `as_string`."""
    changes: dict[str, Any] = {}
    for item in items:
        path, sep, value = item.partition("=")
        if not sep or not path:
            raise SpecError(f"--set {item!r}: write it as path=value, e.g. autoscaling.maxReplicas=12")
        changes[path] = value if as_string else parse_value(value)
    if not changes:
        raise SpecError("nothing to change: give one or more --set path=value")
    return changes


def _round_trip():
    from ruamel.yaml import YAML
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096          # never re-wrap the user's long lines
    return yaml


def _guess_indent(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) indentation of the file, as ruamel names them: the
    first nested mapping's indent step, and where the first block sequence puts its dash
    (offset) relative to its parent key."""
    mapping = offset = None
    parent = None          # indentation of the previous `key:` line opening a block
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if stripped.startswith("- ") or stripped == "-":
            if parent is not None and offset is None and indent >= parent:
                offset = indent - parent
            parent = indent + 2 if re.match(r"-\s+[^\s#][^:#]*:\s*(#.*)?$", stripped) else None
            continue
        if parent is not None and mapping is None and indent > parent:
            mapping = indent - parent
        parent = indent if re.match(r"[^\s#-][^:#]*:\s*(#.*)?$", stripped) else None
        if mapping is not None and offset is not None:
            break
    mapping = mapping or 2
    offset = 0 if offset is None else offset
    return mapping, offset + 2, offset


def _to_node(value: Any, like: Any = None) -> Any:
    """A ruamel node for `value` that Helm reads back as exactly `value`.

    Strings that Helm would read as something else (yes, 0755, 1e3, ~, "") are quoted;
    when replacing a quoted string, the same quote style is kept.
    """
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

    if isinstance(value, Mapping):
        m = CommentedMap()
        for k, v in value.items():
            m[str(k)] = _to_node(v)
        return m
    if isinstance(value, (list, tuple)):
        s = CommentedSeq()
        s.extend(_to_node(v) for v in value)
        return s
    if isinstance(value, str):
        if isinstance(like, SingleQuotedScalarString):
            return SingleQuotedScalarString(value)
        if isinstance(like, DoubleQuotedScalarString):
            return DoubleQuotedScalarString(value)
        try:
            ambiguous = helm_scalar(value) != value or \
                not isinstance(helm_scalar(value), str)
        except NotRepresentable:
            ambiguous = True
        if ambiguous or value != value.strip() or any(c in value for c in ":#{}[],&*!|>'\"%@`") \
                or "\n" in value:
            return DoubleQuotedScalarString(value)
        return value
    return value


def _set(root: Any, path: tuple, value: Any) -> None:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    node = root
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        where = format_path(path[:i + 1])
        if isinstance(key, int):
            if not isinstance(node, list) or key > len(node):
                raise SpecError(f"no list item [{key}] here (the list has "
                                f"{len(node) if isinstance(node, list) else 0})", field=where)
            if key == len(node):              # a[n].b on an n-item list appends a new item
                node.append(CommentedSeq() if isinstance(nxt, int) else CommentedMap())
            child = node[key]
        else:
            if not isinstance(node, dict):
                raise SpecError("is not a mapping; cannot set a key inside it", field=where)
            child = node.get(key)
            if child is None:
                child = CommentedSeq() if isinstance(nxt, int) else CommentedMap()
                node[key] = child
        if isinstance(nxt, int) and not isinstance(child, list):
            raise SpecError("is not a list; cannot index it", field=where)
        if isinstance(nxt, str) and not isinstance(child, dict):
            raise SpecError(f"is {type(child).__name__}, not a mapping; cannot set "
                            f"{nxt!r} inside it", field=where)
        node = child
    last = path[-1]
    if isinstance(last, int):
        if last > len(node):
            raise SpecError(f"list has {len(node)} items; can set [0..{len(node)}]",
                            field=format_path(path))
        if last == len(node):
            node.append(_to_node(value))
        else:
            node[last] = _to_node(value, node[last])
    else:
        node[last] = _to_node(value, node.get(last) if isinstance(node, dict) else None)


def _get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data[p]
    return data


def apply_updates(text: str, updates: Mapping[str, Any], source: str = "values.yaml") -> str:
    """The new file text with `updates` applied (no validation, no writing)."""
    yaml = _round_trip()
    yaml.indent(*_guess_indent(text))
    try:
        root = yaml.load(text)
    except Exception as exc:
        load_text(text, source, allow_empty=True)
        raise SpecError(f"cannot edit: {exc}", source=source) from None
    if root is None:
        from ruamel.yaml.comments import CommentedMap
        root = CommentedMap()
    if not isinstance(root, dict):
        raise SpecError("the values file must be a YAML mapping", source=source, line=1, column=1)
    for key, value in updates.items():
        _set(root, parse_path(key) if isinstance(key, str) else tuple(key), value)
    out = io.StringIO()
    yaml.dump(root, out)
    return out.getvalue()


_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _types_at(schema: Mapping, path: tuple, root: Mapping | None = None) -> set[str]:
    """JSON types the schema allows at `path` (properties, items, additionalProperties,
    local $ref, anyOf/oneOf/allOf); empty when it does not say."""
    root = root if root is not None else schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, Mapping) else {}
        return _types_at(node, path, root)
    out: set[str] = set()
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or ():
            out |= _types_at(sub, path, root)
    if not path:
        kind = schema.get("type")
        out |= {kind} if isinstance(kind, str) else set(kind or ())
        return out
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        sub = schema.get("items")
    else:
        sub = (schema.get("properties") or {}).get(head, schema.get("additionalProperties"))
    if isinstance(sub, Mapping):
        out |= _types_at(sub, rest, root)
    return out


def schema_typed(updates: Mapping[str, Any], schema: Mapping) -> dict[str, Any]:
    """`updates` with each text that Helm's `--set` keeps a string (`0.3`, `1e3`) made a
    number where the schema takes a number there and no string (a values file is YAML:
    `memoryFraction: 0.3` is a float; `helm --set` would pass "0.3" and fail the schema)."""
    out = dict(updates)
    for key, value in updates.items():
        if not isinstance(value, str) or not _NUMBER.fullmatch(value):
            continue
        kinds = _types_at(schema, parse_path(key) if isinstance(key, str) else tuple(key))
        if "string" in kinds or not kinds & {"number", "integer"}:
            continue
        number = float(value)
        if number.is_integer() and "integer" in kinds and "number" not in kinds:
            out[key] = int(number)
        elif "number" in kinds and abs(number) != float("inf"):
            out[key] = number
    return out


def update_values(path: str | Path, updates: Mapping[str, Any], *,
                  schema_path: str | Path = VALUES_SCHEMA, validate: bool = True,
                  semantic: bool = True, typed: bool = True) -> list[Finding]:
    """Set each `"a.b": value` in the values file at `path`, in place.

    Keeps comments, key order and quoting. With `typed`, a number-like text goes in as a
    number where the chart's schema wants one (`schema_typed`). Validates the result (chart
    schema, then semantic rules) before an atomic write; raises `ValidationFailed` (a
    SpecError) and leaves the file untouched when it does not pass. Returns the warnings.
    """
    if typed:
        from gpuvalues.schemas import load_schema
        updates = schema_typed(updates, load_schema(schema_path))
    if str(path) == STDIN:
        raise SpecError("update edits a file in place; it cannot read stdin ('-')")
    raw, source = read_source(path)       # refuses FIFOs, devices, huge files first
    check_writable(path)
    with locked(path):
        return _update_locked(path, updates, schema_path=schema_path, validate=validate,
                              semantic=semantic)


def _update_locked(path: str | Path, updates: Mapping[str, Any], *, schema_path: str | Path,
                   validate: bool, semantic: bool) -> list[Finding]:
    raw, source = read_source(path)       # again: the file as it is under the lock
    text = decode(raw, source)
    load_text(text, source, allow_empty=True)     # positioned errors for bad YAML
    new_text = apply_updates(text, updates, source)
    loaded = load_text(new_text, source, allow_empty=True)
    warnings: list[Finding] = []
    for key, value in updates.items():
        p = parse_path(key) if isinstance(key, str) else tuple(key)
        got = _get(loaded.data, p)
        if got != value or type(got) is not type(value) and not (
                isinstance(got, (int, float)) and isinstance(value, (int, float))
                and not isinstance(value, bool)):
            raise SpecError(f"Helm would read the new value as {got!r}, not {value!r}",
                            source=source, field=format_path(p))
    if validate:
        warnings = warnings_or_raise(values_findings(loaded, schema_path=schema_path) if semantic
                                     else check_values(loaded, schema_path=schema_path))
    write_atomic(path, new_text)
    return warnings
