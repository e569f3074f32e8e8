"""gpuvalues: compute and validate values for the gpu-inference Helm chart.

Layers, one direction only (tests/unit/test_layers.py): base (errors, kube, yamlio,
schemas, bundle) -> catalog -> planners -> fleet -> checks -> render -> edges (io,
pipeline, operations) -> cli. The CLI (`gpuvalues`) is a thin shell over these modules.
"""
from gpuvalues.errors import GpuValuesError

__version__ = "0.1.0"

__all__ = ["GpuValuesError", "__version__", "build_values"]


def __getattr__(name: str):
    # build_values pulls in the planners; import it on first use so `import gpuvalues`
    # stays light for the CLI's --help and --version.
    if name == "build_values":
        from gpuvalues.checks.built import build_values
        return build_values
    raise AttributeError(f"module 'gpuvalues' has no attribute {name!r}")
