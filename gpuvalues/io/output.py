"""Output formats for the CLI: tables for people, JSON or YAML for machines."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

FORMATS = ("table", "yaml", "json")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table."""
    n = len(headers)
    cells = [[str(h) for h in headers]]
    for r in rows:     # strings as they are (a 1,024-GPU topology table has a million cells)
        r = list(r[:n])
        cells.append(r if set(map(type, r)) <= {str} else [("" if c is None else str(c)) for c in r])
    widths = [max(map(len, col)) for col in zip(*cells)] if len(cells) > 1 else [len(h) for h in cells[0]]
    row_format = "  ".join("{:<%d}" % w if w else "{}" for w in widths)
    lines = [row_format.format(*r).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def render(data: Any, fmt: str, as_table: Callable[[Any], str]) -> str:
    """Render `data` (plain dicts/lists) as `fmt`; `as_table` makes the people's view."""
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False) + "\n"
    if fmt == "yaml":         # yaml.safe_dump's text; simple data by the fast writer (a
        # 1,024-GPU topology report: 31 s of CPU and 640 MB in PyYAML's emitter)
        from gpuvalues.yamlio.writer import dump   # here: `--help` and the other formats need no YAML
        return dump(data, allow_unicode=False)
    return as_table(data)
