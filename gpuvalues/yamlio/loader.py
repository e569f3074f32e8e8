"""Read YAML the way Helm reads it, and remember where every value sits.

Helm parses values with go-yaml v2 (YAML 1.1 rules) through sigs.k8s.io/yaml, so
`yes`/`on`/`y` are booleans, `0755` is octal 493, `1e3` is a number and dates stay
strings. Tools that read YAML 1.2 (ruamel.yaml, yq v4) see some of these differently.
`load_yaml` parses with PyYAML's YAML 1.1 grammar, resolves every plain scalar with the
rules go-yaml v2 applies (checked against the real Helm 4.1.4 and 3.17.2 in
tests/chart/test_yaml_typing.py), and takes line/column information from ruamel.yaml's
round-trip reader. Where ruamel's YAML 1.2 reading would give a different value, it
records a warning with the line, so a user editing the file with a YAML 1.2 tool is not
surprised. A file whose every scalar both read alike (`_alike_scalar`) skips ruamel: its
positions come from libyaml's marks, which agree.

Every failure (unreadable, non-UTF-8, binary, truncated, empty, several documents,
duplicate keys, a number Helm cannot represent) is a `SpecError` with file, line and
column.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml

from gpuvalues.errors import GpuValuesError, SpecError
from gpuvalues.yamlio.inputs import decode, line_col, read_source
Path_ = tuple  # a path into the data: keys (str) and list indices (int)

# go-yaml v2 resolve.go: the plain scalars it looks up in a table before trying numbers.
_BOOL_NULL = {
    **{s: True for s in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")},
    **{s: False for s in ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off",
                          "OFF")},
}
_NULLS = {"", "~", "null", "Null", "NULL"}
_NON_FINITE = {".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
               "-.inf", "-.Inf", "-.INF"}
# go-yaml v2 yamlStyleFloat
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
# Go strconv.ParseInt(s, 0, 64) syntax after go-yaml strips underscores.
_GO_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")
_INT64 = (-(2 ** 63), 2 ** 64 - 1)   # ParseInt, then ParseUint
_PLAIN_TAG = "tag:gpuvalues:plain"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# Deepest nesting of mappings and lists accepted (libyaml stops at 1000; the chart's values
# nest about 10 deep): deeper input is refused before any recursive walk can overflow.
MAX_NESTING = 200
# Most YAML nodes (scalars, mappings, lists, aliases before expansion) in a spec or values
# file: the chart's whole values.yaml has about a thousand. Counted on the event stream
# (libyaml, about 1 us each) before anything is composed (about 25 us a node in Python).
MAX_NODES = 100_000
# Above this many nodes or characters, load_text skips ruamel's slow round-trip reader
# (about 100 us a node and 1 us a character; see load_text).
ROUND_TRIP_LIMIT = 10_000
ROUND_TRIP_CHARS = 1024 * 1024


class NotRepresentable(Exception):
    """A plain scalar Helm cannot turn into JSON (.inf, .nan)."""


def helm_scalar(text: str) -> Any:
    """The value Helm gives a plain (unquoted, untagged) YAML scalar `text`.

    Numbers come back as int when integral within int64 (Helm itself stores every
    number as float64), else float. Raises NotRepresentable for infinities and NaN,
    which Helm rejects ("json: unsupported value").
    """
    if text in _BOOL_NULL:
        return _BOOL_NULL[text]
    if text in _NULLS:
        return None
    if text in _NON_FINITE:
        raise NotRepresentable(text)
    if not text or not (text[0].isdigit() or text[0] in "+-."):
        return text
    if text[0] != ".":
        plain = text.replace("_", "")
        if _GO_INT.match(plain):
            sign = -1 if plain.startswith("-") else 1
            digits = plain.lstrip("+-")
            low = digits.lower()
            if low.startswith(("0x", "0o", "0b")):
                value = int(digits[2:], {"x": 16, "o": 8, "b": 2}[low[1]])
            elif len(digits) > 1 and digits.startswith("0"):
                value = int(digits, 8)
            else:
                value = int(digits)
            value *= sign
            if _INT64[0] <= value <= _INT64[1]:
                return value
        if _YAML_FLOAT.match(plain):
            value = float(plain)
            if math.isinf(value):    # ParseFloat's range error: go-yaml keeps the string
                return text
            return int(value) if value.is_integer() and abs(value) < 2 ** 53 and \
                not re.search(r"[.eE]", plain) else value
        return text
    if _YAML_FLOAT.match(text):
        return float(text)
    return text


def helm_key(key: Any) -> str:
    """Map keys become strings in Helm (sigs.k8s.io/yaml): `on:` is the key "true"."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, float) and key.is_integer():
        return str(int(key))
    return str(key)


class _HelmMixin:
    """PyYAML's YAML 1.1 parser with go-yaml v2 scalar resolution (see helm_scalar)."""

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return _MERGE_TAG if value == "<<" else _PLAIN_TAG
        return yaml.resolver.Resolver.resolve(self, kind, value, implicit)

    def construct_plain(self, node):
        try:
            return helm_scalar(node.value)
        except NotRepresentable:
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is not a number Helm can use (it cannot turn "
                "infinity or NaN into JSON); write a finite number or quote it",
                node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        """Keys in document order, a `<<` merge applied where it stands, as go-yaml v2
        does (decode.go `mapping`/`merge`, which Helm 4.1.4 and 3.17.2 show): a merge
        overwrites the keys written before it, keys after it overwrite the merge, and in
        `<<: [*a, *b]` the earlier map wins. (PyYAML's own flattening lets explicit keys
        win wherever they stand; Helm does not.)"""
        out: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                self._merge(out, node, value_node, deep)
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    "found an unhashable key", key_node.start_mark) from None
            out[helm_key(key)] = self.construct_object(value_node, deep=deep)
        return out

    def _merge(self, out: dict, node, value_node, deep) -> None:
        if isinstance(value_node, yaml.MappingNode):
            out.update(self.construct_mapping(value_node, deep=deep))
            return
        if isinstance(value_node, yaml.SequenceNode) and all(
                isinstance(n, yaml.MappingNode) for n in value_node.value):
            for sub in reversed(value_node.value):      # go-yaml v2: the first map wins
                out.update(self.construct_mapping(sub, deep=deep))
            return
        raise yaml.constructor.ConstructorError(
            "while constructing a mapping", node.start_mark,
            "map merge requires map or sequence of maps as the value", value_node.start_mark)

    def construct_yaml_timestamp(self, node):  # explicit !!timestamp: keep the text
        return node.value


class _HelmLoader(_HelmMixin, yaml.SafeLoader):
    """Pure-Python reader: its error messages and marks are the ones users see."""


_LOADERS = [_HelmLoader]
if getattr(yaml, "__with_libyaml__", False):
    class _HelmCLoader(_HelmMixin, yaml.CSafeLoader):
        """libyaml-backed reader, several times faster; same resolution rules."""

    _LOADERS.insert(0, _HelmCLoader)

for _loader in _LOADERS:
    _loader.add_constructor(_PLAIN_TAG, _HelmMixin.construct_plain)
    _loader.add_constructor(_MERGE_TAG, _HelmMixin.construct_plain)
    _loader.add_constructor("tag:yaml.org,2002:timestamp", _HelmMixin.construct_yaml_timestamp)


class ExcessiveAliasing(yaml.YAMLError):
    """A document whose aliases expand past go-yaml's limit (an "alias bomb"), or that
    nests deeper than MAX_NESTING."""

    def __init__(self, mark, message: str = "document contains excessive aliasing (aliases "
                 "expand past Helm's limit: an alias bomb?)") -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


def _allowed_alias_ratio(decodes: int) -> float:
    """go-yaml v2 decode.go `allowedAliasRatio` (vendored by Helm as sigs.k8s.io/yaml
    goyaml.v2): 99% of the decodes may come from aliases up to 400,000 decodes, 10% from
    4,000,000, linear in between."""
    low, high = 400_000, 4_000_000
    if decodes <= low:
        return 0.99
    if decodes >= high:
        return 0.10
    return 0.99 - 0.89 * (decodes - low) / (high - low)


def check_aliasing(root) -> None:
    """Count the node decodes go-yaml v2 would make for the composed document `root`
    (aliases expanded), and raise ExcessiveAliasing where its decoder fails with
    "document contains excessive aliasing" (decode.go `unmarshal`: more than 100 alias
    decodes, more than 1000 decodes, and an alias share above `_allowed_alias_ratio`).
    PyYAML composes an alias as the anchored node itself, so a node met a second time is
    an alias; it runs in time linear in the decodes it allows, not in the expansion."""
    decodes = aliases = 0
    seen: set[int] = set()
    stack = [(root, 0, 0)]
    while stack:
        node, depth, nesting = stack.pop()
        if nesting > MAX_NESTING:
            raise ExcessiveAliasing(node.start_mark, f"nested more than {MAX_NESTING} levels "
                                    "deep (mappings and lists)")
        if depth == 0 and id(node) in seen:     # an alias reference: the alias node itself,
            decodes += 1                        # then its anchor's subtree, all as aliases
            depth = 1
        decodes += 1
        if depth:
            aliases += 1
        else:
            seen.add(id(node))
        if aliases > 100 and decodes > 1000 and aliases / decodes > _allowed_alias_ratio(decodes):
            raise ExcessiveAliasing(node.start_mark)
        if isinstance(node, yaml.MappingNode):
            for k, v in reversed(node.value):
                stack.append((v, depth, nesting + 1))
                if k.tag != _MERGE_TAG:        # go-yaml v2 never decodes the `<<` key
                    stack.append((k, depth, nesting + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth, nesting + 1) for child in reversed(node.value))


# Scalars YAML 1.1 (Helm) and 1.2 (ruamel.yaml) read alike, by construction: a plain word
# that starts with a letter and is none of YAML 1.1's booleans and nulls, a plain decimal
# integer or fraction, true/false/null, or a one-line quoted string without escapes.
_ALIKE_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./:@+ -]*")
_ALIKE_NUMBER = re.compile(r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")
_ALIKE_LITERALS = {"true", "false", "null", "~"}


def _alike_scalar(event, is_key: bool, text: str) -> bool:
    if event.anchor or event.tag or event.start_mark.line != event.end_mark.line:
        return False
    v = event.value
    if event.style in ("'", '"'):
        if "\\" in text[event.start_mark.index:event.end_mark.index]:
            return False
    elif event.style:                      # block scalars (| >); plain is "" or None
        return False
    if _ALIKE_WORD.fullmatch(v) and v not in _BOOL_NULL and v not in _NULLS:
        return True
    # keys only as words: the position walkers resolve even a quoted key as a plain one
    return not is_key and (event.style in ("'", '"') or v in _ALIKE_LITERALS
                           or bool(_ALIKE_NUMBER.fullmatch(v)))


def _check_size(text: str, source: str) -> tuple[int, bool]:
    """(the number of nodes of `text`, whether YAML 1.1 and 1.2 surely read it alike),
    both from its event stream (fast), refusing more than MAX_NODES before anything is
    composed; syntax errors are left to the loader, which places them. Alike: every
    scalar is one `_alike_scalar` passes (keys only words and quoted strings), no anchor,
    alias, tag or directive."""
    n = 0
    alike = True
    open_: list[list] = []           # per open collection: [is a mapping, children so far]
    try:
        for event in yaml.parse(text, Loader=_LOADERS[0]):
            if isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent,
                                  yaml.SequenceStartEvent, yaml.AliasEvent)):
                n += 1
                if n > MAX_NODES:
                    mark = event.start_mark
                    raise SpecError(f"more than {MAX_NODES:,} YAML values in one file; specs "
                                    "and values files have hundreds", source=source,
                                    line=mark.line + 1, column=mark.column + 1)
                if alike:
                    is_key = bool(open_) and open_[-1][0] and open_[-1][1] % 2 == 0
                    if open_:
                        open_[-1][1] += 1
                    if isinstance(event, yaml.ScalarEvent):
                        alike = _alike_scalar(event, is_key, text)
                    elif isinstance(event, yaml.AliasEvent) or is_key or event.anchor or \
                            event.tag:
                        alike = False
                    else:
                        open_.append([isinstance(event, yaml.MappingStartEvent), 0])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                if alike:
                    open_.pop()
            elif isinstance(event, yaml.DocumentStartEvent) and (event.version or event.tags):
                alike = False
    except yaml.YAMLError:
        alike = False
    return n, alike


def _documents(text: str, loader_class) -> list:
    loader = loader_class(text)
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            check_aliasing(node)
            docs.append(loader.construct_document(node))
        return docs
    finally:
        loader.dispose()


def _load_all(text: str) -> list:
    """Every document of `text` as Helm reads it. The fast libyaml reader first; on any
    error the pure-Python reader parses again, so messages and positions are PyYAML's.
    An alias bomb fails fast (check_aliasing) before anything is expanded."""
    if len(_LOADERS) > 1:
        try:
            return _documents(text, _LOADERS[0])
        except ExcessiveAliasing:
            raise
        except yaml.YAMLError:
            if len(text) > ROUND_TRIP_CHARS:
                raise              # the pure-Python reader would take a minute to say it
    return _documents(text, _HelmLoader)


def helm_data(text: str, source: str = "<string>") -> Any:
    """Just the data, as Helm reads it (no positions, no YAML 1.2 comparison): for
    files gpuvalues itself ships, such as the chart's values.yaml."""
    try:
        docs = _load_all(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    return docs[0] if docs else None


@dataclass(frozen=True)
class YamlWarning:
    """A value that a YAML 1.2 reader (ruamel.yaml, yq v4) would read differently."""

    source: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}: {self.path}: warning: {self.message}"


@dataclass(frozen=True)
class Loaded:
    """A parsed YAML document: Helm's view of the data plus where each path is.

    `positions` maps a path (tuple of keys and indices) to the 1-based (line, column)
    of its value; `key_positions` to the position of its key (for mapping entries).
    """

    data: Any
    source: str
    text: str
    positions: dict = field(repr=False)
    key_positions: dict = field(repr=False)
    warnings: tuple = ()

    def position(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """Position of `path`, or of its nearest ancestor that has one (1-based)."""
        path = tuple(path)
        while True:
            table = self.key_positions if key and path in self.key_positions else self.positions
            if path in table:
                return table[path]
            if not path:
                return (1, 1)
            path = path[:-1]


def format_path(path: Path_) -> str:
    """`a.b[2].c` for ("a", "b", 2, "c"); `(root)` for the empty path."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "(root)"


def parse_field(data: Any, field: str | None) -> Path_:
    """The path into `data` that `format_path` wrote as `field` (`items[3].metadata.labels.
    nvidia.com/gpu.count`): keys with dots are matched against the data, longest first,
    so the path is exact where the data has it and stops where it has not."""
    path: list = []
    rest = field or ""
    node = data
    while rest and rest != "(root)":
        if rest.startswith("["):
            close = rest.find("]")
            if close < 0 or not rest[1:close].isdigit():
                break
            i = int(rest[1:close])
            path.append(i)
            node = node[i] if isinstance(node, list) and i < len(node) else None
            rest = rest[close + 1:]
        else:
            rest = rest[1:] if rest.startswith(".") else rest
            keys = [k for k in node if isinstance(k, str) and rest.startswith(k)
                    and rest[len(k):len(k) + 1] in ("", ".", "[")] if isinstance(node, dict) else []
            key = max(keys, key=len) if keys else re.split(r"[.\[]", rest, maxsplit=1)[0]
            path.append(key)
            node = node.get(key) if isinstance(node, dict) else None
            rest = rest[len(key):]
    return tuple(path)


def _yaml_error(exc: yaml.YAMLError, text: str, source: str) -> SpecError:
    if isinstance(exc, ExcessiveAliasing):
        return SpecError(f"invalid YAML: {exc.message}", source=source,
                         line=exc.mark.line + 1, column=exc.mark.column + 1)
    if isinstance(exc, yaml.reader.ReaderError):
        line, col = line_col(text, exc.position)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return SpecError(f"unacceptable character #x{char:04x} (binary data?), expected YAML "
                         "text", source=source, line=line, column=col)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem and "construct" not in exc.context:
            problem = f"{exc.problem} ({exc.context})"
        msg = f"invalid YAML: {problem}"
        if mark is not None and mark.index >= len(text.rstrip()):
            msg += " (the file ends early: truncated?)"
        return SpecError(msg, source=source,
                         line=mark.line + 1 if mark else None,
                         column=mark.column + 1 if mark else None)
    return SpecError(f"invalid YAML: {exc}", source=source, line=1, column=1)


def _walk_ruamel(node: Any, path: tuple, pos: dict, key_pos: dict, rt: dict,
                 renamed: list | None = None) -> None:
    """Record positions (1-based) and ruamel's YAML 1.2 values for each path, and keys
    Helm renames (`on:` is the key "true" for Helm) in `renamed`."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import ScalarString

    if isinstance(node, CommentedMap):
        for k in node:
            # a quoted or block key (ScalarString, with preserve_quotes) is a string for
            # Helm too; only a plain key is resolved as YAML 1.1 resolves it
            try:
                kp = helm_scalar(k) if isinstance(k, str) and not isinstance(k, ScalarString) else k
            except NotRepresentable:
                kp = k
            sub = path + (helm_key(kp),)
            try:
                kl, kc = node.lc.key(k)
                vl, vc = node.lc.value(k)
            except (KeyError, TypeError, AttributeError):
                continue                 # merged (<<) keys have no position of their own
            key_pos[sub] = (kl + 1, kc + 1)
            pos[sub] = (vl + 1, vc + 1) if vl is not None else (kl + 1, kc + 1)
            if renamed is not None and isinstance(k, str) and sub[-1] != k:
                renamed.append((sub, k))
            _walk_ruamel(node[k], sub, pos, key_pos, rt, renamed)
    elif isinstance(node, CommentedSeq):
        for i, item in enumerate(node):
            try:
                il, ic = node.lc.item(i)
                pos[path + (i,)] = (il + 1, ic + 1)
            except (KeyError, TypeError, AttributeError):
                pass
            _walk_ruamel(item, path + (i,), pos, key_pos, rt, renamed)
    else:
        rt[path] = node


def _plain(value: Any) -> Any:
    """ruamel's scalar subclasses as plain Python values, for comparison."""
    from ruamel.yaml.scalarbool import ScalarBoolean

    if isinstance(value, ScalarBoolean):
        return bool(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if value is None:
        return None
    return str(value)     # dates and tagged scalars: compare by text


def _iter_scalars(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _iter_scalars(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _iter_scalars(v, path + (i,))
    else:
        yield path, data


def _same(helm: Any, rt: Any) -> bool:
    if isinstance(helm, bool) or isinstance(rt, bool):
        return type(helm) is type(rt) and helm == rt
    if isinstance(helm, (int, float)) and isinstance(rt, (int, float)):
        return helm == rt
    return type(helm) is type(rt) and helm == rt


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, str):
        return f"the string {v!r}"
    return repr(v)


def load_text(text: str, source: str = "<string>", *, allow_empty: bool = False) -> Loaded:
    """Parse YAML `text` (one document) as Helm would; see the module docstring."""
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#")
                               for ln in text.splitlines()):
        if allow_empty:
            return Loaded({}, source, text, {(): (1, 1)}, {}, ())
        raise SpecError("file is empty, expected a YAML mapping", source=source, line=1, column=1)
    try:
        nodes, alike = _check_size(text, source)
        docs = _load_all(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    except RecursionError:
        raise SpecError("YAML nested too deeply", source=source, line=1, column=1) from None
    except MemoryError:
        raise SpecError("YAML too large to hold in memory", source=source, line=1, column=1) from None
    if len(docs) > 1:
        second = [m.start() for m in re.finditer(r"(?m)^---", text)]
        line = line_col(text, second[-1])[0] if second else 1
        raise SpecError(f"{len(docs)} YAML documents in one file; expected one",
                        source=source, line=line, column=1)
    data = docs[0] if docs else None
    if data is None and allow_empty:
        data = {}

    pos: dict = {(): (1, 1)}
    key_pos: dict = {}
    rt: dict = {}
    renamed: list = []
    if nodes > ROUND_TRIP_LIMIT or len(text) > ROUND_TRIP_CHARS:
        # ruamel's pure-Python reader takes ~100 us a node: for big files, positions and
        # duplicate keys come from libyaml and the YAML 1.2 comparison (GV010) is skipped.
        _walk_pyyaml(text, pos, key_pos, source=source)
        return Loaded(data, source, text, pos, key_pos, ())
    if alike:
        # Nothing for the comparison to find: positions from libyaml, which places every
        # node where ruamel does, without ruamel's import and reader (about 12 ms of a
        # `validate`). tests/unit/test_yamlio.py checks both ways give the same Loaded.
        try:
            _walk_pyyaml(text, pos, key_pos, source=source)
            pos[()] = (1, 1)
            return Loaded(data, source, text, pos, key_pos, ())
        except SpecError:             # a duplicate key: ruamel's reader words it below
            pos, key_pos = {(): (1, 1)}, {}
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import DuplicateKeyError
    from ruamel.yaml.error import MarkedYAMLError as RMarkedError
    from ruamel.yaml.error import YAMLError as RYAMLError

    try:
        rt_yaml = YAML(typ="rt")
        rt_yaml.preserve_quotes = True     # tells a quoted key from a plain one
        _walk_ruamel(rt_yaml.load(text), (), pos, key_pos, rt, renamed)
    except DuplicateKeyError as exc:
        mark = exc.problem_mark
        key = re.search(r'duplicate key "([^"]*)"', str(exc.problem or ""))
        raise SpecError(f"duplicate key {key.group(1)!r}" if key else "duplicate key",
                        source=source, line=mark.line + 1 if mark else None,
                        column=mark.column + 1 if mark else None,
                        field=None, code="GV039") from None
    except (RMarkedError, RYAMLError, RecursionError, ValueError):
        # ruamel rejects a few things PyYAML takes (and vice versa); the data is still
        # Helm's view, positions fall back to PyYAML's node marks.
        _walk_pyyaml(text, pos, key_pos)

    warnings = []
    for p, text_key in renamed:
        line, col = key_pos.get(p, (1, 1))
        warnings.append(YamlWarning(
            source, line, col, format_path(p),
            f"Helm (YAML 1.1) reads the key {text_key!r} as {p[-1]!r}; YAML 1.2 tools keep "
            f"{text_key!r}; quote the key"))
    for p, helm_value in _iter_scalars(data):
        if p in rt:
            rv = _plain(rt[p])
            if not _same(helm_value, rv):
                line, col = pos.get(p, (1, 1))
                warnings.append(YamlWarning(
                    source, line, col, format_path(p),
                    f"Helm (YAML 1.1) reads this as {_show(helm_value)}, YAML 1.2 tools such "
                    f"as ruamel.yaml or yq read {_show(rv)}; quote it or write it "
                    "unambiguously"))
    return Loaded(data, source, text, pos, key_pos, tuple(warnings))


def _walk_pyyaml(text: str, pos: dict, key_pos: dict, *, source: str | None = None) -> None:
    """Positions from PyYAML's composed node tree (libyaml when available). With `source`,
    a duplicate key is a SpecError there (what ruamel's reader reports otherwise)."""
    def walk(node, path):
        pos[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            names: set = set()
            for k, v in node.value:
                if k.tag == _MERGE_TAG:
                    continue
                try:
                    name = helm_key(helm_scalar(k.value)) if isinstance(k, yaml.ScalarNode) \
                        else str(k.value)
                except NotRepresentable:
                    name = k.value
                if source is not None and name in names:
                    raise SpecError(f"duplicate key {k.value!r}", source=source,
                                    line=k.start_mark.line + 1, column=k.start_mark.column + 1,
                                    code="GV039")
                names.add(name)
                key_pos[path + (name,)] = (k.start_mark.line + 1, k.start_mark.column + 1)
                walk(v, path + (name,))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, path + (i,))
    root = None
    for loader in dict.fromkeys((_LOADERS[0], _HelmLoader)):
        try:
            root = yaml.compose(text, Loader=loader)
            break
        except yaml.YAMLError:
            continue
    if root is not None:
        walk(root, ())


def load_yaml(path: str | Path, *, allow_empty: bool = False) -> Loaded:
    """Read and parse the YAML file at `path` (`-` reads stdin) as Helm would."""
    data, source = read_source(path)
    return load_text(decode(data, source), source, allow_empty=allow_empty)


def load_mapping(path: str | Path, *, allow_empty: bool = False, what: str = "file") -> Loaded:
    """Like load_yaml, but the document must be a mapping (specs and values files)."""
    loaded = load_yaml(path, allow_empty=allow_empty)
    return expect_mapping(loaded, what)


def expect_mapping(loaded: Loaded, what: str = "file") -> Loaded:
    """Raise a SpecError unless the top level of `loaded` is a mapping."""
    if not isinstance(loaded.data, dict):
        kind = {list: "a list", str: "a string", type(None): "empty"}.get(
            type(loaded.data), type(loaded.data).__name__)
        raise SpecError(f"the {what} must be a YAML mapping (key: value), got {kind}",
                        source=loaded.source, line=1, column=1)
    return loaded


# libyaml's reader is about 10x faster than PyYAML's pure-Python one (manifests, tool
# output, a catalog file edited since catalog/gpus/index.json); both build the same data.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKey(yaml.YAMLError):
    """A mapping that gives one key twice (`parse_yaml(..., unique_keys=True)`)."""

    def __init__(self, mark, key: Any) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.mark, self.key = mark, key


class _UniqueKeys:
    """Refuse a key given twice in one mapping (PyYAML keeps the last one silently; Helm's
    go-yaml and kubectl's JSON readers disagree on which wins). Merge keys are exempt."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for k, _ in node.value:
                if not isinstance(k, yaml.ScalarNode) or k.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(k)
                if key in seen:
                    raise DuplicateKey(k.start_mark, key)
                seen.add(key)
        return super().construct_mapping(node, deep)


_UNIQUE_LOADERS = {loader: type(f"_Unique{loader.__name__}", (_UniqueKeys, loader), {})
                   for loader in (getattr(yaml, "CSafeLoader", yaml.SafeLoader), yaml.SafeLoader)}


def position_in(text: str, path: Path_) -> tuple[int, int]:
    """The 1-based (line, column) of `path` (or its nearest ancestor) in YAML `text`, from
    libyaml's node marks: for a data file's error, after the fast reader kept no positions."""
    pos: dict = {(): (1, 1)}
    try:
        _walk_pyyaml(text, pos, {})
    except (yaml.YAMLError, RecursionError):
        pass
    path = tuple(path)
    while path not in pos:
        path = path[:-1]
    return pos[path]


def parse_yaml(text: str, *, source: str | None = None, error: type[GpuValuesError] = GpuValuesError,
               all_documents: bool = False, unique_keys: bool = False) -> Any:
    """Plain YAML data (PyYAML safe types) from `text`: one document, or a list of the
    non-empty ones with `all_documents`.

    For data files and tool output (catalog, inventories, manifests, HPA behaviors); spec
    and values files go through `yamlio`, which reads YAML exactly as Helm does. A syntax
    error raises `error` with the file, line and column. The fast libyaml reader runs
    first; on an error the pure-Python reader parses again, so messages are PyYAML's.
    """
    for loader in dict.fromkeys((SAFE_LOADER, yaml.SafeLoader)):
        try:
            docs = _documents(text, _UNIQUE_LOADERS[loader] if unique_keys else loader)
            if all_documents:
                return [doc for doc in docs if doc]
            if len(docs) > 1:
                raise error(f"{len(docs)} YAML documents; expected one", source=source)
            return docs[0] if docs else None
        except ExcessiveAliasing as exc:
            raise error(f"invalid YAML: {exc.message}", source=source,
                        line=exc.mark.line + 1, column=exc.mark.column + 1) from None
        except DuplicateKey as exc:
            raise error(f"duplicate key {exc.key!r}", source=source, line=exc.mark.line + 1,
                        column=exc.mark.column + 1, code="GV039") from None
        except (RecursionError, MemoryError) as exc:
            what = "nested too deeply" if isinstance(exc, RecursionError) else "too large"
            raise error(f"YAML/JSON {what} to read", source=source, line=1, column=1) from None
        except yaml.YAMLError as exc:
            last = exc
            if len(text) > ROUND_TRIP_CHARS:
                break              # libyaml's message: the pure-Python reader is too slow here
    mark = getattr(last, "problem_mark", None)
    raise error(f"invalid YAML: {getattr(last, 'problem', None) or last}", source=source,
                line=mark.line + 1 if mark else None,
                column=mark.column + 1 if mark else None) from None
