#!/usr/bin/env python3
"""mypy --strict over gpuvalues/ with a ratchet: ci/mypy-ratchet.txt holds, per file, the most
strict-mode errors it may have. A file above its ceiling (or a new file with any error) fails;
a file below it passes and is named, so the ceiling can come down (`--update` rewrites the file
with today's counts, never raising one). The goal is 0 everywhere; files at 0 stay there.

    .venv/bin/python ci/typecheck.py [--update]
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATCHET = ROOT / "ci" / "mypy-ratchet.txt"
# Strict, no ratchet: these files and folders must have 0 mypy --strict errors, and the ratchet
# may not list them: the base, catalog, planners and fleet layers (issue 28), then checks,
# render and the CLI. A folder or file joins when it reaches 0; it never leaves.
STRICT = ("gpuvalues/errors.py", "gpuvalues/kube.py", "gpuvalues/bundle.py", "gpuvalues/schemas.py",
          "gpuvalues/csvtext.py", "gpuvalues/yamlio/",           # base
          "gpuvalues/catalog/", "gpuvalues/planners/", "gpuvalues/fleet/",
          "gpuvalues/checks/", "gpuvalues/render/", "gpuvalues/cli.py", "gpuvalues/__init__.py")
_ERROR = re.compile(r"^(gpuvalues/[^:]+\.py):\d+(?::\d+)?: error: ")


def counts(output: str) -> dict[str, int]:
    """Errors per file in mypy's output."""
    found: collections.Counter[str] = collections.Counter()
    for line in output.splitlines():
        m = _ERROR.match(line)
        if m:
            found[m.group(1)] += 1
    return dict(found)


def read_ratchet(path: Path = RATCHET) -> dict[str, int]:
    ceilings = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, n = line.rpartition(" ")
            ceilings[name.strip()] = int(n)
    return ceilings


def strict(name: str) -> bool:
    """`name` is held to 0 errors (STRICT), whatever the ratchet says."""
    return any(name == s or (s.endswith("/") and name.startswith(s)) for s in STRICT)


def compare(now: dict[str, int], ceilings: dict[str, int]) -> tuple[list[str], list[str]]:
    """(failures, improvements) of today's counts against the ceilings."""
    worse, better = [], []
    for name in sorted(n for n in ceilings if strict(n)):
        worse.append(f"{name}: strict (ci/typecheck.py STRICT), so ci/mypy-ratchet.txt may not list it")
    ceilings = {k: v for k, v in ceilings.items() if not strict(k)}
    for name in sorted(set(now) | set(ceilings)):
        n, limit = now.get(name, 0), ceilings.get(name, 0)
        if n > limit:
            worse.append(f"{name}: {n} strict-mode errors, the ratchet allows {limit}")
        elif n < limit:
            better.append(f"{name}: {n} (ratchet {limit})")
    return worse, better


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="lower the ceilings to today's counts")
    args = ap.parse_args(argv)
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", "gpuvalues"], cwd=ROOT,
                         capture_output=True, text=True)
    if res.returncode not in (0, 1) or "error: " in res.stderr:
        print(res.stdout + res.stderr, file=sys.stderr)
        print("typecheck: mypy itself failed", file=sys.stderr)
        return 2
    now = counts(res.stdout)
    ceilings = read_ratchet() if RATCHET.exists() else {}
    worse, better = compare(now, ceilings)
    if args.update:
        merged = {k: min(now.get(k, 0), v) for k, v in ceilings.items()} if ceilings else now
        body = "".join(f"{k} {v}\n" for k, v in sorted(merged.items()) if v)
        RATCHET.write_text("# mypy --strict errors allowed per file (ci/typecheck.py); only ever lower these.\n"
                           + body)
        print(f"typecheck: wrote {RATCHET.relative_to(ROOT)} ({sum(now.values())} errors in {len(now)} files)")
        return 0
    if worse:
        bad = {w.split(":")[0] for w in worse}
        print("\n".join(ln for ln in res.stdout.splitlines() if ln.split(":")[0] in bad))
        print("typecheck: over the ratchet:\n  " + "\n  ".join(worse), file=sys.stderr)
        return 1
    total = sum(now.values())
    print(f"typecheck: mypy --strict, {total} errors in {len(now)} files, none over ci/mypy-ratchet.txt"
          + (f"; lower the ratchet for {len(better)} file(s) (ci/typecheck.py --update)" if better else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
