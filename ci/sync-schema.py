#!/usr/bin/env python3
"""Generate charts/gpu-inference/values.schema.json from schemas/values.schema.json.

schemas/values.schema.json is the single source of truth. The chart's copy is the same
schema, re-serialised (2-space indent, trailing newline) with a header note in
`$comment`, so a test can regenerate it and fail on any drift.

Usage: python ci/sync-schema.py           # write the chart copy
       python ci/sync-schema.py --check   # exit 1 if the chart copy differs
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "schemas" / "values.schema.json"
TARGET = ROOT / "charts" / "gpu-inference" / "values.schema.json"
NOTE = "GENERATED from schemas/values.schema.json by ci/sync-schema.py: edit the source, not this file."


def generate(source: Path = SOURCE) -> str:
    """Return the text of the chart's values.schema.json for `source`."""
    schema = json.loads(source.read_text())
    out = {"$comment": NOTE}
    out.update((k, v) for k, v in schema.items() if k != "$comment")
    return json.dumps(out, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run python ci/sync-schema.py", file=sys.stderr)
            return 1
        return 0
    tmp = TARGET.with_suffix(".json.tmp")
    tmp.write_text(text)
    tmp.replace(TARGET)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
