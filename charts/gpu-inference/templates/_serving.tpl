{{/*
Serving helpers: scale to zero, the inference gateway (InferencePool + endpoint picker),
model sources and LoRA adapters. Every define is namespaced `gpu-inference.`.
*/}}

{{/* Name of the endpoint picker's objects (Deployment, Service, ServiceAccount, RBAC, ConfigMap). */}}
{{- define "gpu-inference.epp.fullname" -}}
{{- printf "%s-epp" (include "gpu-inference.fullname" . | trunc 59 | trimSuffix "-") }}
{{- end }}

{{/* The EPP's selector: component endpoint-picker, so neither the server's Service nor the
     InferencePool (both select component inference) ever select the picker's pods. */}}
{{- define "gpu-inference.epp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-inference.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: endpoint-picker
{{- end }}

{{- define "gpu-inference.epp.labels" -}}
{{ include "gpu-inference.baseLabels" . }}
app.kubernetes.io/component: endpoint-picker
{{- end }}

{{/* The header the body-based router sets from the request body's `model` field and every
     workload's HTTPRoute matches (GAIE v1.5.0 pkg/bbr/plugins/bodyfieldtoheader
     body_field_to_header.go ModelHeader). */}}
{{- define "gpu-inference.gateway.modelHeader" -}}
X-Gateway-Model-Name
{{- end }}

{{/* The model names a client sends (OpenAI `model`) that this workload's route sends to its
     pool, as a JSON list: gateway.modelNames, else the served model name (vLLM
     --served-model-name, model.name) and every LoRA adapter's name (vLLM serves an adapter
     under its --lora-modules name, on the base model's pods). */}}
{{- define "gpu-inference.gateway.modelNames" -}}
{{- $names := .Values.gateway.modelNames }}
{{- if not $names }}
{{- $names = list .Values.model.name }}
{{- range .Values.lora.adapters }}{{- $names = append $names .name }}{{- end }}
{{- end }}
{{- toJson (uniq $names) }}
{{- end }}

{{- define "gpu-inference.model.labels" -}}
{{ include "gpu-inference.baseLabels" . }}
app.kubernetes.io/component: model-cache
{{- end }}

{{/* True when the server scales to zero (an autoscaler with minReplicas 0). */}}
{{- define "gpu-inference.scaleToZero" -}}
{{- if and (ne .Values.autoscaling.engine "none") (eq (int .Values.autoscaling.minReplicas) 0) }}true{{- end }}
{{- end }}

{{/* Is the EPP's flow control on? gateway.flowControl, default: on when scaling to zero, so
     the picker holds requests while the first replica cold-starts instead of failing them
     (GAIE v1.5.0 site-src/guides/flow-control.md "Autoscaling: KEDA and Scale-to-Zero"). */}}
{{- define "gpu-inference.gateway.flowControl" -}}
{{- $fc := .Values.gateway.flowControl }}
{{- if kindIs "invalid" $fc }}{{- include "gpu-inference.scaleToZero" . }}{{- else if $fc }}true{{- end }}
{{- end }}

{{/*
KEDA cooldownPeriod: the value, or when null max(300, server.modelLoadTimeoutSeconds) for a
workload that scales to zero. Keeping an idle replica as long as a cold start takes is the
ski-rental rule (never pay more than twice the optimum). 300 is KEDA's own default.
*/}}
{{- define "gpu-inference.keda.cooldown" -}}
{{- $c := .Values.autoscaling.keda.cooldownPeriod }}
{{- if not (kindIs "invalid" $c) }}{{- int $c }}
{{- else if include "gpu-inference.scaleToZero" . }}{{- max 300 (int .Values.server.modelLoadTimeoutSeconds) }}
{{- else }}300{{- end }}
{{- end }}

{{/*
The activation query of a scaled-to-zero workload: autoscaling.keda.activationQuery, or with
the gateway on the EPP flow-control queue of this pool (requests held while no replica
runs; metric inference_extension_flow_control_queue_size, label inference_pool). Empty when
neither: the server's own metrics do not exist at zero replicas.
*/}}
{{- define "gpu-inference.keda.activationQuery" -}}
{{- if .Values.autoscaling.keda.activationQuery }}{{- .Values.autoscaling.keda.activationQuery }}
{{- else if and .Values.gateway.enabled (include "gpu-inference.gateway.flowControl" .) }}
{{- printf "sum(inference_extension_flow_control_queue_size{namespace=%q,inference_pool=%q})" (include "gpu-inference.namespace" .) (include "gpu-inference.fullname" .) }}
{{- end }}
{{- end }}

{{/* Name of the model cache claim (source=pvc). */}}
{{- define "gpu-inference.model.claimName" -}}
{{- if .Values.model.pvc.claimName }}{{- .Values.model.pvc.claimName }}
{{- else }}{{- printf "%s-model" (include "gpu-inference.fullname" . | trunc 57 | trimSuffix "-") }}{{- end }}
{{- end }}

{{/*
Storage for the weights, in whole Gi, from model.sizeGB: 1.25x the weights (GB -> GiB is
x0.93; the rest is room for the hub's temporary files during a download), at least 1 Gi.
Empty when model.sizeGB is unset.
*/}}
{{- define "gpu-inference.model.storageGi" -}}
{{- with .Values.model.sizeGB }}{{- max 1 (ceil (mulf . 1.25) | int) }}{{- end }}
{{- end }}

{{/* Size of the created cache PVC: model.pvc.size, else derived from model.sizeGB. */}}
{{- define "gpu-inference.model.pvcSize" -}}
{{- if not (kindIs "invalid" .Values.model.pvc.size) }}{{- .Values.model.pvc.size }}
{{- else }}{{- printf "%sGi" (include "gpu-inference.model.storageGi" .) }}{{- end }}
{{- end }}

{{/* sizeLimit of the model emptyDir (download, emptyDir, init): derived when model.sizeGB is set. */}}
{{- define "gpu-inference.model.emptyDirSize" -}}
{{- $gi := include "gpu-inference.model.storageGi" . }}
{{- if $gi }}{{- printf "%sGi" $gi }}{{- else }}{{- .Values.model.emptyDir.sizeLimit }}{{- end }}
{{- end }}

{{/*
Ephemeral storage the pod needs, in Gi, when model.sizeGB is set: the kubelet evicts a pod
whose containers' writable layers plus its disk-backed emptyDirs exceed the sum of its
containers' ephemeral-storage limits (kubelet eviction manager, localStorageEviction). So the
limit covers the model emptyDir (download/emptyDir/init), the 8Gi cache and 1Gi tmp
emptyDirs and 2Gi for logs and the writable layer. Empty when sizeGB is unset.
*/}}
{{- define "gpu-inference.model.ephemeralGi" -}}
{{- if .Values.model.sizeGB }}
{{- $model := 0 }}
{{- if has .Values.model.source (list "emptyDir" "download" "init") }}{{- $model = include "gpu-inference.model.storageGi" . | int }}{{- end }}
{{- add $model 8 1 2 }}
{{- end }}
{{- end }}

{{/* The vLLM flags of the LoRA adapters (vllm/engine/arg_utils.py and
     vllm/entrypoints/common/cli_args.py of vLLM 0.33.0): one --lora-modules with name=path
     items (its action replaces, so it is given once), --max-loras, --max-lora-rank.
     --max-loras is how many adapters one batch may hold (vllm/config/lora.py, default 1):
     null = every adapter, so a request for one adapter never waits for another's batch. */}}
{{- define "gpu-inference.lora.args" -}}
{{- $l := .Values.lora }}
{{- if or $l.adapters $l.runtimeUpdates }}
- --enable-lora
{{- $max := ternary (max 1 (len ($l.adapters | default list))) $l.maxLoras (kindIs "invalid" $l.maxLoras) }}
- {{ printf "--max-loras=%d" (int $max) | quote }}
- {{ printf "--max-lora-rank=%d" (int $l.maxLoraRank) | quote }}
{{- with $l.adapters }}
- --lora-modules
{{- range . }}
- {{ printf "%s=%s" .name .source | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of an adapter's InferenceObjective: <fullname>-<adapter>; past 63 characters the
     first 54 and an 8-hex hash of the whole name, so two adapters whose names share a long
     prefix keep distinct objects (plain truncation made them one). Args: dict root, name. */}}
{{- define "gpu-inference.lora.objectiveName" -}}
{{- $full := printf "%s-%s" (include "gpu-inference.fullname" .root) .name }}
{{- if le (len $full) 63 }}{{- $full }}
{{- else }}{{- printf "%s-%s" ($full | trunc 54 | trimSuffix "-" | trimSuffix ".") (sha256sum $full | trunc 8) }}{{- end }}
{{- end }}

{{/* Environment of the serving features: runtime LoRA loading, the streamer's endpoint. */}}
{{- define "gpu-inference.serving.env" -}}
{{- if .Values.lora.runtimeUpdates }}
- name: VLLM_ALLOW_RUNTIME_LORA_UPDATING
  value: "True"
{{- end }}
{{- if and (eq .Values.model.source "streamer") .Values.model.streamer.endpoint }}
{{- /* runai_streamer_loader.py copies AWS_ENDPOINT_URL to RUNAI_STREAMER_S3_ENDPOINT */}}
- name: AWS_ENDPOINT_URL
  value: {{ .Values.model.streamer.endpoint | quote }}
{{- end }}
{{- end }}
