"""Helpers for chart tests: render with a real helm binary and validate objects."""
from __future__ import annotations

import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

from tests.conftest import CHART, TOOLS

# Every Kubernetes minor the chart supports that kubernetes-validate ships schemas for.
KUBE_MINORS = [f"1.{m}" for m in range(29, 38)]
SCENARIO_DIR = CHART / "ci"
HELMS = {"helm": str(TOOLS / "helm"), "helm3": str(TOOLS / "helm3")}
CRD_DIR = Path(__file__).parent / "data" / "crds"


def scenario_file(name: str) -> Path:
    return SCENARIO_DIR / f"{name}-values.yaml"


def template(helm: str, *values_files: Path, values: dict | None = None,
             set_values: dict[str, str] | None = None,
             kube_version: str | None = "1.34.0", api_versions: tuple[str, ...] = (),
             release: str = "gi", namespace: str = "inference",
             chart: Path = CHART) -> subprocess.CompletedProcess:
    """Run `helm template` and return the completed process (not raising).

    `values` is written to a temporary values file passed after `values_files`;
    `kube_version=None` leaves helm's own default."""
    with tempfile.TemporaryDirectory() as tmp:
        if values is not None:
            values_files = (*values_files, Path(tmp) / "values.yaml")
            values_files[-1].write_text(yaml.safe_dump(values))
        cmd = [helm, "template", release, str(chart), "--namespace", namespace]
        if kube_version is not None:
            cmd += ["--kube-version", kube_version]
        for f in values_files:
            cmd += ["--values", str(f)]
        for k, v in (set_values or {}).items():
            cmd += ["--set", f"{k}={v}"]
        for api in api_versions:
            cmd += ["--api-versions", api]
        return subprocess.run(cmd, capture_output=True, text=True)


def parse(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(helm: str, *values_files: Path, **kw) -> list[dict]:
    """Render and parse; fails the test with helm's stderr if rendering fails."""
    proc = template(helm, *values_files, **kw)
    assert proc.returncode == 0, proc.stderr
    return parse(proc.stdout)


@lru_cache(maxsize=None)
def rendered_text(helm_name: str, scenario: str, kube_version: str = "1.34.0",
                  api_versions: tuple[str, ...] = ()) -> str:
    """`helm template` output for a ci/ scenario (cached: each render happens once)."""
    proc = template(HELMS[helm_name], scenario_file(scenario), kube_version=kube_version,
                    api_versions=api_versions)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@lru_cache(maxsize=None)
def rendered(helm_name: str, scenario: str, kube_version: str = "1.34.0",
             api_versions: tuple[str, ...] = ()) -> tuple:
    """Objects of rendered_text (cached; deep-copy before mutating them)."""
    return tuple(parse(rendered_text(helm_name, scenario, kube_version, api_versions)))


# --- CRD schemas (upstream openAPIV3Schema, shipped in tests/chart/data/crds) -------------

def _strict(schema):
    """Like the API server's strict field validation: unknown fields are errors unless the
    schema preserves them; OpenAPI's int-or-string becomes an explicit anyOf."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if isinstance(schema.get("pattern"), str) and schema["pattern"].startswith("^(?i)"):
            # Go's RE2 allows a flag group after ^; Python needs global flags first.
            schema["pattern"] = "(?i)^" + schema["pattern"][5:]
        if schema.get("x-kubernetes-int-or-string"):
            schema.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        if (schema.get("type") == "object" and "properties" in schema
                and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    return schema


@lru_cache(maxsize=None)
def crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> a validator for the CRD's openAPIV3Schema."""
    out = {}
    for f in sorted(CRD_DIR.glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        schema = _strict(doc["openAPIV3Schema"])
        # metadata is validated by the API server itself, not by the CRD schema.
        schema["properties"]["metadata"] = {"type": "object"}
        jsonschema.Draft7Validator.check_schema(schema)
        out[(f"{doc['group']}/{doc['version']}", doc["kind"])] = jsonschema.Draft7Validator(schema)
    return out


def crd_errors(obj: dict) -> list[str]:
    v = crd_validators()[(obj["apiVersion"], obj["kind"])]
    return [f"{obj['kind']}/{obj['metadata']['name']}: {e.json_path}: {e.message}"
            for e in v.iter_errors(obj)]


# --- Kubernetes schema validation ---------------------------------------------------------

def k8s_errors(objects: list[dict], minor: str) -> list[str]:
    """Strict kubernetes-validate errors; built-in kinds must have a schema. Only the custom
    resources in crd_validators() (checked against their CRD schemas by crd_errors) skip."""
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, minor, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            if (obj["apiVersion"], obj["kind"]) not in crd_validators():
                errors.append(f"{obj['kind']} {obj['apiVersion']}: no schema in Kubernetes {minor}")
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']} @ {minor}: "
                          f"{'.'.join(map(str, exc.path))}: {exc.message}")
    return errors


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]
