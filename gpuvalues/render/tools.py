"""Find the external tools gpuvalues drives (helm), in a documented order."""
from __future__ import annotations

import os
from pathlib import Path

from gpuvalues.errors import ToolNotFoundError

# The project's own tools folder, filled by ci/setup.sh (present in a source checkout).
PROJECT_TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "bin"

_HELM_NAMES = {4: "helm", 3: "helm3"}


def find_helm(explicit: str | None = None, major: int = 4) -> str:
    """Return the helm binary to run.

    Order: `explicit` (the CLI's --helm), then $GPUVALUES_HELM, then the project's
    .tools/bin (helm for Helm 4, helm3 for Helm 3), then `helm` on PATH.
    """
    for candidate in (explicit, os.environ.get("GPUVALUES_HELM")):
        if candidate:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
            raise ToolNotFoundError(f"helm not found at {candidate!r}; pass an executable path")
    local = PROJECT_TOOLS / _HELM_NAMES[major]
    if local.is_file():
        return str(local)
    import shutil             # here: most commands never look for helm

    on_path = shutil.which("helm")
    if on_path:
        return on_path
    raise ToolNotFoundError(
        "helm not found: run ci/setup.sh (installs the pinned helm into .tools/bin), "
        "or pass --helm PATH, or set GPUVALUES_HELM")
