{{/*
Remediation controller helpers (`gpuvalues remediate`, docs/self-healing.md). Defines are
namespaced `gpu-inference.remediation.*`; objects reuse the platform labels with the
component `remediation`.
*/}}

{{/* "true" when platform.remediation is on. */}}
{{- define "gpu-inference.remediation.enabled" -}}
{{- if .Values.platform.remediation.enabled }}true{{ end }}
{{- end }}

{{/* The controller's config file: its keys are schemas/values.schema.json $defs/remediationConfig
(what gpuvalues/operations/controller.py load_config checks the file against). */}}
{{- define "gpu-inference.remediation.config" -}}
{{- $r := .Values.platform.remediation -}}
{{- /* evidence must be fresher than 4 scrape intervals of the DCGM exporter (signals.py) */ -}}
{{- $iv := toString (.Values.platform.dcgmExporter.serviceMonitor.interval | default "15s") -}}
{{- $ivs := 15 -}}
{{- if regexMatch "^[0-9]+s$" $iv }}{{ $ivs = trimSuffix "s" $iv | atoi }}{{ else if regexMatch "^[0-9]+m$" $iv }}{{ $ivs = mul (trimSuffix "m" $iv | atoi) 60 }}{{ end -}}
{{- $cfg := dict "prometheusUrl" $r.prometheusUrl "syncPeriodSeconds" $r.syncPeriodSeconds "dryRun" $r.dryRun
    "metricsAddress" (printf "0.0.0.0:%d" (int $r.metricsPort)) "leaseNamespace" (include "gpu-inference.namespace" .)
    "leaseName" (include "gpu-inference.platform.fullname" (dict "root" . "component" "remediation"))
    "leaseDurationSeconds" $r.leaseDurationSeconds "suspectForSeconds" $r.suspectForSeconds
    "holdDownSeconds" $r.holdDownSeconds "drain" $r.drain "resetLabel" $r.resetLabel
    "breakerMaxNodes" $r.breakerMaxNodes "breakerMaxPercent" $r.breakerMaxPercent
    "maxNewQuarantinesPerSync" $r.maxNewQuarantinesPerSync "evictionsPerMinute" $r.evictionsPerMinute
    "criticalXids" ($r.criticalXids | default .Values.platform.alerts.criticalXids) "window" $r.window "nodeLabel" $r.nodeLabel "conditions" $r.conditions
    "ignoredTaints" $r.ignoredTaints "signals" $r.signals "drainTimeoutSeconds" $r.drainTimeoutSeconds
    "breakerPoolLabel" $r.breakerPoolLabel "flapWindowSeconds" $r.flapWindowSeconds
    "flapMaxQuarantines" $r.flapMaxQuarantines "nodeSelector" $r.nodeSelector
    "maxSampleAgeSeconds" ($r.maxSampleAgeSeconds | default (mul 4 (max $ivs 1)))
    "exporterJob" ($r.exporterJob | default (include "gpu-inference.platform.dcgmJob" .))
    "exporterNamespace" ($r.exporterNamespace | default (ternary "" (include "gpu-inference.namespace" .) (and .Values.platform.gpuOperator true))) -}}
{{- toYaml $cfg }}
{{- end }}
