"""README documents what users rely on: every error code, the public API."""
from __future__ import annotations

import re

import gpuvalues
from gpuvalues.errors import CODES
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_lists_every_error_code_as_registered():
    rows = [line for line in README.splitlines() if line.startswith("| GV")]
    assert rows == [f"| {c} | {t} | {h} |" for c, (t, h) in CODES.items()]


def test_every_public_name_resolves_and_the_readme_names_the_entry_points():
    for name in gpuvalues.__all__:
        assert getattr(gpuvalues, name) is not None, name
    for name in ("load_spec", "build_fleet", "check_fleet", "expected_nodes", "render_values"):
        assert f"gpuvalues.{name}" in README, name


def test_readme_layers_table_is_the_enforced_contract_and_the_folders():
    """README's "The package's layers" table names, row by row, exactly the modules and
    folders of each layer that tests/unit/test_layers.py enforces, and every one exists."""
    from tests.unit.test_layers import LAYERS, PACKAGE
    text = (ROOT / "README.md").read_text()
    section = text.split("### The package's layers", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| layer")]
    named = [{n.strip("/") for n in re.findall(r"`([a-z_]+/?)`", row.split("|")[2])} for row in rows]
    assert named == [set(layer) - {"__init__"} for layer in LAYERS]
    for layer in named:
        for name in layer:
            assert (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file(), name
    # ...and each folder's modules and subpackages, at any depth, in the row's description
    for row, layer in zip(rows, named):
        words = {w for item in re.findall(r"`([^`]+)`", row.split("|")[3]) for w in re.split(r"[/.: ]", item)}
        for name in layer:
            if (PACKAGE / name).is_dir():
                inner = {p.stem if p.is_file() else p.name for p in (PACKAGE / name).rglob("*")
                         if (p.suffix == ".py" and p.stem != "__init__")
                         or (p.is_dir() and any(p.glob("*.py")))}
                assert inner <= words, f"README's layers table does not name {sorted(inner - words)} ({name}/)"
