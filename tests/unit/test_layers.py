"""The package's layers import one way only (the import contract, checked on the source).

    base (errors, kube, yamlio, bundle, csvtext) -> catalog -> planners -> fleet -> checks -> render
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
    {"errors", "kube", "yamlio", "bundle", "schemas", "csvtext"},
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


# ------------------------------------------------------------------ relative imports, cycles, privates
def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = ("gpuvalues", *rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_modules() -> dict[str, Path]:
    return {_module_name(p): p for p, _ in _modules()}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The package module an import names (`gpuvalues.a.b.f` -> `gpuvalues.a.b`)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def relative_imports() -> list[str]:
    out = []
    for path, _ in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                out.append(f"gpuvalues/{path.relative_to(PACKAGE)}:{node.lineno}: relative import")
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (lazy imports too; `from pkg import mod` is mod)."""
    known = _package_modules()
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                target = _resolve(n, known)
                if target and target != mod and not mod.startswith(target + ".") and target != "gpuvalues":
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def private_reach() -> list[str]:
    """Uses of another module's `_private` names: `from m import _x` or `m._x` on an imported module."""
    known = _package_modules()
    out = []
    for mod, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in known:
                        aliases[a.asname or a.name] = full
                    elif node.module in known and node.module != mod and a.name.startswith("_") \
                            and not a.name.startswith("__"):
                        out.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: from {node.module} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in known and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != mod
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                out.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return sorted(set(out))


def test_no_relative_imports():
    # the layer check above reads absolute names only; a relative import would slip past it
    assert relative_imports() == []


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert sum(len(v) for v in graph.values()) > 50, "the graph is nearly empty: the scan is broken"
    assert cycles(graph) == []


def test_no_module_reaches_into_another_modules_privates():
    assert private_reach() == []


def test_the_cycle_and_privacy_checks_can_fail():
    """Negative controls on a made-up graph and a made-up module."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
