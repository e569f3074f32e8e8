"""Check specs and values: JSON Schema (all errors, with positions) and semantic rules.

Two layers, both reporting `Finding`s rather than stopping at the first problem:

* `schema_findings(loaded, schema)`: Draft 2020-12 with format checking; every error,
  each placed at `file:line:col` from the YAML reader, sorted by position. `oneOf`/`anyOf`
  failures are explained by the closest alternative, unknown keys by a did-you-mean.
* `semantic_findings(values, ...)`: rules across fields that a schema cannot express,
  each with a stable code and a fix hint. The GPU facts come from the planners
  (catalog, mig, sharing, topology, autoscaling); nothing is re-derived here.

Codes are stable: tools may match on them.
"""
from __future__ import annotations

import math
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gpuvalues.bundle import SPEC_SCHEMA, VALUES_SCHEMA
from gpuvalues.errors import CODES, Finding, ValidationFailed, errors_only
from gpuvalues.fleet import routing
from gpuvalues.kube import kube_minor, unsupported_kube_version
from gpuvalues.planners.scheduling.topology import nvlink_size
from gpuvalues.schemas import is_valid, load_schema, validator_for
from gpuvalues.yamlio.loader import Loaded, format_path

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

# ---------------------------------------------------------------- JSON Schema

def _branch_errors(error: ValidationError) -> ValidationError:
    """The error that best explains a failed oneOf/anyOf: the closest alternative.

    Alternatives whose top-level `type` (or const/enum) already fails are the wrong
    shape; among the rest, the one with the fewest errors wins, then jsonschema's
    relevance ordering (deepest first).
    """
    from jsonschema.exceptions import best_match, relevance

    by_branch: dict[int, list[ValidationError]] = {}
    for sub in error.context or ():
        by_branch.setdefault(sub.relative_schema_path[0], []).append(sub)
    if not by_branch:
        return error

    def wrong_shape(errs: list[ValidationError]) -> bool:
        return any(e.validator in ("type", "const", "enum") and not e.relative_path for e in errs)

    candidates = [errs for errs in by_branch.values() if not wrong_shape(errs)] or \
        list(by_branch.values())
    errs = min(candidates, key=len)
    best = best_match(errs, key=relevance)
    if best.context:
        return _branch_errors(best)
    return best


def _describe(error: ValidationError) -> str:
    if error.validator == "required":
        missing = re.search(r"'([^']+)' is a required property", error.message)
        return f"missing required key {missing.group(1)!r}" if missing else error.message
    if error.validator == "const":
        return f"must be {error.validator_value!r}, got {error.instance!r}"
    if error.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value)
        return f"{json.dumps(error.instance, default=str)} is not one of: {allowed}"
    if error.validator == "type":
        got = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
               dict: "object", type(None): "null"}.get(type(error.instance), "?")
        return f"expected {error.validator_value}, got {got} {_short(error.instance)}"
    if error.validator in ("maxItems", "minItems") and isinstance(error.instance, list):
        bound = "at most" if error.validator == "maxItems" else "at least"
        return f"{len(error.instance)} items, {bound} {error.validator_value} allowed"
    if error.validator in ("maxProperties", "minProperties") and isinstance(error.instance, dict):
        bound = "at most" if error.validator == "maxProperties" else "at least"
        return f"{len(error.instance)} keys, {bound} {error.validator_value} allowed"
    if error.validator in ("maxLength", "minLength") and isinstance(error.instance, str):
        bound = "at most" if error.validator == "maxLength" else "at least"
        return f"{_short(error.instance)} has {len(error.instance)} characters, {bound} {error.validator_value}"
    if error.validator == "not" and error.validator_value in ({"pattern": ":latest(@|$)"},
                                                              {"const": "latest"}):
        return "image tag must be pinned, not 'latest'"
    if error.validator == "not" and isinstance(error.instance, dict) and \
            error.validator_value.get("required") == ["name", "value"]:
        return (f"{error.instance.get('name')}: a literal credential in values ends up in the "
                "release Secret and in `helm get values`; reference an existing Secret "
                "(model.token.secretName, or valueFrom.secretKeyRef)")
    if error.validator in ("pattern", "not") and isinstance(error.schema, dict) \
            and error.schema.get("description"):
        # A regex says nothing to a reader; the schema's description says what is allowed.
        return f"{_short(error.instance)} does not match: {error.schema['description']}"
    if _alternative_keys(error):
        keys = " or ".join(repr(k) for k in _alternative_keys(error))
        return f"needs {keys}"
    return str(error.message)


def _alternative_keys(error: ValidationError) -> list[str]:
    """For `anyOf: [{required: [a]}, {required: [b]}]`: ["a", "b"], else []."""
    if error.validator not in ("anyOf", "oneOf"):
        return []
    branches = error.validator_value
    if all(isinstance(b, dict) and set(b) == {"required"} for b in branches):
        return [k for b in branches for k in b["required"]]
    return []


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# At most this many schema findings per file; the rest are counted in one last finding (a
# file with a million unknown keys must not take minutes and GBs to say so).
MAX_FINDINGS = 100


def schema_findings(loaded: Loaded, schema: dict[str, Any], *, prefix: tuple[Any, ...] = ()) -> list[Finding]:
    """The schema errors in `loaded.data` (or its subtree at `prefix`), with positions:
    the first MAX_FINDINGS, then one finding that counts the rest."""
    data = loaded.data
    for p in prefix:
        data = data[p]
    findings: list[Finding] = []
    if is_valid(schema, data):       # the common case, without importing jsonschema
        return findings
    more = 0
    for error in validator_for(schema).iter_errors(data):
        if len(findings) >= MAX_FINDINGS:
            more += len(error.instance) if error.validator == "additionalProperties" and \
                isinstance(error.instance, dict) else 1
            continue
        if error.validator in ("oneOf", "anyOf") and error.context and \
                not _alternative_keys(error):
            branch = _branch_errors(error)
            if branch is not error:
                error = branch
        found, skipped = _error_findings(error, loaded, prefix, MAX_FINDINGS - len(findings))
        findings.extend(found)
        more += skipped
    unique = {(f.line, f.column, f.path, f.message): f for f in findings}
    out = sorted(unique.values(), key=Finding.sort_key)
    if more:
        last = out[-1]
        out.append(Finding("GV000", f"{more} more schema errors not shown (the first "
                           f"{MAX_FINDINGS} are above)", last.path, loaded.source, last.line,
                           last.column, hint="fix these and run again"))
    return out


def _error_findings(error: ValidationError, loaded: Loaded, prefix: tuple[Any, ...],
                   room: int = MAX_FINDINGS) -> tuple[list[Finding], int]:
    """(findings for `error`, at most `room` of them; how many more were left out)."""
    path = prefix + tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        import difflib        # errors only, like jsonschema

        allowed = set(error.schema.get("properties", {}))
        patterns = list(error.schema.get("patternProperties", {}))
        out: list[Finding] = []
        skipped = 0
        for key in error.instance:
            if key in allowed or any(re.search(p, key) for p in patterns):
                continue
            if len(out) >= room:
                skipped += 1
                continue
            close = difflib.get_close_matches(key, sorted(allowed), n=1) if len(key) <= 100 else []
            hint = f"did you mean {close[0]!r}?" if close else \
                f"allowed keys: {', '.join(sorted(allowed))}" if allowed else ""
            line, col = loaded.position(path + (key,), key=True)
            out.append(Finding("GV000", f"unknown key {key!r}", format_path(path + (key,)),
                               loaded.source, line, col, hint=hint))
        if out:
            return out, skipped
    line, col = loaded.position(path)
    return [Finding("GV000", _describe(error), format_path(path), loaded.source, line, col)], 0


def check_schema(loaded: Loaded, schema_path: str | Path = SPEC_SCHEMA) -> list[Finding]:
    """Schema findings for a loaded document against the schema file at `schema_path`."""
    return schema_findings(loaded, load_schema(schema_path))


def yaml_findings(loaded: Loaded) -> list[Finding]:
    """GV010 warnings: values Helm (YAML 1.1) and YAML 1.2 tools read differently."""
    return [Finding("GV010", w.message, w.path, w.source, w.line, w.column, "warning")
            for w in loaded.warnings]


def finding(code: str, message: str, path: str = "(root)", *, loaded: Loaded | None = None,
            at: tuple[Any, ...] = (), severity: str = "error", hint: str | None = None,
            source: str = "") -> Finding:
    """A semantic finding; placed in `loaded` at the path `at` when given."""
    line = col = None
    if loaded is not None:
        source = loaded.source
        line, col = loaded.position(at)
    return Finding(code, message, path, source, line, col, severity,
                   CODES[code][1] if hint is None else hint)


# ---------------------------------------------------------------- values files

def coalesce(defaults: Any, overrides: Any) -> Any:
    """Helm's merge of user values over chart defaults: maps deep-merge, a null
    deletes the default key, anything else replaces."""
    if not isinstance(defaults, dict) or not isinstance(overrides, dict):
        return overrides
    out = dict(defaults)
    for k, v in overrides.items():
        if v is None:
            out.pop(k, None)
        elif k in out and isinstance(out[k], dict) and isinstance(v, dict):
            out[k] = coalesce(out[k], v)
        else:
            out[k] = v
    return out


@functools.lru_cache(maxsize=4)
def _chart_defaults_cached(path: str, mtime: float) -> Any:
    from gpuvalues.yamlio.loader import helm_data
    return helm_data(Path(path).read_text(), str(path)) or {}


def chart_defaults(path: str | Path | None = None) -> dict[str, Any]:
    """The chart's own values.yaml (the bundled chart's unless `path`), as Helm reads it
    (cached until it changes)."""
    from gpuvalues.bundle import chart_dir
    p = Path(path) if path is not None else chart_dir() / "values.yaml"
    if not p.exists():
        return {}
    defaults: dict[str, Any] = _chart_defaults_cached(str(p), p.stat().st_mtime)
    return defaults


def check_values(loaded: Loaded, *, schema_path: str | Path = VALUES_SCHEMA,
                 defaults: dict[str, Any] | None = None) -> list[Finding]:
    """Schema findings for a user values file, checked (as Helm does) on the chart
    defaults coalesced with the file; positions point into the user's file."""
    from dataclasses import replace

    base = chart_defaults() if defaults is None else defaults
    merged = replace(loaded, data=coalesce(base, loaded.data or {}))
    return schema_findings(merged, load_schema(schema_path)) + yaml_findings(loaded)


# ---------------------------------------------------------------- semantic rules

@dataclass(frozen=True)
class Context:
    """Facts from outside the values file that the semantic rules use (from the spec,
    an inventory or the command line). None means unknown: that rule is skipped."""

    kube_version: str | None = None
    gpu_models: tuple[str, ...] = ()      # models the pods may land on
    gpus_per_node: int | None = None
    inventory_gpus: int | None = None     # physical GPUs the workload may use
    nvlink_group: int | None = None       # largest NVLink clique on the target nodes
    nvlink_source: str = ""               # where nvlink_group came from (for messages)
    memory_gb: float | None = None        # GPU memory one replica needs
    tensor_parallel: int | None = None
    shared_replicas: int | None = None    # time-slicing/MPS replicas per GPU on those nodes


def pdb_blocks_drains(min_available: Any, max_unavailable: Any, replicas: int | None) -> bool:
    """True when a PodDisruptionBudget leaves no pod evictable at `replicas` (the minimum):
    minAvailable (a count, or a percentage rounded up as the disruption controller does,
    pkg/controller/disruption `GetScaledValueFromIntOrPercent(..., roundUp=true)`) >= replicas,
    or maxUnavailable 0. The chart's templates/validation.yaml fails on the same cases
    (tests/chart/test_rules_agree.py compares the two)."""
    if min_available is not None:
        if replicas is None:
            return str(min_available) == "100%"
        text = str(min_available)
        if text.endswith("%"):
            need = math.ceil(int(text[:-1]) * replicas / 100)
        else:
            n = _quantity_int(min_available)
            if n is None:
                return False
            need = n
        return need >= replicas
    return str(0 if max_unavailable is None else max_unavailable) in ("0", "0%")


def _get(values: Any, *path: str, default: Any = None) -> Any:
    for p in path:
        if not isinstance(values, dict) or p not in values:
            return default
        values = values[p]
    return values


def _gpu_models(values: dict[str, Any], ctx: Context) -> tuple[str, ...]:
    if ctx.gpu_models:
        return ctx.gpu_models
    products = list(_get(values, "gpuProducts", default=[]) or [])
    sel = _get(values, "nodeSelector", "nvidia.com/gpu.product")
    if sel:
        products.append(sel)
    return tuple(str(p) for p in products)


def _quantity_int(value: Any) -> int | None:
    """Integer or percentage-free integer string; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _shared_replicas(values: dict[str, Any]) -> int | None:
    """Time-slicing/MPS replicas per GPU from the device-plugin configs in the values."""
    configs = _get(values, "platform", "devicePlugin", "config", "map", default={}) or {}
    best = None
    for cfg in configs.values() if isinstance(configs, dict) else ():
        for kind in ("timeSlicing", "mps"):
            for res in _get(cfg, "sharing", kind, "resources", default=[]) or []:
                r = _quantity_int(res.get("replicas")) if isinstance(res, dict) else None
                if r and (best is None or r > best):
                    best = r
    return best


def _mig_profile(values: dict[str, Any]) -> str | None:
    mode = _get(values, "gpu", "mode")
    if mode == "mig":
        profile: str | None = _get(values, "gpu", "mig", "profile")
        return profile
    if mode == "dra" and _get(values, "gpu", "dra", "deviceClassName") == "mig.nvidia.com":
        return _get(values, "gpu", "dra", "migProfile") or None
    return None


def values_findings(loaded: Loaded, *, ctx: Context = Context(),
                    schema_path: str | Path = VALUES_SCHEMA) -> list[Finding]:
    """Every finding for a values file: the chart's schema, then the semantic rules."""
    return (check_values(loaded, schema_path=schema_path)
            + semantic_findings(loaded.data or {}, ctx=ctx, loaded=loaded))


def warnings_or_raise(findings: list[Finding]) -> list[Finding]:
    """The warnings of `findings`; ValidationFailed (with every error) if any is an error."""
    errors = errors_only(findings)
    if errors:
        raise ValidationFailed(errors)
    return [f for f in findings if f.severity == "warning"]


def semantic_findings(values: dict[str, Any], *, ctx: Context = Context(), loaded: Loaded | None = None,
                      source: str = "") -> list[Finding]:
    """Cross-field rules on chart values (GV001-GV009), placed in `loaded` when given."""
    from gpuvalues import catalog
    from gpuvalues.errors import CatalogError
    from gpuvalues.planners.mig import geometry as mig

    out: list[Finding] = []

    def add(code: str, message: str, *path: str | int, severity: str = "error",
            hint: str | None = None) -> None:
        out.append(finding(code, message, format_path(path), loaded=loaded, at=path,
                           severity=severity, hint=hint, source=source))

    if not isinstance(values, dict):
        return out
    values = coalesce(chart_defaults(), values)     # the values Helm's templates will see
    mode = _get(values, "gpu", "mode", default="whole")
    count = _quantity_int(_get(values, "gpu", "count", default=1)) or 1
    engine = _get(values, "autoscaling", "engine", default="none")
    min_r = _quantity_int(_get(values, "autoscaling", "minReplicas"))
    max_r = _quantity_int(_get(values, "autoscaling", "maxReplicas"))
    replicas = max_r if engine != "none" and max_r else \
        _quantity_int(_get(values, "replicaCount")) or 1
    floor = min_r if engine != "none" and min_r else _quantity_int(_get(values, "replicaCount"))

    # GV001 / GV002: the MIG profile exists on every target GPU and count instances fit.
    profile = _mig_profile(values)
    models = []
    for name in _gpu_models(values, ctx):
        try:
            models.append(catalog.get_gpu(name))
        except CatalogError as exc:
            add("GV001", exc.message, "gpuProducts", severity="warning",
                hint="use a GPU model gpuvalues knows, or drop the product constraint")
    profile_path = ("gpu", "mig", "profile") if mode == "mig" else ("gpu", "dra", "migProfile")
    if profile:
        for model in models:
            try:
                model.profile(profile)
            except CatalogError as exc:
                add("GV001", exc.message, *profile_path)
                continue
            per_gpu = mig.max_instances(model, profile)
            if ctx.gpus_per_node and count > per_gpu * ctx.gpus_per_node:
                add("GV002", f"{count} x {profile} per pod cannot fit one {model.name} node: "
                    f"a GPU holds at most {per_gpu}, a node has {ctx.gpus_per_node} GPUs",
                    "gpu", "count")
            elif count > 1 and per_gpu and count > per_gpu and not ctx.gpus_per_node:
                pass    # may span GPUs of one node; unknown node size: nothing to say
            if ctx.inventory_gpus and replicas * count > per_gpu * ctx.inventory_gpus:
                add("GV005", f"maxReplicas {replicas} x {count} {profile} instances = "
                    f"{replicas * count} > {per_gpu * ctx.inventory_gpus} instances on "
                    f"{ctx.inventory_gpus} {model.name} GPUs", "autoscaling", "maxReplicas")

    # GV011: an autoscaler whose minimum exceeds its maximum.
    if engine != "none" and min_r is not None and max_r is not None and min_r > max_r:
        add("GV011", f"minReplicas {min_r} > maxReplicas {max_r}", "autoscaling",
            "minReplicas")

    # GV003: a GPU metric the mode cannot attribute to pods.
    if engine in ("hpa", "keda"):
        _metric_findings(values, mode, add)

    # GV004: a PodDisruptionBudget that blocks every drain.
    if _get(values, "pdb", "enabled", default=False):
        max_un = _get(values, "pdb", "maxUnavailable")
        min_av = _get(values, "pdb", "minAvailable")
        if pdb_blocks_drains(min_av, max_un, floor):
            if min_av is not None:
                add("GV004", f"minAvailable {min_av} leaves no pod evictable with "
                    f"{floor} replicas: node drains block forever", "pdb", "minAvailable")
            else:
                add("GV004", "maxUnavailable 0 forbids every eviction: node drains block forever",
                    "pdb", "maxUnavailable")

    # GV064: a LeaderWorkerSet group (multiNode.nodes > 1) takes whole nodes of whole GPUs
    # and runs vLLM over Ray; scale to zero would cold-start a whole group.
    nodes = _quantity_int(_get(values, "multiNode", "nodes", default=1)) or 1
    if nodes > 1:
        if mode != "whole":
            add("GV064", f"multiNode.nodes {nodes} with gpu.mode {mode}: a group's pods take whole "
                "GPUs (gpu.mode whole)", "gpu", "mode")
        if _get(values, "server", "type", default="vllm") != "vllm":
            add("GV064", f"multiNode.nodes {nodes} with server.type "
                f"{_get(values, 'server', 'type')}: the chart runs groups with vLLM over Ray only",
                "server", "type")
        if engine != "none" and min_r == 0:
            add("GV064", "multiNode with minReplicas 0: a group cold-starts over several nodes; "
                "keep minReplicas >= 1", "autoscaling", "minReplicas")

    # GV005 (whole / shared): maxReplicas x GPUs per replica beyond the inventory (a
    # multi-node replica: gpu.count per pod x multiNode.nodes pods).
    if ctx.inventory_gpus and mode in ("whole", "dra") and not profile:
        group_gpus = count * nodes
        if replicas * group_gpus > ctx.inventory_gpus:
            add("GV005", f"maxReplicas {replicas} x {group_gpus} GPUs = {replicas * group_gpus} > "
                f"{ctx.inventory_gpus} GPUs in the inventory", "autoscaling", "maxReplicas")
    shared = _shared_replicas(values) or ctx.shared_replicas
    if ctx.inventory_gpus and mode == "shared" and shared:
        if replicas * count > ctx.inventory_gpus * shared:
            add("GV005", f"maxReplicas {replicas} x {count} shared replicas > "
                f"{ctx.inventory_gpus} GPUs x {shared} replicas each", "autoscaling",
                "maxReplicas")

    # GV006: tensor parallel / multi-GPU pods larger than the NVLink group.
    tp = ctx.tensor_parallel or (count if mode in ("whole", "dra") and not profile else 1)
    groups = []
    for v in _get(values, "topology", "values", default=[]) or []:
        groups.append(nvlink_size(v) or 1)
    if ctx.nvlink_group is not None:
        group, where = ctx.nvlink_group, ctx.nvlink_source or "the node topology"
    elif groups:
        group, where = max(groups), "topology.values"
    else:
        group = None
    if group is not None and tp > 1 and tp > max(group, 1):
        add("GV006", f"tensor-parallel degree {tp} is larger than the NVLink group "
            f"({'none: PCIe only' if group <= 1 else group} GPUs, from {where})",
            "gpu", "count", severity="warning" if group <= 1 else "error",
            hint=None if group > 1 else
            "tensor parallel over PCIe works but is slow; use NVLink nodes if latency matters")

    # GV007: time-slicing/MPS replicas that cannot all hold the model.
    if mode == "shared" and ctx.memory_gb and shared and models:
        for model in models:
            per = model.memory_gb / shared
            if ctx.memory_gb * count > per:
                add("GV007", f"{ctx.memory_gb:g} GB per replica > {model.name} "
                    f"{model.memory_gb:g} GB / {shared} replicas = {per:.1f} GB: time-slicing has "
                    "no memory isolation, so co-located replicas run out of memory",
                    "gpu", "count")

    # GV008: GPU requests differing from the limit the chart sets.
    requests = _get(values, "resources", "requests", default={}) or {}
    limits = _get(values, "resources", "limits", default={}) or {}
    gpu_keys = [k for k in (*requests, *limits) if str(k).startswith("nvidia.com/")]
    for key in sorted(set(gpu_keys)):
        req, lim = requests.get(key), limits.get(key)
        if req is not None and lim is not None and str(req) != str(lim):
            add("GV008", f"{key}: request {req} differs from limit {lim}", "resources",
                "requests", key)
        elif req is not None and _quantity_int(req) != count and lim is None:
            add("GV008", f"{key}: request {req} differs from the GPU limit {count} the chart "
                "sets from gpu.count", "resources", "requests", key)

    # GV031: images tagged latest, the ones the chart refuses at render (templates/
    # validation.yaml; the platform images' schema refuses it there).
    server_type = _get(values, "server", "type", default="vllm")
    for path in (("server", "image"), ("server", "images", server_type), ("model", "init", "image"),
                 ("helmTest", "image"), ("gateway", "epp", "image")):
        if str(_get(values, *path, "tag")) == "latest":
            add("GV031", "latest is not allowed: it changes under a running release and breaks "
                "rollbacks", *path, "tag", hint="pin a version tag, or set the image's digest")
    reference = _get(values, "model", "image", "reference")
    if _get(values, "model", "source") == "image" and str(reference).endswith(":latest"):
        add("GV031", "latest is not allowed: it changes under a running release and breaks "
            "rollbacks", "model", "image", "reference", hint="pin a version tag or a digest")

    # GV018: LoRA adapters are served (and routed) by name: names unique and not the base
    # model's (the chart's templates/validation.yaml refuses both at render).
    seen: set[Any] = set()
    model_name = _get(values, "model", "name")
    for i, adapter in enumerate(_get(values, "lora", "adapters", default=[]) or []):
        adapter_name = adapter.get("name") if isinstance(adapter, dict) else None
        if adapter_name is None:
            continue
        if adapter_name in seen:
            add("GV018", f"LoRA adapter name {adapter_name} is used twice: each adapter is served "
                "under its own name", "lora", "adapters", i, "name",
                hint="rename one of the adapters")
        elif adapter_name == model_name:
            add("GV018", f"LoRA adapter name {adapter_name} is also model.name: an adapter needs a "
                "served name of its own", "lora", "adapters", i, "name",
                hint="rename the adapter")
        seen.add(adapter_name)

    # GV051: one HTTPRoute rule holds the route's model names, at most 64 (the chart's
    # templates/validation.yaml refuses more at render; gpuvalues.fleet.routing).
    if _get(values, "gateway", "enabled", default=False):
        names = _get(values, "gateway", "modelNames", default=[]) or list(routing.model_names(
            str(model_name), (a["name"] for a in _get(values, "lora", "adapters", default=[]) or []
                              if isinstance(a, dict) and "name" in a)))
        if len(names) > routing.MAX_MATCHES:
            add("GV051", f"{len(names)} model names (model.name and lora.adapters) in one "
                f"HTTPRoute rule; Gateway API allows {routing.MAX_MATCHES} matches", "lora", "adapters")

    # GV032: hugepages and extended resources are never overcommitted: the API server
    # refuses a request without an equal limit (validateResourceRequirements); the chart
    # refuses it at render too (templates/validation.yaml).
    for key in sorted(k for k in requests if str(k).startswith("hugepages-")
                      or ("/" in str(k) and not str(k).startswith(("nvidia.com/", "gpu.nvidia.com")))):
        if str(limits.get(key)) != str(requests[key]):
            add("GV032", f"{key}: request {requests[key]} needs an equal limit (got "
                f"{limits.get(key)}): the API server does not overcommit it", "resources",
                "requests", key, hint=f"set resources.limits.{key}: {requests[key]}")

    # The target version must be one whose API schemas are bundled (gpuvalues.kube).
    too_new = unsupported_kube_version(ctx.kube_version) if ctx.kube_version else None
    if too_new:
        add("GV000", too_new, hint="target a version "
            "listed, or upgrade kubernetes-validate")
        return sorted(out, key=Finding.sort_key)
    # GV009: DRA needs resource.k8s.io/v1 (Kubernetes 1.34).
    if mode == "dra" and ctx.kube_version:
        if kube_minor(ctx.kube_version) < 34:
            add("GV009", f"gpu.mode dra needs Kubernetes >= 1.34 (resource.k8s.io/v1), "
                f"target is {ctx.kube_version}", "gpu", "mode")
    return sorted(out, key=Finding.sort_key)


def _metric_findings(values: dict[str, Any], mode: str, add: Callable[..., None]) -> None:
    """GV003 through the autoscaling planner's metric rules (autoscaling.choose_metric):
    a GPU metric the mode cannot attribute per pod, or no metric a custom server needs."""
    from gpuvalues.errors import CapacityError
    from gpuvalues.planners.autoscaling import capacity as autoscaling

    server = _get(values, "server", "type", default="vllm")
    if server not in autoscaling.SERVER_TYPES or mode not in autoscaling.GPU_MODES:
        return                                      # the schema reports these
    if mode == "dra" and _get(values, "gpu", "dra", "deviceClassName") == "mig.nvidia.com":
        mode = "mig"
    metrics = _get(values, "autoscaling", "metrics", default=[]) or []
    if not metrics:
        try:
            autoscaling.choose_metric(mode, server)
        except CapacityError as exc:
            add("GV003", exc.message, "autoscaling", "metrics",
                hint="list the server's load metric in autoscaling.metrics")
        return
    gpu_metrics = (autoscaling.GPU_UTIL, autoscaling.GR_ENGINE_ACTIVE)
    for i, m in enumerate(metrics):
        name = m.get("name") if isinstance(m, dict) else None
        if not isinstance(name, str) or not name.startswith("DCGM_"):
            continue
        try:
            expected = autoscaling.choose_metric(mode, server, prefer="gpu")
        except CapacityError as exc:
            add("GV003", f"{name}: {exc.message}", "autoscaling", "metrics", i, "name")
            continue
        if name in gpu_metrics and name != expected.name:
            add("GV003", f"{name} cannot scale gpu.mode {mode}; use {expected.name}: "
                f"{expected.reason}", "autoscaling", "metrics", i, "name")
