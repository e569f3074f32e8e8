"""The remediation controller's options (`gpuvalues remediate` flags and its `--config`
file). The file is read through the project's safe reader (`gpuvalues.yamlio`: a regular
file, bounded, one document) and checked against `$defs/remediationConfig` of the values
schema: the one definition of its keys, which the chart's `platform.remediation` values
refer to and its ConfigMap template renders."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from gpuvalues.errors import SpecError
from gpuvalues.operations.remediation import Config
from gpuvalues.operations.signals import SignalConfig


class RemediateError(SpecError):
    """Bad options, config file or kubeconfig at start-up (exit 2, one line)."""
    code = "GV041"


@dataclass(frozen=True)
class Options:
    """Everything `gpuvalues remediate` takes."""
    kubeconfig: str | None = None
    context: str | None = None
    prometheus_url: str | None = None
    sync_period_s: float = 30.0
    dry_run: bool = False
    once: bool = False
    metrics_address: str = "0.0.0.0:8080"
    lease_namespace: str = "default"
    lease_name: str = "gpu-inference-remediation"
    identity: str = ""
    lease_duration_s: float = 15.0
    node_selector: str = ""
    evictions_per_minute: float = 30.0
    api_timeout_s: float = 10.0          # each API server request (connect, and each read)
    prometheus_timeout_s: float = 10.0   # each Prometheus query, whole exchange
    machine: Config = field(default_factory=Config)
    signals: SignalConfig = field(default_factory=SignalConfig)


_SIGNAL_KEYS = {"xid": "xid", "dbe": "dbe", "rowRemap": "row-remap", "nvlink": "nvlink",
                "allocatable": "allocatable", "conditions": "conditions", "exporterMissing": "exporter"}


def config_schema() -> dict[str, Any]:
    """The config file's schema: `$defs/remediationConfig` of the values schema (the one
    definition of the keys; the chart's platform.remediation refers to it)."""
    from gpuvalues.bundle import VALUES_SCHEMA
    from gpuvalues.schemas import load_schema

    values = load_schema(VALUES_SCHEMA)
    return {"$schema": values.get("$schema"), "$defs": values["$defs"], "$ref": "#/$defs/remediationConfig"}


def load_config(path: str) -> dict[str, Any]:
    """Read the YAML config through the project's reader (a regular file, bounded) and
    check it against the schema; the first error is one line naming file:line:col and field."""
    from gpuvalues.yamlio.loader import load_mapping
    from gpuvalues.checks.rules import schema_findings

    loaded = load_mapping(path, allow_empty=True, what="remediation config")
    data = loaded.data if loaded.data is not None else {}
    if not data:
        return {}
    findings = schema_findings(dataclasses.replace(loaded, data=data), config_schema())
    if findings:
        f = findings[0]
        raise RemediateError(f.message, source=f.source or path, line=f.line, column=f.column, field=f.path or None,
                             code=f.code)
    return data


def options_from_args(args: Any) -> Options:
    """Options from the `gpuvalues remediate` arguments and its --config file (flags win);
    checked, so bad values fail before anything runs."""
    cfg = load_config(args.config) if getattr(args, "config", None) else {}
    src = args.config or "--config"

    def pick(flag: str, key: str, default: Any) -> Any:
        v = getattr(args, flag, None)
        return v if v is not None else cfg.get(key, default)

    sig = cfg.get("signals") or {}
    enabled = {name for key, name in _SIGNAL_KEYS.items() if key != "exporterMissing" and sig.get(key, True)}
    exporter = sig.get("exporterMissing", "warn")
    if exporter != "ignore":
        enabled.add("exporter")
    defaults_s, defaults_m = SignalConfig(), Config()
    try:
        scfg = SignalConfig(enabled=frozenset(enabled),
                            critical_xids=tuple(cfg.get("criticalXids", defaults_s.critical_xids)),
                            window=cfg.get("window", defaults_s.window),
                            node_label=cfg.get("nodeLabel", defaults_s.node_label),
                            conditions=tuple(cfg.get("conditions", defaults_s.conditions)),
                            exporter_missing_acts=exporter == "act",
                            gpu_resource_prefix=cfg.get("gpuResourcePrefix", defaults_s.gpu_resource_prefix),
                            exporter_job=cfg.get("exporterJob", ""), exporter_namespace=cfg.get("exporterNamespace", ""),
                            max_sample_age_s=float(cfg.get("maxSampleAgeSeconds") or defaults_s.max_sample_age_s))
    except ValueError as e:
        raise RemediateError(str(e), source=src) from None
    m = defaults_m
    mcfg = Config(suspect_for_s=float(cfg.get("suspectForSeconds", m.suspect_for_s)),
                  hold_down_s=float(cfg.get("holdDownSeconds", m.hold_down_s)),
                  drain=cfg.get("drain", m.drain), drain_timeout_s=float(cfg.get("drainTimeoutSeconds", m.drain_timeout_s)),
                  reset_label=cfg.get("resetLabel", m.reset_label),
                  breaker_max_nodes=cfg.get("breakerMaxNodes", m.breaker_max_nodes),
                  breaker_max_percent=float(cfg.get("breakerMaxPercent", m.breaker_max_percent)),
                  breaker_pool_label=cfg.get("breakerPoolLabel", m.breaker_pool_label),
                  max_new_quarantines_per_sync=cfg.get("maxNewQuarantinesPerSync", m.max_new_quarantines_per_sync),
                  flap_window_s=float(cfg.get("flapWindowSeconds", m.flap_window_s)),
                  flap_max_quarantines=cfg.get("flapMaxQuarantines", m.flap_max_quarantines),
                  ignored_taints=tuple(cfg.get("ignoredTaints", m.ignored_taints)))
    sync = float(pick("sync_period", "syncPeriodSeconds", 30.0))
    opts = Options(kubeconfig=args.kubeconfig, context=args.context,
                   prometheus_url=pick("prometheus_url", "prometheusUrl", None) or None,
                   sync_period_s=sync,
                   dry_run=bool(pick("dry_run", "dryRun", False)), once=bool(args.once),
                   metrics_address=pick("metrics_address", "metricsAddress", "0.0.0.0:8080"),
                   lease_namespace=pick("lease_namespace", "leaseNamespace", "default"),
                   lease_name=pick("lease_name", "leaseName", "gpu-inference-remediation"),
                   identity=args.identity or "", node_selector=cfg.get("nodeSelector", ""),
                   lease_duration_s=float(cfg.get("leaseDurationSeconds", max(15.0, 3 * sync))),
                   evictions_per_minute=float(cfg.get("evictionsPerMinute", 30.0)),
                   prometheus_timeout_s=float(cfg.get("prometheusTimeoutSeconds", 10.0)), machine=mcfg, signals=scfg)
    checks = [(math.isfinite(opts.sync_period_s) and opts.sync_period_s > 0, "syncPeriodSeconds", "must be > 0"),
              (opts.lease_duration_s >= 2 * opts.sync_period_s or opts.once, "leaseDurationSeconds",
               "must be at least twice the sync period (the leader renews once per sync)"),
              (0 <= mcfg.breaker_max_percent <= 100, "breakerMaxPercent", "must be between 0 and 100"),
              (mcfg.breaker_max_nodes >= 0, "breakerMaxNodes", "must be >= 0"),
              (mcfg.max_new_quarantines_per_sync >= 0, "maxNewQuarantinesPerSync", "must be >= 0"),
              (opts.evictions_per_minute > 0, "evictionsPerMinute", "must be > 0"),
              (mcfg.suspect_for_s >= 0 and mcfg.hold_down_s >= 0, "suspectForSeconds/holdDownSeconds", "must be >= 0"),
              (not opts.prometheus_url or opts.prometheus_url.startswith(("http://", "https://")),
               "prometheusUrl", "must start with http:// or https://")]
    for ok, key, msg in checks:
        if not ok:
            raise RemediateError(msg, source=src, field=key)
    return opts
