"""yamlio: YAML read as Helm reads it, positions for every path, positioned errors."""
from __future__ import annotations

import io
import math
import sys

import pytest

from gpuvalues.yamlio.loader import NotRepresentable, expect_mapping, format_path, helm_scalar, load_text, load_yaml
from gpuvalues.yamlio import loader as yaml_loader
from gpuvalues.errors import GpuValuesError, SpecError

# What Helm makes of plain scalars. Observed with the pinned Helm 4.1.4 and 3.17.2
# (a template printing `kindOf` and the value of each entry; both binaries agree);
# tests/chart/test_yaml_typing.py re-derives every row from the real binaries.
HELM_TYPES = [
    ("yes", True), ("on", True), ("y", True), ("Y", True), ("n", False), ("Off", False),
    ("NO", False), ("True", True), ("FALSE", False),
    ("0755", 493), ("-0755", -493), ("0o755", 493), ("0x1F", 31), ("0b101", 5),
    ("1e3", 1000.0), ("1.0e+3", 1000.0), ("+12", 12), ("1_000", 1000), ("1.5", 1.5),
    ("1.", 1.0), (".5", 0.5), ("09", 9),
    ("1:20", "1:20"), ("2024-01-02", "2024-01-02"), ("~", None), ("null", None),
    ("yes please", "yes please"), ("1e400", "1e400"), ("v1.34", "v1.34"), ("-1", -1),
]


@pytest.mark.parametrize("text, expected", HELM_TYPES)
def test_plain_scalars_resolve_as_helm(text, expected):
    got = load_text(f"k: {text}\n", "v.yaml").data["k"]
    assert got == expected
    assert type(got) is type(expected)


def test_big_integer_becomes_float_like_helm():
    got = load_text("k: 123456789012345678901234567890\n").data["k"]
    assert isinstance(got, float) and got == pytest.approx(1.2345678901234568e29)


def test_quoted_and_tagged_scalars_stay_strings():
    data = load_text('a: "yes"\nb: \'0755\'\nc: !!str 1e3\n').data
    assert data == {"a": "yes", "b": "0755", "c": "1e3"}


def test_keys_become_strings_and_renamed_keys_warn():
    loaded = load_text("on: 1\n7: x\nplain: 2\n", "v.yaml")
    assert loaded.data == {"true": 1, "7": "x", "plain": 2}
    texts = [str(w) for w in loaded.warnings]
    assert texts == ["v.yaml:1:1: true: warning: Helm (YAML 1.1) reads the key 'on' as "
                     "'true'; YAML 1.2 tools keep 'on'; quote the key"]


def test_a_quoted_key_is_a_string_for_helm_too():
    """'yes': is the key "yes" for Helm and for YAML 1.2 tools alike: no warning, and its
    position is found under "yes" (a plain yes: is still Helm's "true")."""
    loaded = load_text("'yes': 1\n\"on\": 2\nno: 3\n", "v.yaml")
    assert loaded.data == {"yes": 1, "on": 2, "false": 3}
    assert [w.path for w in loaded.warnings] == ["false"]
    assert loaded.position(("yes",)) == (1, 8) and loaded.position(("on",)) == (2, 7)


def test_yaml12_divergence_warns_with_line():
    text = "a:\n  b: yes\n  mode: 0755\n  ok: 0o755\n  f: 1e3\n  s: 'yes'\n"
    loaded = load_text(text, "v.yaml")
    by_path = {w.path: w for w in loaded.warnings}
    assert set(by_path) == {"a.b", "a.mode"}
    assert (by_path["a.b"].line, by_path["a.b"].column) == (2, 6)
    assert (by_path["a.mode"].line, by_path["a.mode"].column) == (3, 9)
    assert "true" in by_path["a.b"].message and "'yes'" in by_path["a.b"].message
    assert "493" in by_path["a.mode"].message and "755" in by_path["a.mode"].message


def test_positions_of_maps_lists_and_flow():
    text = ("top:\n"
            "  list:\n"
            "    - name: a\n"
            "      v: 1\n"
            "    - {name: b, v: 2}\n"
            "  scalar: x\n")
    loaded = load_text(text, "f.yaml")
    assert loaded.position(("top", "scalar")) == (6, 11)
    assert loaded.position(("top", "list", 0, "v")) == (4, 10)
    assert loaded.position(("top", "list", 1, "v")) == (5, 20)   # 4 + "- {name: b, v: " = 19
    assert loaded.position(("top", "list", 1)) == (5, 7)
    assert loaded.position(("top", "scalar"), key=True) == (6, 3)
    # a path that does not exist falls back to its nearest ancestor
    assert loaded.position(("top", "list", 0, "missing")) == loaded.position(("top", "list", 0))
    assert loaded.position(("nope",)) == (1, 1)


def test_format_path():
    assert format_path(("a", "b", 2, "c")) == "a.b[2].c"
    assert format_path(()) == "(root)"


@pytest.mark.parametrize("text, line, column, words", [
    ("a: [1, 2\n", 2, 1, "truncated"),
    ("a:\n  b: 1\n c: 2\n", 3, 2, "invalid YAML"),
    ("a: 1\na: 2\n", 2, 1, "duplicate key 'a'"),
    ("a: 1\n---\nb: 2\n", 2, 1, "2 YAML documents"),
    ("a: .inf\n", 1, 4, "infinity or NaN"),
    ("a: \x01\n", 1, 4, "#x0001"),
    ("a: 'unterminated\n", 2, 1, "invalid YAML"),
    ("\tkey: 1\n", 1, 1, "invalid YAML"),
])
def test_malformed_yaml_is_a_positioned_spec_error(text, line, column, words):
    with pytest.raises(SpecError) as exc:
        load_text(text, "bad.yaml")
    err = exc.value
    assert isinstance(err, GpuValuesError)
    assert (err.source, err.line, err.column) == ("bad.yaml", line, column)
    assert words in str(err)
    assert "\n" not in str(err)
    assert str(err).startswith(f"bad.yaml:{line}:{column}: ")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_files(text):
    with pytest.raises(SpecError, match=r"^e\.yaml:1:1: file is empty"):
        load_text(text, "e.yaml")
    assert load_text(text, "e.yaml", allow_empty=True).data == {}


def test_bytes_not_utf8_and_nul(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError) as exc:
        load_yaml(bad)
    assert (exc.value.line, exc.value.column) == (1, 10)
    assert "not UTF-8" in str(exc.value) and "0xe9" in str(exc.value)
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"a: 1\nb: \x00\x01\x02\n")
    with pytest.raises(SpecError) as exc:
        load_yaml(nul)
    assert (exc.value.line, exc.value.column) == (2, 4)
    assert "binary" in str(exc.value)


def test_utf8_bom_and_unicode_are_fine(tmp_path):
    f = tmp_path / "u.yaml"
    f.write_bytes("\ufeffmodel: \u00e9t\u00e9-\u6a21\u578b\n".encode("utf-8"))
    assert load_yaml(f).data == {"model": "\u00e9t\u00e9-\u6a21\u578b"}


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_yaml(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="is a directory"):
        load_yaml(tmp_path)


def test_dash_reads_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a:\n  b: on\n")))
    loaded = load_yaml("-")
    assert loaded.source == "<stdin>"
    assert loaded.data == {"a": {"b": True}}
    assert loaded.position(("a", "b")) == (2, 6)


def test_expect_mapping():
    with pytest.raises(SpecError, match="must be a YAML mapping .* got a list"):
        expect_mapping(load_text("- 1\n", "l.yaml"), "spec")


def test_helm_scalar_direct():
    assert helm_scalar("0") == 0
    assert helm_scalar("-0x10") == -16
    with pytest.raises(NotRepresentable):
        helm_scalar(".NaN")
    assert math.isclose(helm_scalar("-1.5e-3"), -0.0015)


@pytest.mark.parametrize("loader", yaml_loader._LOADERS, ids=lambda ln: ln.__name__)
def test_fast_and_pure_readers_agree(loader):
    import yaml
    text = "s:\n" + "".join(f"  k{i}: {t}\n" for i, (t, _) in enumerate(HELM_TYPES))
    data = yaml.load(text, Loader=loader)["s"]
    for i, (t, expected) in enumerate(HELM_TYPES):
        assert data[f"k{i}"] == expected and type(data[f"k{i}"]) is type(expected), t


# ------------------------------------------------------------------ the fast path

def _loaded(text):
    """load_text's result, or the error it raises, as comparable data."""
    try:
        return load_text(text, "s.yaml")
    except SpecError as exc:
        return ("error", str(exc))


def _round_trip_reader(monkeypatch):
    """Make load_text take ruamel's round-trip reader for every document."""
    real = yaml_loader._check_size
    monkeypatch.setattr(yaml_loader, "_check_size", lambda text, source: (real(text, source)[0], False))


TRICKY = ["yes", "no", "on", "Off", "y", "n", "~", "null", "Null", "NULL", "", "0755", "0o17",
          "0x1F", "0b11", "1_000", "1e3", "1.5e3", "1.", ".5", ".inf", "-.inf", ".nan", "+1", "-1",
          "1.0", "01", "09", "2001-12-14", "2001-12-14 21:59:43.10 -5", "12:30", "1:20:30", "=",
          "<<", "true", "True", "TRUE", "False", "a", "v1.34", "yes please", "a b", "'q'", '"d"',
          "'it''s'", '"t\\tab"', '"\\u00e9"', "|\n  block", ">-\n  folded", "!!str 1", "&a 1",
          "*a", "[1, 2]", "{a: 1}", "[]", "{}", "9" * 20, "-0", "0.0", "-0.0", "3.14159",
          "é", "a#b", "a #c", "@x", "`x`", "%x", "x:", "? x", "- x"]
# ...and ones at the edge of what the fast path takes (`yaml_loader._alike_scalar`)
NEAR = ["a", "o", "yes_", "Yes1", "nO", "y1", "true1", "Truex", "null_", "ON1", "e5", "E",
        "inf", "nan", "NaN", "Infinity", "0", "-0", "10", "1.5", "0.0", "-0.0", "123456789012345",
        "1.000000000000001", "'yes'", '"on"', "'0755'", "''", '""', "a b", "a:b", "a@b", "x+y",
        "A_B", "v1", "x/y.z", "a-"]


def _mutations(text, rng, n):
    """`text` with one to three scalars replaced by TRICKY ones (keys included)."""
    import yaml

    spans = [(e.start_mark.index, e.end_mark.index) for e in yaml.parse(text)
             if isinstance(e, yaml.ScalarEvent)]
    for _ in range(n):
        out = text
        for a, b in sorted(rng.sample(spans, min(len(spans), rng.choice([1, 1, 2, 3]))),
                           reverse=True):
            out = out[:a] + rng.choice(TRICKY if rng.random() < 0.3 else NEAR) + out[b:]
        yield out


def test_the_fast_path_loads_what_the_round_trip_reader_loads(monkeypatch):
    """Documents YAML 1.1 and 1.2 read alike skip ruamel's reader: the same data,
    positions, key positions, warnings and errors as with it, on every example, chart
    values file and test document, and on thousands of mutations of the examples."""
    import random
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = sorted(root.glob("examples/**/*.yaml")) + sorted(root.glob("charts/*/ci/*.yaml")) + \
        [root / "charts" / "gpu-inference" / "values.yaml"] + sorted(root.glob("tests/**/*.yaml"))
    texts = [p.read_bytes().decode("utf-8", "replace") for p in files]
    rng = random.Random(15)
    texts += [m for t in texts[:13] for m in _mutations(t, rng, 40)]
    fast = [_loaded(t) for t in texts]
    took = sum(yaml_loader._check_size(t, "s.yaml")[1] for t in texts)
    _round_trip_reader(monkeypatch)
    for text, got in zip(texts, fast, strict=True):
        assert got == _loaded(text), text
    assert took > len(texts) // 3          # the fast path, well exercised
