"""Comma-separated text with each field's column, for readers whose errors must say
`file:line:col` (load traces, `nvidia-smi --query-gpu --format=csv` output).

Python's `csv` module gives values but not where they are. This reads the same text the
way its default (`excel`) dialect does for one physical line: fields split on `,`, a
field whose first character is `"` is quoted (`""` inside is one `"`), anything else is
taken as it stands. Stricter where csv guesses: an unclosed quote or text after a closing
quote is refused (a quoted field cannot span lines here: neither input has one).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    """One field: its value (blanks around it removed), and the 1-based column of its
    first non-blank character (of where it starts, when it is empty)."""

    value: str
    column: int


class CsvSyntaxError(ValueError):
    """A line that is not comma-separated text; `column` is 1-based."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


def split_line(line: str) -> list[Cell]:
    """The fields of one line (without its line break)."""
    cells: list[Cell] = []
    i, n = 0, len(line)
    while True:
        start = i
        if i < n and line[i] == '"':
            parts = []
            i += 1
            while True:
                close = line.find('"', i)
                if close < 0:
                    raise CsvSyntaxError("a quoted field is not closed on its line", start + 1)
                parts.append(line[i:close])
                if line.startswith('"', close + 1):      # "" inside: one quote
                    parts.append('"')
                    i = close + 2
                    continue
                i = close + 1
                break
            if i < n and line[i] != "," and line[i:].split(",", 1)[0].strip():
                raise CsvSyntaxError("text after a closing quote", i + 1)
            end = line.find(",", i)
            cells.append(Cell("".join(parts).strip(), start + 1))
        else:
            end = line.find(",", i)
            raw = line[i:] if end < 0 else line[i:end]
            lead = len(raw) - len(raw.lstrip())
            cells.append(Cell(raw.strip(), start + 1 + (lead if raw.strip() else 0)))
        if end < 0:
            return cells
        i = end + 1


def end_column(line: str) -> int:
    """The column just past the end of `line`: where a missing field would be."""
    return len(line.rstrip()) + 1
