"""Helpers for chart tests: render with a real helm binary and validate objects."""
from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from tests.conftest import CHART

# Every Kubernetes minor the chart supports that kubernetes-validate ships schemas for.
KUBE_MINORS = [f"1.{m}" for m in range(29, 38)]


def template(helm: str, *values_files: Path, set_values: dict[str, str] | None = None,
             kube_version: str = "1.34.0", api_versions: tuple[str, ...] = (),
             release: str = "gi", namespace: str = "inference",
             chart: Path = CHART) -> subprocess.CompletedProcess:
    """Run `helm template` and return the completed process (not raising)."""
    cmd = [helm, "template", release, str(chart), "--namespace", namespace,
           "--kube-version", kube_version]
    for f in values_files:
        cmd += ["--values", str(f)]
    for k, v in (set_values or {}).items():
        cmd += ["--set", f"{k}={v}"]
    for api in api_versions:
        cmd += ["--api-versions", api]
    return subprocess.run(cmd, capture_output=True, text=True)


def render(helm: str, *values_files: Path, **kw) -> list[dict]:
    """Render and parse; fails the test with helm's stderr if rendering fails."""
    proc = template(helm, *values_files, **kw)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def k8s_errors(objects: list[dict], minor: str) -> list[str]:
    """Strict kubernetes-validate errors for built-in kinds (CRDs are checked elsewhere)."""
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, minor, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            continue
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']} @ {minor}: "
                          f"{'.'.join(map(str, exc.path))}: {exc.message}")
    return errors


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]
