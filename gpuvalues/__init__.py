"""gpuvalues: compute and validate values for the gpu-inference Helm chart.

Layers, one direction only: catalog (data files) -> planners (mig, sharing, topology,
autoscaling, fit) -> values builder -> schema validation -> render (helm) -> manifest
validation. The CLI (`gpuvalues`) is a thin shell over these modules.
"""
from gpuvalues.errors import GpuValuesError

__version__ = "0.1.0"

__all__ = ["GpuValuesError", "__version__"]
