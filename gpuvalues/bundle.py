"""Files shipped inside the package: the JSON Schemas, the Helm chart, the example spec
and the built-in load traces (the GPU catalog's data files live beside their loader in
`gpuvalues/catalog/gpus/`).

In a source checkout `gpuvalues/data/schemas` and `gpuvalues/data/chart` are symlinks to
the repository's `schemas/` and `charts/gpu-inference/`, the one source of both; a wheel
carries copies. Everything is found beside this module (the folder
`importlib.resources.files("gpuvalues")` names for an installed package, without that
import's 2-3 ms at start-up), never by a path relative to the repository, so
`pip install gpuvalues-*.whl` works from any folder.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA", "SCHEMAS", "SPEC_SCHEMA", "VALUES_SCHEMA", "INVENTORY_SCHEMA", "CHART_ENV",
           "chart_dir", "EXAMPLE_SPEC", "TRACES"]

DATA = Path(__file__).resolve().parent / "data"
SCHEMAS = DATA / "schemas"
SPEC_SCHEMA = SCHEMAS / "spec.schema.json"
VALUES_SCHEMA = SCHEMAS / "values.schema.json"
INVENTORY_SCHEMA = SCHEMAS / "inventory.schema.json"
EXAMPLE_SPEC = DATA / "examples" / "a100-small.yaml"
TRACES = DATA / "traces"
CHART_ENV = "GPUVALUES_CHART"
_BUNDLED_CHART = DATA / "chart"


def chart_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The chart to render: `explicit` (the CLI's --chart), else $GPUVALUES_CHART, else
    the chart bundled with the package."""
    chosen = explicit or os.environ.get(CHART_ENV)
    return Path(chosen) if chosen else _BUNDLED_CHART
