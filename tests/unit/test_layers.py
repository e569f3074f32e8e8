"""The package's layers import one way only (the import contract, checked on the source).

    base (errors, kube, yamlio, bundle) -> catalog -> planners -> fleet -> checks -> render
    -> edges (io, pipeline, operations) -> cli / the package's public API

A module may import its own layer and the layers before it, never a later one: so the
planners stay pure (no helm, no files, no printing) and the CLI stays a thin shell.
Imports inside functions count too (lazy imports are still dependencies).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gpuvalues"
LAYERS = [
    {"errors", "kube", "yamlio", "bundle", "schemas"},
    {"catalog"},
    {"planners"},
    {"fleet"},
    {"checks"},
    {"render"},
    {"io", "pipeline", "operations"},
    {"cli", "__init__"},
]


def _layer(top: str) -> int:
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"gpuvalues.{top} is in no layer: add it to LAYERS in {__file__}")


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "gpuvalues" and len(parts) > 1 else None


def _imports(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gpuvalues":
                for a in node.names:
                    yield node.lineno, f"gpuvalues.{a.name}"
            else:
                yield node.lineno, node.module


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        yield path, rel.parts[0].removesuffix(".py")


def violations() -> list[str]:
    out = []
    for path, top in _modules():
        mine = _layer(top)
        for line, module in _imports(path):
            other = _top(module)
            if other is None or other == "__version__":
                continue
            if _layer(other) > mine:
                out.append(f"gpuvalues/{path.relative_to(PACKAGE)}:{line}: {top} (layer {mine}) "
                           f"imports {module} (layer {_layer(other)})")
    return out


def test_layers_import_one_way():
    assert violations() == []


def test_the_contract_can_fail(tmp_path, monkeypatch):
    """Negative control: a planner that imports the renderer is reported."""
    fake = tmp_path / "gpuvalues"
    (fake / "planners").mkdir(parents=True)
    (fake / "planners" / "bad.py").write_text("from gpuvalues.render import helm\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake, raising=False)
    globals()["PACKAGE"] = fake
    try:
        found = violations()
    finally:
        globals()["PACKAGE"] = Path(__file__).resolve().parents[2] / "gpuvalues"
    assert found == ["gpuvalues/planners/bad.py:1: planners (layer 2) imports gpuvalues.render "
                     "(layer 5)"]


@pytest.mark.parametrize("top", sorted({t for _, t in _modules()}))
def test_every_module_has_a_layer(top):
    _layer(top)
