"""Output formats for the CLI: tables for people, JSON or YAML for machines."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

FORMATS = ("table", "yaml", "json")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def render(data: Any, fmt: str, as_table: Callable[[Any], str]) -> str:
    """Render `data` (plain dicts/lists) as `fmt`; `as_table` makes the people's view."""
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False) + "\n"
    if fmt == "yaml":
        import yaml           # here: `--help` and the other formats need no YAML
        return yaml.safe_dump(data, sort_keys=False)
    return as_table(data)
