"""Shared by the benchmarks in bench/: timing a call over several runs, writing README's tables."""
from __future__ import annotations

import statistics
import time
from pathlib import Path


def timed(fn, runs: int) -> tuple[float, float]:
    """(median, spread max - min) of `fn()`'s wall time over `runs` runs, in seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times) - min(times)


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_section(name: str, text: str, readme: Path = README) -> None:
    """Replace what README holds between `<!-- bench:NAME -->` and the next `<!-- /bench -->`
    with `text` (the bench's own table), leaving everything outside the markers as it is."""
    src = readme.read_text()
    start = f"<!-- bench:{name} -->\n"
    i = src.find(start)
    j = src.find("<!-- /bench -->", i + len(start)) if i >= 0 else -1
    if i < 0 or j < 0:
        raise SystemExit(f"{readme}: no `{start.strip()}` ... `<!-- /bench -->` section to write")
    readme.write_text(src[:i + len(start)] + text.rstrip("\n") + "\n" + src[j:])
