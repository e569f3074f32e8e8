#!/usr/bin/env python3
"""Generate the Parameters section of charts/gpu-inference/README.md from the
`## @section` / `## @param` comments in values.yaml (the Bitnami readme-generator
convention: `## @param key.path [modifiers] Description`), and check it.

The table sits between `<!-- parameters:start -->` and `<!-- parameters:end -->`.
Default values are read from values.yaml itself (YAML 1.1 types, as Helm sees them).

Usage: python ci/readme-params.py           # rewrite the README section
       python ci/readme-params.py --check   # exit 1 if the README or the @param lines are stale
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "gpu-inference"
START, END = "<!-- parameters:start -->", "<!-- parameters:end -->"
PARAM = re.compile(r"^\s*## @param\s+(\S+)\s*(?:\[([^\]]*)\])?\s*(.*)$")
SECTION = re.compile(r"^\s*## @section\s+(.+?)\s*$")
MISSING = object()


@dataclass(frozen=True)
class Param:
    """One `## @param` line."""
    key: str
    modifiers: tuple[str, ...]
    description: str
    section: str
    line: int


def parse(values_text: str) -> list[Param]:
    """All @param lines, in file order, with the section they belong to."""
    params, section = [], ""
    for n, line in enumerate(values_text.splitlines(), 1):
        if m := SECTION.match(line):
            section = m.group(1)
        elif m := PARAM.match(line):
            mods = tuple(x.strip() for x in (m.group(2) or "").split(",") if x.strip())
            params.append(Param(m.group(1), mods, m.group(3).strip(), section, n))
    return params


def lookup(values: dict, key: str):
    node = values
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def leaves(values, prefix=""):
    """Dotted paths of leaves; empty maps/lists and scalars are leaves."""
    if isinstance(values, dict) and values:
        for k, v in values.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix


def problems(params: list[Param], values: dict) -> list[str]:
    """@param lines naming no key, duplicate @params, and leaves no @param covers."""
    out, keys = [], set()
    for p in params:
        if p.key in keys:
            out.append(f"values.yaml:{p.line}: @param {p.key} is declared twice")
        keys.add(p.key)
        if lookup(values, p.key) is MISSING:
            out.append(f"values.yaml:{p.line}: @param {p.key} names no key in values.yaml")
        if not p.description:
            out.append(f"values.yaml:{p.line}: @param {p.key} has no description")
    for leaf in leaves(values):
        parts = leaf.split(".")
        if not any(".".join(parts[:i]) in keys for i in range(1, len(parts) + 1)):
            out.append(f"values.yaml: {leaf} has no ## @param line")
    return out


def fmt(value) -> str:
    if value is MISSING:
        return ""
    if value is None:
        return "`nil`"
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" else f"`{value}`"
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else json.dumps(value)
    return f"`{text}`"


def table(params: list[Param], values: dict) -> str:
    """The Markdown Parameters section: one table per @section."""
    lines, section = [], None
    for p in params:
        if p.section != section:
            section = p.section
            lines += ["", f"### {section}", "", "| Name | Description | Value |", "| ---- | ----------- | ----- |"]
        desc = p.description.replace("|", "\\|")
        lines.append(f"| `{p.key}` | {desc} | {fmt(lookup(values, p.key))} |")
    return "\n".join(lines).lstrip("\n") + "\n"


def render_readme(readme: str, section: str) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"README.md lacks the {START} / {END} markers")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{section}{END}{tail}"


def main(argv: list[str]) -> int:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    params = parse(text)
    errs = problems(params, values)
    readme_path = CHART / "README.md"
    readme = readme_path.read_text()
    new = render_readme(readme, table(params, values))
    if "--check" in argv:
        if new != readme:
            errs.append("charts/gpu-inference/README.md: the Parameters table is stale: run python ci/readme-params.py")
        for e in errs:
            print(e, file=sys.stderr)
        return 1 if errs else 0
    for e in errs:
        print(e, file=sys.stderr)
    readme_path.write_text(new)
    print(f"wrote {readme_path.relative_to(ROOT)} ({len(params)} parameters)")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
