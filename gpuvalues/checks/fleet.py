"""Checks of a whole fleet, every finding in one run.

`check_fleet(fleet)` adds to the fleet's own findings (placement, pool capacity):
- each release's values against the chart's schema (with the chart defaults, as Helm
  checks them) and the semantic rules, placed at the spec line that caused them;
- every HPA metric of every workload served by a rule of the fleet's one Prometheus
  adapter (KEDA queries Prometheus itself), so no autoscaler silently gets no data;
- every resource a workload's pods request offered by a node group of its pool, and every
  node label they require produced there, on the nodes as the install makes them from bare
  nodes (`gpuvalues.fleet.producers`: who produces which label; GV017, GV021);
- release names unique.
`build_checked(spec)` is the fleet `values` and `render` use: checked, or
`ValidationFailed` with every error.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuvalues.yamlio.loader import Loaded, format_path
from gpuvalues.checks.rules import Context, check_values, semantic_findings
from gpuvalues.errors import Finding, ValidationFailed, errors_only
from gpuvalues.fleet import Fleet, Release, build_fleet, producers
from gpuvalues.fleet.spec import Spec

__all__ = ["check_fleet", "build_checked", "served_metric_names"]

# Spec paths that findings about generated values point at, by values path.
_SPEC_PATH = {"autoscaling.maxReplicas": ("autoscaling", "maxReplicas"),
              "autoscaling.minReplicas": ("autoscaling", "minReplicas"),
              "autoscaling.metrics": ("autoscaling", "metric")}


def _workload_index(spec: Spec, release: Release) -> int:
    """The index in the spec of a workload release's workload."""
    return [w.name for w in spec.workloads].index(release.workload or "")


def _at(spec: Spec, release: Release, values_path: str) -> tuple[str | int, ...]:
    if release.is_platform:
        return ("platform",) if spec.loaded and ("platform",) in spec.loaded.positions else ()
    at = _SPEC_PATH.get(values_path.split("[")[0])
    if at is None or spec.loaded is None or at not in spec.loaded.positions:
        return ("workloads", _workload_index(spec, release))
    return at


def _placed(spec: Spec, release: Release, findings: list[Finding]) -> list[Finding]:
    """Findings about generated values, placed at the spec line that caused them."""
    out = []
    for f in findings:
        at = _at(spec, release, f.path)
        source, line, col = spec.position(*at)
        out.append(replace(f, source=source, line=line, column=col,
                           path=f"{format_path(at)} -> {release.name} values {f.path}"))
    return out


def release_findings(spec: Spec, release: Release) -> list[Finding]:
    """The chart schema and the semantic rules on one release's values."""
    source = f"<values of release {release.name}>"
    loaded = Loaded(dict(release.values), source, "", {(): (1, 1)}, {}, ())
    found = [replace(f, line=None, column=None) for f in check_values(loaded)]
    if not release.is_platform:
        found += semantic_findings(dict(release.values), ctx=Context(**release.facts),
                                   source=source)
    return _placed(spec, release, found)


def served_metric_names(platform: Release) -> set[str]:
    """Metric names (as the HPA asks for them) the platform release's adapter serves:
    the chart's rule naming, `name.as` = the series with ':' replaced by '_' unless an
    hpaName is given (templates/_platform.tpl `gpu-inference.platform.adapterRules`;
    tests/oracle checks the names with prometheus-adapter's own config loader)."""
    ad = platform.values.get("platform", {}).get("prometheusAdapter", {})
    if not ad.get("enabled"):
        return set()
    return {m.get("hpaName") or m["name"].replace(":", "_") for m in ad.get("metrics", [])}


def _metric_findings(spec: Spec, fleet: Fleet) -> list[Finding]:
    served = served_metric_names(fleet.platform)
    out = []
    for r in fleet.workloads:
        a = r.values.get("autoscaling", {})
        if a.get("engine") != "hpa":
            continue
        missing = [m["name"] for m in a.get("metrics", [])
                   if m["name"].replace(":", "_") not in served]
        if missing:
            wi = _workload_index(spec, r)
            source, line, col = spec.position("workloads", wi)
            why = ("the spec turns the adapter off (platform.prometheusAdapter: false)"
                   if not spec.platform.prometheus_adapter else "no adapter rule serves it")
            out.append(Finding("GV016", f"the HPA of {r.workload} scales on {', '.join(missing)}, "
                               f"but {why}: it would get no data", f"workloads[{wi}]", source,
                               line, col))
    return out


def _resource_findings(spec: Spec, fleet: Fleet) -> list[Finding]:
    """Every requested resource is offered by some node of the workload's pool, once the
    install has run (`producers.node_states`: no device plugin, no resource)."""
    if fleet.layout is None:
        return []
    offered: dict[str, set[str]] = {}
    why: dict[str, str] = {}
    for s in producers.node_states(spec, fleet.layout, fleet.platform.values,
                                   producers.operator_values(fleet)):
        offered.setdefault(s.pool, set()).update(k for k, v in s.allocatable.items() if v)
        if producers.DEVICE_PLUGIN in s.why_not:
            why[s.pool] = f" ({producers.DEVICE_PLUGIN} is {s.why_not[producers.DEVICE_PLUGIN]})"
        elif producers.MIG_MANAGER in s.why_not:
            why[s.pool] = f" ({producers.MIG_MANAGER} is {s.why_not[producers.MIG_MANAGER]})"
    out = []
    for p in fleet.placements:
        if p.mode == "dra" or p.workload not in [r.workload for r in fleet.workloads] \
                or not fleet.layout.units.get(p.workload):
            continue              # no release, or no room at all: already a finding
        if p.resource not in offered.get(p.pool.name, set()):
            wi = [w.name for w in spec.workloads].index(p.workload)
            source, line, col = spec.position("workloads", wi)
            out.append(Finding("GV017", f"{p.workload} requests {p.resource}, but no node of pool "
                               f"{p.pool.name} offers it{why.get(p.pool.name, '')}",
                               f"workloads[{wi}]", source, line, col))
    return out


# How to turn on each producer, for GV021's message.
_ENABLE = {producers.GFD: "platform.gpuFeatureDiscovery: true",
           producers.NFD: "cluster.nfd: deploy",
           producers.DEVICE_PLUGIN: "platform.devicePlugin: true",
           producers.MIG_MANAGER: "a MIG layout (cluster.nodePools[].mig)",
           producers.GPU_OPERATOR: "platform.gpuOperator: true"}


# The spec line that switches each producer off, where GV021 points when the spec has it.
_SWITCH = {producers.GFD: ("platform", "gpuFeatureDiscovery"),
           producers.DEVICE_PLUGIN: ("platform", "devicePlugin")}


def _producer_findings(spec: Spec, fleet: Fleet) -> list[Finding]:
    """GV021: a label a workload's pods require (`producers.required_node_labels`) that no
    part of the install produces on its pool's nodes."""
    if fleet.layout is None:
        return []
    placements = {p.workload: p for p in fleet.placements}
    states = producers.node_states(spec, fleet.layout, fleet.platform.values, producers.operator_values(fleet))
    out = []
    for r in fleet.workloads:
        p = placements.get(r.workload or "")
        if p is None or p.mode == "dra":
            continue
        missing = producers.missing_producers(fleet, p.pool.name, producers.required_node_labels(r.values),
                                              states)
        if not missing:
            continue
        at: tuple[str | int, ...] = ("workloads", _workload_index(spec, r))
        switch = _SWITCH.get(missing[0][1] or "")
        if switch and spec.loaded is not None and switch in spec.loaded.positions:
            at = switch                     # the line that turned the producer off
        source, line, col = spec.position(*at)
        parts = []
        for key, part, why in missing:
            if part is None:
                parts.append(f"{key}, which nothing in the install produces")
            else:
                parts.append(f"{key}, which only {part} produces ({why or 'not deployed'}; "
                             f"{_ENABLE.get(part, 'deploy it')})")
        out.append(Finding("GV021", f"the pods of {r.workload} select {'; '.join(parts)}: on nodes "
                           f"of pool {p.pool.name} they would stay Pending", format_path(at),
                           source, line, col))
    return out


def _name_findings(spec: Spec, fleet: Fleet) -> list[Finding]:
    out = []
    seen: dict[tuple[str, ...], str] = {}
    for r in fleet.releases:
        key = (r.name,)
        if key in seen:
            at: Any = ("workloads", [w.name for w in spec.workloads].index(r.workload), "name") \
                if r.workload else ("platform",)
            source, line, col = spec.position(*at)
            out.append(Finding("GV018", f"release name {r.name!r} is used twice ({seen[key]} and "
                               f"{r.workload or 'the platform release'})",
                               format_path(at), source, line, col))
        seen.setdefault(key, r.workload or "the platform release")
    return out


def check_fleet(fleet: Fleet) -> Fleet:
    """`fleet` with every check's findings added (sorted by position, each once: a pool's
    unknown GPU fails the placement of each of its workloads with the same finding)."""
    spec = fleet.spec
    found = list(fleet.findings)
    for r in fleet.releases:
        found += release_findings(spec, r)
    found += _metric_findings(spec, fleet) + _resource_findings(spec, fleet) + \
        _producer_findings(spec, fleet) + _name_findings(spec, fleet)
    return replace(fleet, findings=tuple(sorted(dict.fromkeys(found), key=Finding.sort_key)))


def build_checked(spec: Spec, **kw: Any) -> Fleet:
    """The checked fleet of `spec`, or `ValidationFailed` carrying every error."""
    fleet = check_fleet(build_fleet(spec, **kw))
    errors = errors_only(fleet.findings)
    if errors:
        raise ValidationFailed(errors)
    return fleet
