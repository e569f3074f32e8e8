"""Render the chart with the real helm and validate every object it produces."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from gpuvalues.errors import RenderError
from gpuvalues.tools import find_helm

CHART_DIR = Path(__file__).resolve().parent.parent / "charts" / "gpu-inference"
DEFAULT_KUBE_VERSION = "1.34.0"


def helm_template(values: dict, *, chart: Path = CHART_DIR, helm: str | None = None,
                  release: str = "gpu-inference", namespace: str = "gpu-inference",
                  kube_version: str = DEFAULT_KUBE_VERSION,
                  api_versions: tuple[str, ...] = ()) -> str:
    """Run `helm template` on `values` and return the rendered YAML stream."""
    binary = find_helm(helm)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(values, f, sort_keys=False)
        values_file = f.name
    try:
        cmd = [binary, "template", release, str(chart), "--namespace", namespace,
               "--values", values_file, "--kube-version", kube_version]
        for api in api_versions:
            cmd += ["--api-versions", api]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        os.unlink(values_file)
    if proc.returncode != 0:
        # helm's message is already meant for people; keep it to its meaningful lines.
        msg = " ".join(line.strip() for line in proc.stderr.splitlines() if line.strip())
        raise RenderError(f"helm template failed: {msg}")
    return proc.stdout


def parse_manifests(text: str) -> list[dict]:
    """Split a rendered YAML stream into objects, dropping empty documents."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validate_manifests(objects: list[dict], kube_version: str = DEFAULT_KUBE_VERSION) -> None:
    """Validate each object with kubernetes-validate (strict) for `kube_version`.

    Custom resources (no schema in kubernetes-validate) are skipped here; the chart
    tests check them against their CRD schemas.
    """
    import kubernetes_validate

    minor = ".".join(kube_version.lstrip("v").split(".")[:2])
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, minor, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            continue
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            raise RenderError(f"{name}: {path}: {exc.message} (Kubernetes {minor})") from None
