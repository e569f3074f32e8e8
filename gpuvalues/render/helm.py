"""Render the chart with the real helm and validate every object it produces."""
from __future__ import annotations

import os
import re
from typing import Any

import yaml

from gpuvalues.bundle import chart_dir
from gpuvalues.errors import RenderError
from gpuvalues.kube import DEFAULT_KUBE_VERSION, supported_kube_minor
from gpuvalues.render.tools import find_helm
from gpuvalues.yamlio.loader import parse_yaml


def helm_template(values: dict[str, Any], *, chart: str | os.PathLike[str] | None = None, helm: str | None = None,
                  release: str = "gpu-inference", namespace: str = "gpu-inference",
                  kube_version: str = DEFAULT_KUBE_VERSION,
                  api_versions: tuple[str, ...] = ()) -> str:
    """Run `helm template` on `values` (with `chart`, default the bundled one: see
    `gpuvalues.bundle.chart_dir`) and return the rendered YAML stream."""
    import subprocess         # here: `validate` imports this module but runs no helm

    binary = find_helm(helm)
    chart = chart_dir(chart)
    # The values go through helm's stdin (`--values -`, read by Helm 4 and 3 alike): no temp
    # file that a kill -9 between write and unlink would leave behind.
    cmd = [binary, "template", release, str(chart), "--namespace", namespace,
           "--values", "-", "--kube-version", kube_version]
    for api in api_versions:
        cmd += ["--api-versions", api]
    proc = subprocess.run(cmd, input=yaml.safe_dump(values, sort_keys=False), capture_output=True, text=True)
    if proc.returncode != 0:
        # helm's message is already meant for people; keep it to its meaningful lines.
        msg = " ".join(line.strip() for line in proc.stderr.splitlines() if line.strip())
        raise RenderError(f"helm template failed: {msg}")
    return proc.stdout


def parse_manifests(text: str) -> list[dict[str, Any]]:
    """Split a rendered YAML stream into objects, dropping empty documents."""
    objects: list[dict[str, Any]] = parse_yaml(text, source="helm template output", error=RenderError,
                                               all_documents=True)
    return objects


def validate_manifests(objects: list[dict[str, Any]], kube_version: str = DEFAULT_KUBE_VERSION) -> None:
    """Validate each object with kubernetes-validate (strict) for `kube_version`.

    Custom resources (no schema in kubernetes-validate) are skipped here; the chart
    tests check them against their CRD schemas.
    """
    import kubernetes_validate

    minor = f"1.{supported_kube_minor(kube_version)}"   # one line, not VersionNotSupportedError
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, minor, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            continue
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            raise RenderError(f"{name}: {path}: {exc.message} (Kubernetes {minor})") from None


def split_documents(text: str) -> list[tuple[dict[str, Any], str]]:
    """Split a rendered stream into (object, its original text), dropping empty documents.

    The text keeps helm's `# Source:` comment, so a file written per object still says
    which template produced it.
    """
    out = []
    for chunk in re.split(r"(?m)^---[ \t]*$\n?", text):
        if not chunk.strip():
            continue
        obj = parse_yaml(chunk, source="helm template output", error=RenderError)
        if obj:
            out.append((obj, chunk if chunk.endswith("\n") else chunk + "\n"))
    return out


def object_file_name(obj: dict[str, Any]) -> str:
    """`<kind>-<name>.yaml`, lower case, safe for any file system."""
    kind = str(obj.get("kind", "object")).lower()
    name = str((obj.get("metadata") or {}).get("name", "unnamed"))
    return re.sub(r"[^a-z0-9._-]+", "-", f"{kind}-{name}".lower()) + ".yaml"


def render_values(values: dict[str, Any], *, helm: str | None = None,
                  kube_version: str = DEFAULT_KUBE_VERSION, **kw: Any) -> tuple[str, list[dict[str, Any]]]:
    """helm template `values`, then validate every object for `kube_version`.

    Returns the YAML stream and the parsed objects; raises RenderError on failure.
    """
    text = helm_template(values, helm=helm, kube_version=kube_version, **kw)
    objects = parse_manifests(text)
    validate_manifests(objects, kube_version)
    return text, objects
