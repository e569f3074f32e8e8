"""Checks of what the fleet builder made: each release's values against the chart's
schema (with the chart defaults, as Helm checks them) and the semantic rules, with every
finding placed at the spec line that caused it."""
from __future__ import annotations

from dataclasses import replace

from gpuvalues import yamlio
from gpuvalues.checks.rules import Context, check_values, semantic_findings
from gpuvalues.errors import Finding, GpuValuesError, ValidationFailed, errors_only
from gpuvalues.fleet.builder import Values, plan_all, plan_values
from gpuvalues.fleet.spec import Spec

__all__ = ["check_built", "build_values", "build_all"]


def check_built(spec: Spec, built: Values) -> Values:
    """`built` with its warnings added, or `ValidationFailed` with every error."""
    wi = [w.name for w in spec.workloads].index(built.workload)
    source = f"<values for {built.workload}>"
    loaded = yamlio.Loaded(built.values, source, "", {(): (1, 1)}, {}, ())
    findings = [replace(f, line=None, column=None) for f in check_values(loaded)] + \
        semantic_findings(built.values, ctx=Context(**built.facts), source=source)
    findings = _findings_to_spec(spec, wi, findings)
    errors = errors_only(findings)
    if errors:
        raise ValidationFailed(errors)
    return replace(built, warnings=built.warnings + tuple(f for f in findings
                                                          if f.severity == "warning"))


def build_values(spec: Spec, workload: str | None = None, *, first: bool | None = None) -> Values:
    """Checked chart values for one workload (`gpuvalues.fleet.builder.plan_values`)."""
    return check_built(spec, plan_values(spec, workload, first=first))


def build_all(spec: Spec, *, errors: list[GpuValuesError] | None = None) -> tuple[Values, ...]:
    """Checked values for every workload (`plan_all`); with `errors`, a workload whose
    values fail is left out and its error appended there."""
    out = []
    for built in plan_all(spec, errors=errors):
        try:
            out.append(check_built(spec, built))
        except GpuValuesError as exc:
            if errors is None:
                raise
            errors.append(exc)
    return tuple(out)



def _findings_to_spec(spec: Spec, wi: int, findings: list[Finding]) -> list[Finding]:
    """Place findings about generated values at the spec line that caused them."""
    where = {"autoscaling.maxReplicas": ("autoscaling", "maxReplicas"),
             "autoscaling.minReplicas": ("autoscaling", "minReplicas"),
             "autoscaling.metrics": ("autoscaling", "metric")}
    out = []
    for f in findings:
        at = where.get(f.path.split("[")[0], ("workloads", wi))
        if spec.loaded is not None and at[0] == "autoscaling" and \
                at not in spec.loaded.positions:
            at = ("workloads", wi)
        source, line, col = spec.position(*at)
        out.append(replace(f, source=source, line=line, column=col,
                           path=f"{yamlio.format_path(at)} -> values {f.path}"))
    return out
