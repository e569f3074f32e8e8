"""Spec checks and loading: a spec file is read as Helm reads YAML, checked against
schemas/spec.schema.json (every error, with positions) and the cross-field rules the schema
cannot express, then parsed into the `gpuvalues.fleet.spec` dataclasses."""
from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuvalues.yamlio.inputs import MAX_INPUT_BYTES, resolve_reference
from gpuvalues.yamlio.loader import Loaded, expect_mapping, format_path, load_text, load_yaml
from gpuvalues.kube import unsupported_kube_version
from gpuvalues.checks.rules import check_schema, finding, yaml_findings
from gpuvalues.bundle import SPEC_SCHEMA
from gpuvalues.checks.weights import weight_findings
from gpuvalues.errors import CatalogError, Finding, ValidationFailed, errors_only
from gpuvalues.fleet import routing
from gpuvalues.fleet.spec import Spec, from_data, pool_gpu


def cross_field_findings(data: dict[str, Any], loaded: Loaded) -> list[Finding]:
    """Spec rules across fields that need no GPU knowledge (names, references, ranges)."""
    out: list[Finding] = []
    pools = data["cluster"]["nodePools"]
    seen: dict[str, int] = {}
    for i, p in enumerate(pools):
        if p["name"] in seen:
            out.append(finding("GV000", f"duplicate node pool name {p['name']!r} (also at "
                               f"cluster.nodePools[{seen[p['name']]}])",
                               f"cluster.nodePools[{i}].name", loaded=loaded,
                               at=("cluster", "nodePools", i, "name"), hint="rename one pool"))
        seen.setdefault(p["name"], i)
    names = {p["name"] for p in pools}
    wseen: dict[str, int] = {}
    for i, w in enumerate(data["workloads"]):
        at = ("workloads", i)
        if w["name"] in wseen:
            out.append(finding("GV000", f"duplicate workload name {w['name']!r}",
                               f"workloads[{i}].name", loaded=loaded, at=at + ("name",),
                               hint="rename one workload"))
        wseen.setdefault(w["name"], i)
        if "nodePool" in w and w["nodePool"] not in names:
            out.append(finding("GV000", f"no node pool named {w['nodePool']!r}; pools: "
                               f"{', '.join(sorted(names))}", f"workloads[{i}].nodePool",
                               loaded=loaded, at=at + ("nodePool",), hint="use a pool name"))
        if "memoryGB" in w and "memoryGiB" in w:
            out.append(finding("GV000", "give memoryGB or memoryGiB, not both",
                               f"workloads[{i}].memoryGiB", loaded=loaded,
                               at=at + ("memoryGiB",), hint="remove one"))
        if "gpus" in w and w.get("tensorParallel", 1) > w["gpus"]:
            out.append(finding("GV000", f"tensorParallel {w['tensorParallel']} needs at least "
                               f"that many GPUs, gpus is {w['gpus']}", f"workloads[{i}].gpus",
                               loaded=loaded, at=at + ("gpus",),
                               hint="set gpus >= tensorParallel"))
        load = w.get("load") or {}
        if "base" in load and load["base"] > load["peak"]:
            out.append(finding("GV000", f"base load {load['base']} exceeds peak {load['peak']}",
                               f"workloads[{i}].load.base", loaded=loaded,
                               at=at + ("load", "base"), hint="base <= peak"))
    if "kubernetesVersion" in data:
        why = unsupported_kube_version(data["kubernetesVersion"])
        if why:
            out.append(finding("GV000", why, "kubernetesVersion", loaded=loaded,
                               at=("kubernetesVersion",), hint="target a version listed"))
    out += reference_findings(data, loaded)
    out += weight_findings(data, loaded)
    out += route_findings(data, loaded)
    a = data.get("autoscaling", {})
    if "minReplicas" in a and "maxReplicas" in a and a["minReplicas"] > a["maxReplicas"]:
        out.append(finding("GV011", f"minReplicas {a['minReplicas']} > maxReplicas "
                           f"{a['maxReplicas']}", "autoscaling.minReplicas", loaded=loaded,
                           at=("autoscaling", "minReplicas")))
    return out


def route_findings(data: dict[str, Any], loaded: Loaded) -> list[Finding]:
    """With a `gateway`, every vLLM workload's HTTPRoute matches its model names on the
    body-based router's header (gpuvalues.fleet.routing): a name two workloads serve would
    give two routes that match the same requests (GV050, at the later workload's name),
    and one route takes at most 64 names (GV051)."""
    g = data.get("gateway")
    if not g:
        return []
    out: list[Finding] = []
    routes: list[tuple[str, tuple[str, ...]]] = []
    index: list[int] = []
    for i, w in enumerate(data["workloads"]):
        if w.get("server", "vllm") != "vllm":
            continue
        adapters = [a["name"] for a in w.get("lora", ())]
        names = routing.model_names(w["model"], adapters)
        # a parentRef without a namespace names a Gateway in the route's own namespace
        ns = g.get("namespace") or w.get("namespace", data.get("namespace", "gpu-inference"))
        routes.append((f"{ns}/{g['name']}", names))
        index.append(i)
        if len(names) > routing.MAX_MATCHES:
            out.append(finding(
                "GV051", f"{len(names)} model names (the model and its LoRA adapters) in one "
                f"HTTPRoute rule; Gateway API allows {routing.MAX_MATCHES} matches "
                "(HTTPRouteRule.matches)", f"workloads[{i}].lora", loaded=loaded,
                at=("workloads", i, "lora"), hint="split the adapters across workloads"))

    def where(i: int, name: str) -> tuple[str, tuple[Any, ...]]:
        w = data["workloads"][i]
        if w["model"] == name:
            return f"workloads[{i}].model", ("workloads", i, "model")
        k = next(k for k, a in enumerate(w.get("lora", ())) if a["name"] == name)
        return f"workloads[{i}].lora[{k}].name", ("workloads", i, "lora", k, "name")

    spaces = sorted({r[0].split("/")[0] for r in routes})
    if g.get("bodyBasedRouting", True) and not g.get("namespace") and len(spaces) > 1:
        out.append(finding(
            "GV052", f"gateway has no namespace, so the workloads' HTTPRoutes attach to a Gateway "
            f"{g['name']!r} in each of the namespaces {', '.join(spaces)}; the platform's one "
            "body-based router serves one Gateway", "gateway", loaded=loaded, at=("gateway",),
            hint="set gateway.namespace (the Gateway's namespace)"))
    for later, name, earlier in routing.conflicts(routes):
        i, first = index[later], index[earlier]
        field, at = where(i, name)
        kind = "model" if data["workloads"][first]["model"] == name else "LoRA adapter"
        out.append(finding(
            "GV050", f"model name {name!r} is also served by workload "
            f"{data['workloads'][first]['name']!r} (its {kind}): both HTTPRoutes on Gateway "
            f"{routes[later][0]} would match {routing.MODEL_HEADER}: {name} and Gateway API "
            "gives the requests to the older route only", field, loaded=loaded, at=at,
            hint="serve each model name from one workload (rename the adapter, or merge "
                 "the workloads)"))
    return out


# Set to 1 to let a spec name files outside its own folder (topology.file): off by
# default, so a spec from elsewhere cannot make gpuvalues read /etc/shadow or a kubeconfig.
ALLOW_OUTSIDE_ENV = "GPUVALUES_ALLOW_FILES_OUTSIDE_SPEC"


def spec_dir(loaded: Loaded) -> Path:
    """The folder a spec's relative paths start from: the spec file's, or the working
    directory for stdin and strings."""
    if loaded.source in ("<stdin>", "<string>"):
        return Path(".")
    return Path(loaded.source).parent


def reference_findings(data: dict[str, Any], loaded: Loaded) -> list[Finding]:
    """Files a spec names (`cluster.nodePools[].topology.file`): relative to the spec's
    folder, inside it (resolve_reference; $GPUVALUES_ALLOW_FILES_OUTSIDE_SPEC=1
    lifts that), and regular files within the size limit, checked before anything reads
    them (a FIFO would block, a device never end)."""
    out: list[Finding] = []
    allow = os.environ.get(ALLOW_OUTSIDE_ENV) == "1"
    for i, pool in enumerate(data["cluster"]["nodePools"]):
        ref = (pool.get("topology") or {}).get("file")
        if not isinstance(ref, str):
            continue
        at = ("cluster", "nodePools", i, "topology", "file")
        where = format_path(at)
        try:
            target = resolve_reference(ref, spec_dir(loaded), allow_outside=allow)
            st = os.stat(target)
        except FileNotFoundError:
            out.append(finding("GV000", f"file {ref!r} not found (paths are relative to the "
                               "spec file)", where, loaded=loaded, at=at))
            continue
        except (OSError, ValueError) as exc:
            message = getattr(exc, "message", None) or getattr(exc, "strerror", None) or str(exc)
            out.append(finding("GV000", message, where, loaded=loaded, at=at,
                               hint=f"or set {ALLOW_OUTSIDE_ENV}=1" if "outside" in message
                               else None))
            continue
        if not stat.S_ISREG(st.st_mode):
            out.append(finding("GV000", f"{ref!r} is not a regular file (a FIFO, device or "
                               "directory); give the saved `nvidia-smi topo -m` output",
                               where, loaded=loaded, at=at))
        elif st.st_size > MAX_INPUT_BYTES:
            out.append(finding("GV000", f"{ref!r} is larger than "
                               f"{MAX_INPUT_BYTES // 2**20} MiB", where, loaded=loaded,
                               at=at))
    return out


def gpu_findings(data: dict[str, Any], loaded: Loaded) -> list[Finding]:
    """A finding for each node pool whose `gpu` the catalog does not know (`pool_gpu`, the
    spec model's one lookup, says so; the spec cannot be built without its GPUs)."""
    out = []
    for i in range(len(data["cluster"]["nodePools"])):
        try:
            pool_gpu(data, i, loaded)
        except CatalogError as exc:
            out.append(Finding(exc.code, exc.message, exc.field or "(root)", exc.source or "",
                               exc.line, exc.column))
    return out


def check_spec(loaded: Loaded) -> list[Finding]:
    """Schema and cross-field findings (errors and GV010 warnings) for a loaded spec."""
    expect_mapping(loaded, "spec")
    found = check_schema(loaded, SPEC_SCHEMA)
    if not found:
        found = cross_field_findings(loaded.data, loaded) + gpu_findings(loaded.data, loaded)
    return sorted(found + yaml_findings(loaded), key=Finding.sort_key)


def parse_spec(loaded: Loaded, base_dir: Path | None = None, *,
               findings: list[Finding] | None = None) -> Spec:
    """Validate a loaded spec and build the dataclasses; ValidationFailed on errors.
    `findings`: what `check_spec(loaded)` already returned, so it is not run twice."""
    if findings is None:
        findings = check_spec(loaded)
    errors = errors_only(findings)
    if errors:
        raise ValidationFailed(errors)
    if base_dir is None:
        base_dir = Path(loaded.source).parent if loaded.source not in ("<stdin>", "<string>") \
            else Path(".")
    spec = from_data(loaded.data, base_dir=base_dir, loaded=loaded)
    return replace(spec, warnings=tuple(f for f in findings if f.severity == "warning"))


def load_spec(path: str | Path) -> Spec:
    """Read (`-` for stdin), validate and parse a spec file."""
    return parse_spec(load_yaml(path))


def spec_from_text(text: str, source: str = "<string>", base_dir: Path = Path(".")) -> Spec:
    """Parse and validate spec YAML text (tests, the built-in example)."""
    return parse_spec(load_text(text, source), base_dir)
