"""The `gpuvalues` command: a thin shell over the library; no logic lives here.

Exit codes: 0 clean, 1 findings, 2 bad input or usage. A GpuValuesError is printed
as one line (`--debug` shows the traceback); anything else is a bug.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from gpuvalues import __version__, render
from gpuvalues.errors import GpuValuesError

DEFAULT_VALUES = Path(__file__).resolve().parent / "data" / "examples" / "default-values.yaml"


def cmd_render(args: argparse.Namespace) -> int:
    values_file = Path(args.values) if args.values else DEFAULT_VALUES
    values = yaml.safe_load(values_file.read_text()) or {}
    text = render.helm_template(values, helm=args.helm, kube_version=args.kube_version)
    render.validate_manifests(render.parse_manifests(text), args.kube_version)
    sys.stdout.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuvalues", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpuvalues {__version__}")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("render", help="render the chart with helm and validate the manifests")
    p.add_argument("--values", help="values file (default: the built-in A100 example)")
    p.add_argument("--helm", help="helm binary (default: $GPUVALUES_HELM, .tools/bin, PATH)")
    p.add_argument("--kube-version", default=render.DEFAULT_KUBE_VERSION)
    p.set_defaults(func=cmd_render)

    # Each subcommand registers itself below, in its own block (one per planner).
    # --- plan (MIG / sharing planner) ---
    # --- end plan ---
    # --- topo, fit (topology, inventory, fit check) ---
    # --- end topo, fit ---
    # --- simulate (capacity model, HPA simulator) ---
    # --- end simulate ---
    # --- values, validate, update (spec -> values) ---
    # --- end values, validate, update ---
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except GpuValuesError as exc:
        if args.debug:
            raise
        print(f"gpuvalues: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
