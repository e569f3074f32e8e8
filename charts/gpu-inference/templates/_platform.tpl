{{/*
GPU platform helpers (device plugin, GFD, DCGM exporter, Prometheus adapter, alerts).
Every define here is namespaced `gpu-inference.platform.*`. Platform objects reuse the
chart's common labels but carry their own `app.kubernetes.io/name`, so the workload's
Service, PDB and ServiceMonitor selectors never match a platform pod.
*/}}

{{/* Object name of a platform component: <fullname>-<component>, a DNS label. Args: dict root, component. */}}
{{- define "gpu-inference.platform.fullname" -}}
{{- printf "%s-%s" (include "gpu-inference.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of a platform component. Args: dict root, component. */}}
{{- define "gpu-inference.platform.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "gpu-inference.name" .root) .component | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* Metadata labels of a platform component: the chart's common labels with the component's name. */}}
{{- define "gpu-inference.platform.labels" -}}
{{- $labels := include "gpu-inference.labels" .root | fromYaml -}}
{{- $labels = merge (include "gpu-inference.platform.selectorLabels" . | fromYaml) $labels -}}
{{- $_ := set $labels "app.kubernetes.io/name" (get (include "gpu-inference.platform.selectorLabels" . | fromYaml) "app.kubernetes.io/name") -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- $_ := set $labels "app.kubernetes.io/part-of" (include "gpu-inference.name" .root) -}}
{{- toYaml $labels }}
{{- end }}

{{/* "true" when the chart renders the device plugin (the GPU Operator runs its own otherwise). */}}
{{- define "gpu-inference.platform.devicePluginEnabled" -}}
{{- if and .Values.platform.devicePlugin.enabled (not .Values.platform.gpuOperator) }}true{{ end }}
{{- end }}

{{- define "gpu-inference.platform.gfdEnabled" -}}
{{- if and .Values.platform.gfd.enabled (not .Values.platform.gpuOperator) }}true{{ end }}
{{- end }}

{{/* NFD: its master and worker, unless the cluster runs NFD already (the GPU Operator's, or its own). */}}
{{- define "gpu-inference.platform.nfdEnabled" -}}
{{- if and .Values.platform.nfd.enabled (not .Values.platform.gpuOperator) }}true{{ end }}
{{- end }}

{{/* mig-manager (the GPU Operator runs its own, configured by its ClusterPolicy). */}}
{{- define "gpu-inference.platform.migManagerEnabled" -}}
{{- if and .Values.platform.migManager.enabled (not .Values.platform.gpuOperator) }}true{{ end }}
{{- end }}

{{- define "gpu-inference.platform.dcgmExporterEnabled" -}}
{{- if and .Values.platform.dcgmExporter.enabled (not .Values.platform.gpuOperator) }}true{{ end }}
{{- end }}

{{/* The adapter serves custom.metrics.k8s.io for the HPA; KEDA brings its own metrics server. */}}
{{- define "gpu-inference.platform.adapterEnabled" -}}
{{- if and .Values.platform.prometheusAdapter.enabled (or (not .Values.workload.enabled) (ne .Values.autoscaling.engine "keda")) }}true{{ end }}
{{- end }}

{{/* "true" when the cluster serves monitoring.coreos.com/v1 (the kind, or the group/version as
`helm template --api-versions monitoring.coreos.com/v1` passes it). Args: dict root, kind. */}}
{{- define "gpu-inference.platform.hasMonitoringApi" -}}
{{- $api := .root.Capabilities.APIVersions -}}
{{- if or ($api.Has (printf "monitoring.coreos.com/v1/%s" .kind)) ($api.Has "monitoring.coreos.com/v1") }}true{{ end }}
{{- end }}

{{/* ServiceMonitor only for our own exporter, and only where the CRD is served (or forced). */}}
{{- define "gpu-inference.platform.serviceMonitorEnabled" -}}
{{- $sm := .Values.platform.dcgmExporter.serviceMonitor -}}
{{- if and (include "gpu-inference.platform.dcgmExporterEnabled" .) $sm.enabled (or $sm.force (include "gpu-inference.platform.hasMonitoringApi" (dict "root" . "kind" "ServiceMonitor"))) }}true{{ end }}
{{- end }}

{{- define "gpu-inference.platform.alertsEnabled" -}}
{{- $a := .Values.platform.alerts -}}
{{- if and $a.enabled (or $a.force (include "gpu-inference.platform.hasMonitoringApi" (dict "root" . "kind" "PrometheusRule"))) }}true{{ end }}
{{- end }}

{{/* The device plugin configs need SYS_ADMIN (NVML MIG handles) when any config uses a MIG strategy. */}}
{{- define "gpu-inference.platform.anyMig" -}}
{{- range $name, $cfg := .Values.platform.devicePlugin.config.map }}
{{- $flags := default dict $cfg.flags }}
{{- if and $flags.migStrategy (ne $flags.migStrategy "none") }}true{{ end }}
{{- end }}
{{- end }}

{{/*
GPU node placement shared by the node DaemonSets. Args: dict root, optOut (a node label:
nodes where it is "false", or "paused-for-mig-change" while mig-manager reconfigures the
node, are left out; appended to every ORed term), require (more matchExpressions ANDed
into every term), allNodes (no GPU node affinity: NFD's worker, which finds the GPUs that
the affinity selects). mig-manager pauses a GPU client by setting its nvidia.com/gpu.deploy.*
label to paused-for-mig-change and waits until its pod is gone from the node (NVIDIA/
mig-parted v0.13.1 pkg/mig/reconfigure/reconfigure.go shutdownKubernetesGPUClients,
maybeSetPaused, waitForPodsToBeDeleted); the DaemonSet controller deletes it once the
node stops matching.
*/}}
{{- define "gpu-inference.platform.nodePlacement" -}}
{{- $terms := list }}
{{- range (ternary list .root.Values.platform.gpuNodeAffinity (default false .allNodes)) }}
{{- $term := deepCopy . }}
{{- if $.optOut }}
{{- $_ := set $term "matchExpressions" (append (default list $term.matchExpressions) (dict "key" $.optOut "operator" "NotIn" "values" (list "false" "paused-for-mig-change"))) }}
{{- end }}
{{- with $.require }}
{{- $_ := set $term "matchExpressions" (concat (default list $term.matchExpressions) .) }}
{{- end }}
{{- $terms = append $terms $term }}
{{- end }}
{{- with $terms }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        {{- toYaml . | nindent 8 }}
{{- end }}
{{- with .root.Values.platform.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.platform.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
config-manager container (init: ONESHOT true; sidecar: ONESHOT false, SIGHUP to the process).
It reads node label nvidia.com/device-plugin.config and links /config/config.yaml to the
chosen file, as upstream's chart does (deployments/helm/nvidia-device-plugin).
Args: dict root, name, oneshot (bool), process.
*/}}
{{- define "gpu-inference.platform.configManager" -}}
{{- $dp := .root.Values.platform.devicePlugin -}}
- name: {{ .name }}
  image: {{ include "gpu-inference.imageRef" $dp.image }}
  imagePullPolicy: {{ $dp.image.pullPolicy }}
  command: ["config-manager"]
  env:
    - name: ONESHOT
      value: {{ .oneshot | quote }}
    - name: KUBECONFIG
      value: ""
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    - name: NODE_LABEL
      value: nvidia.com/device-plugin.config
    - name: CONFIG_FILE_SRCDIR
      value: /available-configs
    - name: CONFIG_FILE_DST
      value: /config/config.yaml
    - name: DEFAULT_CONFIG
      value: {{ $dp.config.default | quote }}
    - name: FALLBACK_STRATEGIES
      value: {{ join "," $dp.config.fallbackStrategies | quote }}
    - name: SEND_SIGNAL
      value: {{ (not .oneshot) | quote }}
    - name: SIGNAL
      value: {{ ternary "" "1" .oneshot | quote }}
    - name: PROCESS_TO_SIGNAL
      value: {{ ternary "" .process .oneshot | quote }}
  volumeMounts:
    - name: available-configs
      mountPath: /available-configs
    - name: config
      mountPath: /config
  {{- /* It only reads its node's label from the API and links a file in the emptyDir, so no
         capability: upstream's chart already runs it with ALL dropped (as the sidecar of a
         non-MIG device plugin, deployments/helm/nvidia-device-plugin templates/
         daemonset-device-plugin.yml). Signalling the root plugin needs no capability as root. */}}
  securityContext:
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
  {{- with $dp.sidecarResources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
Device plugin container securityContext: ALL capabilities dropped and no escalation, as
upstream runs it without MIG (nvidia-device-plugin.securityContext in its _helpers.tpl); with
a MIG config it needs SYS_ADMIN (NVML MIG handles), added back alone, the pattern upstream's
dcgm-exporter chart uses for the same capability (deployment/values.yaml securityContext).
*/}}
{{- define "gpu-inference.platform.devicePluginSecurityContext" -}}
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
  {{- if include "gpu-inference.platform.anyMig" . }}
  add: ["SYS_ADMIN"]
  {{- end }}
{{- end }}

{{/* The DCGM exporter's counters CSV: defaults + fields the alerts/autoscaling need + extra, deduplicated by field; PROF_* only with profiling. */}}
{{- define "gpu-inference.platform.dcgmCounters" -}}
{{- $e := .Values.platform.dcgmExporter -}}
{{- $required := list
  "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C)."
  "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors."
  "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors."
  "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, counter, Total number of single-bit persistent ECC errors."
  "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, counter, Total number of double-bit persistent ECC errors."
  "DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered."
  "DCGM_EXP_XID_ERRORS_COUNT, gauge, Count of XID Errors within user-specified time window (see xid-count-window-size param)."
  "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors."
  "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for correctable errors."
  "DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether remapping of rows has failed."
  "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active."
-}}
{{- if .Values.platform.remediation.enabled }}
{{- /* the remediation controller's NVLink signal (gpuvalues/operations/signals.py) */}}
{{- $required = append $required "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, counter, Total number of NVLink recovery errors." }}
{{- end }}
{{- $seen := dict -}}
# FIELD, Prometheus type, help. Defaults from NVIDIA/dcgm-exporter etc/default-counters.csv,
# plus the ECC/Xid/row-remap fields the chart's alerts need and DCGM_FI_PROF_GR_ENGINE_ACTIVE.
{{- range (concat $e.counters.default $required $e.counters.extra) }}
{{- $field := . | splitList "," | first | trim }}
{{- if and (not (hasKey $seen $field)) (or $e.profiling (not (hasPrefix "DCGM_FI_PROF_" $field))) }}
{{- $_ := set $seen $field true }}
{{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
prometheus-adapter rules, one per-pod rule per effective scaling metric of this release
(gpu-inference.autoscaling.metrics, when workload.enabled) and of the other releases it
serves (platform.prometheusAdapter.metrics: a fleet's platform release lists every workload's). DCGM series name their pod with exported_* labels when
the exporter's scrape has honorLabels false (gpu-inference.dcgmLabelStyle);
the servers' own series are scraped from their pods and always use pod/namespace.
*/}}
{{- define "gpu-inference.platform.adapterRules" -}}
{{- $ad := .Values.platform.prometheusAdapter -}}
{{- $rules := list -}}
{{- $seen := dict -}}
{{- $metrics := $ad.metrics }}
{{- if .Values.workload.enabled }}
{{- $metrics = concat (include "gpu-inference.autoscaling.metrics" . | fromYamlArray) $ad.metrics }}
{{- end }}
{{- range $m := $metrics }}
{{- $series := $m.name }}
{{- if not (hasKey $seen $series) }}
{{- $_ := set $seen $series true }}
{{- $nsLabel := "namespace" }}
{{- $podLabel := "pod" }}
{{- if and (hasPrefix "DCGM_" $series) (eq (include "gpu-inference.dcgmLabelStyle" (dict "root" $ "explicit" $ad.exporterLabels)) "exported") }}
{{- $nsLabel = "exported_namespace" }}
{{- $podLabel = "exported_pod" }}
{{- end }}
{{- $query := "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)" }}
{{- if hasKey $ad.metricsQueries $series }}
{{- $query = get $ad.metricsQueries $series }}
{{- end }}
{{- $rule := dict
  "seriesQuery" (printf "{__name__=%q,%s!=\"\",%s!=\"\"}" $series $nsLabel $podLabel)
  "resources" (dict "overrides" (dict $nsLabel (dict "resource" "namespace") $podLabel (dict "resource" "pod")))
  "name" (dict "matches" (printf "^%s$" (regexQuoteMeta $series)) "as" (default (replace ":" "_" $series) $m.hpaName))
  "metricsQuery" $query }}
{{- $rules = append $rules $rule }}
{{- end }}
{{- end }}
{{- toYaml (dict "rules" (concat $rules $ad.extraRules)) }}
{{- end }}

{{/* Prometheus job of the DCGM exporter, for the absent/down alerts. */}}
{{- define "gpu-inference.platform.dcgmJob" -}}
{{- if .Values.platform.alerts.dcgmExporterJob }}
{{- .Values.platform.alerts.dcgmExporterJob }}
{{- else if .Values.platform.gpuOperator }}
{{- "nvidia-dcgm-exporter" }}
{{- else }}
{{- include "gpu-inference.platform.fullname" (dict "root" . "component" "dcgm-exporter") }}
{{- end }}
{{- end }}

{{/* Optional runbook_url annotation: <runbookBaseUrl>#<alert lowercased>. Args: dict base, alert. */}}
{{- define "gpu-inference.platform.runbookUrl" -}}
{{- if .base }}
runbook_url: {{ printf "%s#%s" .base (lower .alert) | quote }}
{{- end }}
{{- end }}

{{/* "true" when any device plugin config shares GPUs with MPS (the control daemon is then needed). */}}
{{- define "gpu-inference.platform.anyMps" -}}
{{- range $name, $cfg := .Values.platform.devicePlugin.config.map }}
{{- if and $cfg.sharing $cfg.sharing.mps }}true{{ end }}
{{- end }}
{{- end }}

{{/*
The header every node DaemonSet shares, from `apiVersion` down to the pod spec's placement
(the caller continues with initContainers/containers at pod-spec indentation, 6 spaces).
Args: dict root, component, serviceAccount (component whose ServiceAccount the pods use),
annotations (pod template annotations, e.g. config checksums), shareProcessNamespace
(config-manager signals the main process), podSpec (extra pod spec fields, e.g. nodeSelector),
optOut, require and allNodes (nodePlacement's), appLabel (a pod label `app`, not in the selector),
values (the component's own settings, $defs/daemonSetSettings: updateStrategy, priorityClassName,
runtimeClassName, podAnnotations (the chart's checksums win), nodeSelector (the caller's win)).
*/}}
{{- define "gpu-inference.platform.daemonSetHeader" -}}
{{- $ctx := dict "root" .root "component" .component -}}
{{- $sa := dict "root" .root "component" (default .component .serviceAccount) -}}
{{- $v := default dict .values -}}
{{- $annotations := merge (deepCopy (default dict .annotations)) (default dict $v.podAnnotations) -}}
{{- $podSpec := deepCopy (default dict .podSpec) -}}
{{- $nodeSelector := merge (default dict $podSpec.nodeSelector) (default dict $v.nodeSelector) -}}
{{- if $nodeSelector }}{{ $_ := set $podSpec "nodeSelector" $nodeSelector }}{{ end -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "gpu-inference.platform.fullname" $ctx }}
  namespace: {{ include "gpu-inference.namespace" .root }}
  labels:
    {{- include "gpu-inference.platform.labels" $ctx | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "gpu-inference.platform.selectorLabels" $ctx | nindent 6 }}
  updateStrategy:
    {{- toYaml (default (dict "type" "RollingUpdate") $v.updateStrategy) | nindent 4 }}
  template:
    metadata:
      labels:
        {{- include "gpu-inference.platform.selectorLabels" $ctx | nindent 8 }}
        {{- with .appLabel }}
        {{- /* the pod label mig-manager waits on (reconfigure.go waitForPodsToBeDeleted) */}}
        app: {{ . }}
        {{- end }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $v.runtimeClassName }}
      runtimeClassName: {{ . }}
      {{- end }}
      serviceAccountName: {{ include "gpu-inference.platform.fullname" $sa }}
      {{- if .shareProcessNamespace }}
      shareProcessNamespace: true
      {{- end }}
      {{- with $podSpec }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- include "gpu-inference.platform.nodePlacement" (dict "root" .root "optOut" .optOut "require" .require "allNodes" .allNodes) | nindent 6 }}
{{- end }}

{{/* "true" when a component's NetworkPolicy renders: its own `enabled`, or with null the
     workload's networkPolicy.enabled (one switch polices the whole release). Args: dict
     root, policy (the component's networkPolicy values). */}}
{{- define "gpu-inference.platform.networkPolicyOn" -}}
{{- if kindIs "invalid" .policy.enabled }}
{{- if .root.Values.networkPolicy.enabled }}true{{- end }}
{{- else if .policy.enabled }}true{{- end }}
{{- end }}

{{/* One ingress rule of a component's NetworkPolicy: `from` the peers (none: any source)
     to the named ports. Args: dict peers, ports (list of port names). */}}
{{- define "gpu-inference.platform.ingressRule" -}}
- {{- with .peers }}
  from:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    {{- range .ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
{{- end }}

{{/* "true" when the chart renders the body-based router (a platform part: one per Gateway). */}}
{{- define "gpu-inference.platform.bbrEnabled" -}}
{{- if .Values.platform.bodyBasedRouting.enabled }}true{{ end }}
{{- end }}

{{/* Namespace of the Gateway BBR serves (its EnvoyExtensionPolicy lives there: Envoy
     Gateway policies target objects of their own namespace). */}}
{{- define "gpu-inference.platform.bbrGatewayNamespace" -}}
{{- default (include "gpu-inference.namespace" .) .Values.platform.bodyBasedRouting.gateway.namespace }}
{{- end }}
