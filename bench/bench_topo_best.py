"""Benchmark: `gpuvalues topo --best N` on 32-GPU nodes (target: under 2 s end to end).

Generated `nvidia-smi topo -m` matrices of 32 GPUs: an NVSwitch node (every pair NV18,
two NUMA nodes), four NVLink islands of 8 (NV12 inside, SYS across) and pairs bridged by
NV4 on PCIe (PIX/PHB/SYS by distance) -- the go-gpuallocator best-effort search, in
`gpuvalues.planners.scheduling.topology.allocate_best_effort`. Each row: the CLI as a subprocess
(interpreter start included) and the library call, median of --runs and the spread.

The same three shapes at --gpus (default 32, then 1,024: issue 25's hostile size; there
the exact search is skipped past 128 GPUs and the answer is greedy, with its stated upper
bound; "exact" says which).

    .venv/bin/python bench/bench_topo_best.py [--runs 5] [--best 4] [--gpus 32,1024]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import timed  # noqa: E402
from gpuvalues.planners.scheduling.topology import parse_topo_matrix  # noqa: E402

TARGET_S = 2.0


def matrix(n: int, cell) -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
    rows = []
    for i in range(n):
        cells = ["X" if i == j else cell(i, j) for j in range(n)]
        numa = 0 if i < n // 2 else 1
        rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{numa * 48}-{numa * 48 + 47}\t{numa}\n")
    return head + "".join(rows)


NODES = {
    "NVSwitch, 32x NV18": lambda i, j: "NV18",
    "4 islands of 8 (NV12 / SYS)": lambda i, j: "NV12" if i // 8 == j // 8 else "SYS",
    "NV4 pairs on PCIe": lambda i, j: "NV4" if i // 2 == j // 2 else
    ("PIX" if i // 4 == j // 4 else "PHB" if i // 16 == j // 16 else "SYS"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--best", type=int, default=4)
    ap.add_argument("--gpus", default="32,1024", help="node sizes, comma-separated")
    args = ap.parse_args()
    gv = str(ROOT / ".venv" / "bin" / "gpuvalues")
    print(f"| GPUs, --best {args.best} | GPUs chosen | exact | score (bound) | library best_gpu_set "
          "(median, spread) | CLI (median, spread) |")
    print("|---|---|---|---:|---:|---:|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(x) for x in args.gpus.split(",")):
            for name, cell in NODES.items():
                text = matrix(size, cell)
                path = Path(tmp) / "topo.txt"
                path.write_text(text)
                topo = parse_topo_matrix(text)
                chosen, exact, bound = topo.best_gpu_choice(args.best)
                score = sum(topo.pair_score(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1:])
                lib = timed(lambda: topo.best_gpu_set(args.best), args.runs)
                codes = set()
                cli = timed(lambda: codes.add(subprocess.run([gv, "topo", str(path), "--best", str(args.best)],
                                                             capture_output=True).returncode), args.runs)
                worst = max(worst, cli[0])
                cli_note = "" if codes == {0} else f" exit {sorted(codes)}"
                print(f"| {size:,}: {name} | {','.join(map(str, chosen))} | {'yes' if exact else 'no'} | "
                      f"{score} ({bound}) | {lib[0] * 1000:,.0f} ms ({lib[1] * 1000:,.0f}) "
                      f"| {cli[0] * 1000:,.0f} ms ({cli[1] * 1000:,.0f}){cli_note} |")
    print(f"\ntarget: CLI under {TARGET_S:.0f} s: {'met' if worst < TARGET_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
