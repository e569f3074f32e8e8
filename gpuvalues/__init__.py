"""gpuvalues: compute and validate a GPU inference fleet for the gpu-inference Helm chart.

    import gpuvalues
    spec = gpuvalues.load_spec("examples/mixed-a100-h100-mig.yaml")
    fleet = gpuvalues.check_fleet(gpuvalues.build_fleet(spec))
    for f in fleet.findings: print(f)                      # every problem, placed
    for release in fleet.releases: print(release.name, release.values)
    fleet.node_side()        # mig-parted config, device-plugin configs, node labels
    text, objects = gpuvalues.render_values(fleet.platform.values, release="gpu-platform")

Layers, one direction only (tests/unit/test_layers.py): base (errors, kube, yamlio,
schemas, bundle) -> catalog -> planners -> fleet -> checks -> render -> edges (io,
pipeline, operations) -> cli. The CLI (`gpuvalues`) is a thin shell over these modules.
Names are imported on first use, so `import gpuvalues` stays light.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    # errors as data
    "GpuValuesError": "gpuvalues.errors", "ValidationFailed": "gpuvalues.errors",
    "Finding": "gpuvalues.errors", "CODES": "gpuvalues.errors",
    # the spec and the fleet
    "Spec": "gpuvalues.fleet.spec", "load_spec": "gpuvalues.checks.spec",
    "spec_from_text": "gpuvalues.checks.spec",
    "Fleet": "gpuvalues.fleet", "Release": "gpuvalues.fleet", "NodeGroup": "gpuvalues.fleet",
    "build_fleet": "gpuvalues.fleet", "expected_nodes": "gpuvalues.fleet",
    "check_fleet": "gpuvalues.checks.fleet", "build_checked": "gpuvalues.checks.fleet",
    # render
    "render_values": "gpuvalues.render.helm",
    # the planners' entry points
    "get_gpu": "gpuvalues.catalog", "place": "gpuvalues.planners.mig.geometry",
    "plan": "gpuvalues.planners.mig.milp.plan", "ModelDemand": "gpuvalues.planners.mig.milp.model",
    "parse_topo_matrix": "gpuvalues.planners.scheduling.topology", "HPA": "gpuvalues.planners.autoscaling.hpa",
    "plan_capacity": "gpuvalues.planners.autoscaling.capacity", "simulate": "gpuvalues.planners.autoscaling.simulate",
    "fit": "gpuvalues.planners.scheduling.fit", "Inventory": "gpuvalues.planners.scheduling.inventory",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:       # for type checkers and IDEs; at run time names load lazily
    from gpuvalues.catalog import get_gpu
    from gpuvalues.checks.fleet import build_checked, check_fleet
    from gpuvalues.checks.spec import load_spec, spec_from_text
    from gpuvalues.errors import CODES, Finding, GpuValuesError, ValidationFailed
    from gpuvalues.fleet import Fleet, NodeGroup, Release, build_fleet, expected_nodes
    from gpuvalues.fleet.spec import Spec
    from gpuvalues.planners.autoscaling.capacity import plan_capacity
    from gpuvalues.planners.scheduling.fit import fit
    from gpuvalues.planners.autoscaling.hpa import HPA
    from gpuvalues.planners.scheduling.inventory import Inventory
    from gpuvalues.planners.mig.geometry import place
    from gpuvalues.planners.mig.milp.model import ModelDemand
    from gpuvalues.planners.mig.milp.plan import plan
    from gpuvalues.planners.autoscaling.simulate import simulate
    from gpuvalues.planners.scheduling.topology import parse_topo_matrix
    from gpuvalues.render.helm import render_values


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuvalues' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
