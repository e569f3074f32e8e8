"""One error hierarchy for everything a user can get wrong.

Every user-facing failure is a `GpuValuesError` (a `ValueError`), whose message says
what to change. The CLI prints it as one line and exits with code 2; anything else is
a bug and shows a traceback. Errors about a file carry its location so the message reads
`file:line:col: field: message`.
"""
from __future__ import annotations


class GpuValuesError(ValueError):
    """Base class: bad input or an impossible request, never a bug in gpuvalues."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 column: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        self.field = field

    def __str__(self) -> str:
        where = ""
        if self.source:
            where = self.source
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class CatalogError(GpuValuesError):
    """Unknown GPU model or profile, or a broken catalog data file."""


class MigLayoutError(GpuValuesError):
    """A set of MIG profiles that cannot be placed on one GPU."""


class PlanError(GpuValuesError):
    """No plan satisfies the workload mix on the given inventory."""


class DevicePluginConfigError(GpuValuesError):
    """A device-plugin config that the NVIDIA device plugin would reject."""


class MigPartedConfigError(GpuValuesError):
    """A mig-parted config that nvidia-mig-parted would reject."""


class TopologyParseError(GpuValuesError):
    """`nvidia-smi topo -m` output that cannot be parsed."""


class InventoryError(GpuValuesError):
    """A cluster inventory that is malformed or inconsistent."""


class CapacityError(GpuValuesError):
    """Load, SLO or autoscaling inputs that cannot be satisfied or make no sense."""


class SpecError(GpuValuesError):
    """A spec or values file that is malformed (YAML, schema or semantic checks)."""


class ToolNotFoundError(GpuValuesError):
    """A required external tool (helm) is not installed."""


class RenderError(GpuValuesError):
    """helm failed to render the chart, or a rendered object is invalid."""
