{{/*
Workload helpers for gpu-inference. Every define is namespaced `gpu-inference.`.
Platform helpers live in _platform.tpl (owned separately).
*/}}

{{/* Chart name, truncated to 63 characters (DNS label). */}}
{{- define "gpu-inference.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release name, plus the chart name unless it already contains it. */}}
{{- define "gpu-inference.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The namespace of every namespaced object: namespaceOverride, else the release's (umbrella charts
deploy this chart as a subchart into another namespace). */}}
{{- define "gpu-inference.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-inference.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: name + instance only (never the chart version). */}}
{{- define "gpu-inference.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-inference.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: inference
{{- end }}

{{/* Labels shared by every workload object, without the component. */}}
{{- define "gpu-inference.baseLabels" -}}
helm.sh/chart: {{ include "gpu-inference.chart" . }}
app.kubernetes.io/name: {{ include "gpu-inference.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-inference
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpu-inference.labels" -}}
{{ include "gpu-inference.baseLabels" . }}
app.kubernetes.io/component: inference
{{- end }}

{{- define "gpu-inference.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-inference.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference from {repository, tag, digest}: `repo@digest` when a digest is set
(the tag is kept for humans: `repo:tag@digest`), else `repo:tag`.
*/}}
{{- define "gpu-inference.imageRef" -}}
{{- $ref := .repository }}
{{- if .tag }}{{- $ref = printf "%s:%s" $ref .tag }}{{- end }}
{{- if .digest }}{{- $ref = printf "%s@%s" $ref .digest }}{{- end }}
{{- $ref }}
{{- end }}

{{/*
Per server type defaults: image (server.images.<type>, each part overridden by
server.image.*), probe paths, metrics port and path. Returned as YAML (consume with fromYaml).
  vllm:   /health (liveness, startup), /v1/models (readiness: the model
          is loaded and served), metrics at /metrics on the http port.
  triton: /v2/health/live, /v2/health/ready (KServe v2),
          metrics at /metrics on 8002.
*/}}
{{- define "gpu-inference.server" -}}
{{- $s := .Values.server }}
{{- $t := $s.type }}
{{- $d := dict }}
{{- if eq $t "vllm" }}
{{- /* /v1/models answers once the model is served; with an API key (--api-key or
       VLLM_API_KEY) it needs auth and would return 401, so readiness falls back to /health. */}}
{{- $ready := "/v1/models" }}
{{- $envNames := list }}{{- range (concat $s.env $.Values.extraEnv) }}{{- $envNames = append $envNames .name }}{{- end }}
{{- if or (regexMatch "--api-key" (join " " (concat $s.args $.Values.extraArgs))) (has "VLLM_API_KEY" $envNames) }}{{- $ready = "/health" }}{{- end }}
{{- $d = dict "liveness" "/health" "readiness" $ready "startup" "/health" "metricsPath" "/metrics" "metricsPort" $s.ports.http "metricsPortName" "http" }}
{{- else if eq $t "triton" }}
{{- $d = dict "liveness" "/v2/health/live" "readiness" "/v2/health/ready" "startup" "/v2/health/ready" "metricsPath" "/metrics" "metricsPort" $s.ports.metrics "metricsPortName" "metrics" }}
{{- else }}
{{- $mport := $s.ports.http }}
{{- $mname := "http" }}
{{- if gt (int $s.ports.metrics) 0 }}{{- $mport = $s.ports.metrics }}{{- $mname = "metrics" }}{{- end }}
{{- $d = dict "liveness" $s.custom.livenessPath "readiness" $s.custom.readinessPath "startup" (default $s.custom.readinessPath $s.custom.startupPath) "metricsPath" $s.custom.metricsPath "metricsPort" $mport "metricsPortName" $mname }}
{{- end }}
{{- with $.Values.probes.liveness.path }}{{- $_ := set $d "liveness" . }}{{- end }}
{{- with $.Values.probes.readiness.path }}{{- $_ := set $d "readiness" . }}{{- end }}
{{- $img := dict "repository" "" "tag" "" "digest" "" }}
{{- $typeImg := get ($s.images | default dict) $t | default dict }}
{{- range $k, $unused := $img }}{{- $_ := set $img $k (default (get $typeImg $k) (get $s.image $k)) }}{{- end }}
{{- $_ := set $d "imageParts" $img }}
{{- $_ := set $d "image" (include "gpu-inference.imageRef" $img) }}
{{- toYaml $d }}
{{- end }}

{{/*
The extended resource name the pod's GPUs come from (not used for gpu.mode=dra).
  whole:  gpu.resourceName (nvidia.com/gpu)
  mig:    mixed strategy -> nvidia.com/mig-<profile> with `+` replaced by `.` (as the
          device plugin names it, internal/rm/rm.go); single strategy -> nvidia.com/gpu
  shared: gpu.shared.resourceName (nvidia.com/gpu.shared when renamed, else nvidia.com/gpu)
*/}}
{{- define "gpu-inference.gpu.resourceName" -}}
{{- $g := .Values.gpu }}
{{- if eq $g.mode "mig" }}
{{- if eq $g.mig.strategy "mixed" }}
{{- printf "nvidia.com/mig-%s" ($g.mig.profile | replace "+" ".") }}
{{- else }}
{{- print "nvidia.com/gpu" }}
{{- end }}
{{- else if eq $g.mode "shared" }}
{{- $g.shared.resourceName }}
{{- else }}
{{- $g.resourceName }}
{{- end }}
{{- end }}

{{/* True ("true") when an autoscaler (HPA or KEDA) owns the Deployment's replicas. */}}
{{- define "gpu-inference.autoscaled" -}}
{{- if ne .Values.autoscaling.engine "none" }}true{{- end }}
{{- end }}

{{/* The minimum number of replicas the Deployment runs with. */}}
{{- define "gpu-inference.minReplicas" -}}
{{- if include "gpu-inference.autoscaled" . }}{{- .Values.autoscaling.minReplicas | int }}{{- else }}{{- .Values.replicaCount | int }}{{- end }}
{{- end }}

{{/* Does gpu.mode=dra allocate MIG devices? */}}
{{- define "gpu-inference.gpu.isMig" -}}
{{- if or (eq .Values.gpu.mode "mig") (and (eq .Values.gpu.mode "dra") (eq .Values.gpu.dra.deviceClassName "mig.nvidia.com")) }}true{{- end }}
{{- end }}

{{/*
INTERFACE (read by the platform templates): the EFFECTIVE scaling metrics as a YAML list,
consumed with `include "gpu-inference.autoscaling.metrics" . | fromYamlArray`.
Each item: {name: <Prometheus series name>, target: <averageValue quantity string>}.
The custom metrics API (adapter) name is `gpu-inference.autoscaling.apiName` of the name:
':' replaced by '_'. Empty list when autoscaling.engine is none.
Defaults when autoscaling.metrics is empty (same rules as gpuvalues.planners.autoscaling.capacity):
  whole (and dra gpu.nvidia.com): DCGM_FI_DEV_GPU_UTIL "70"   (0-100)
  mig   (and dra mig.nvidia.com): DCGM_FI_PROF_GR_ENGINE_ACTIVE "700m" (0-1 ratio; GPU_UTIL
                                  is not reported per MIG instance)
  shared: a GPU metric cannot be attributed per pod, so the server's own queue metric:
          vllm -> vllm:num_requests_waiting "5"; triton -> nv_inference_queue_duration_us
          "50000" (mean queue time per request, µs); custom -> none (validation.yaml
          then asks for one). The metric rules (GPU metrics under shared, GPU_UTIL on MIG)
          are checked in validation.yaml.
*/}}
{{- define "gpu-inference.autoscaling.metrics" -}}
{{- $a := .Values.autoscaling }}
{{- $out := list }}
{{- if ne $a.engine "none" }}
{{- $ms := $a.metrics }}
{{- if not $ms }}
{{- if eq .Values.gpu.mode "shared" }}
{{- if eq .Values.server.type "vllm" }}
{{- $ms = list (dict "name" "vllm:num_requests_waiting" "target" "5") }}
{{- else if eq .Values.server.type "triton" }}
{{- $ms = list (dict "name" "nv_inference_queue_duration_us" "target" "50000") }}
{{- end }}
{{- else if include "gpu-inference.gpu.isMig" . }}
{{- $ms = list (dict "name" "DCGM_FI_PROF_GR_ENGINE_ACTIVE" "target" "700m") }}
{{- else }}
{{- $ms = list (dict "name" "DCGM_FI_DEV_GPU_UTIL" "target" "70") }}
{{- end }}
{{- end }}
{{- range $ms }}
{{- $out = append $out (dict "name" .name "target" (toString .target)) }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* The name the custom metrics API serves a series under (adapter rules rename ':' to '_'). */}}
{{- define "gpu-inference.autoscaling.apiName" -}}
{{- . | replace ":" "_" }}
{{- end }}

{{/*
A quantity string ("70", "700m", "1.5", "2k") as a plain decimal for KEDA's threshold.
*/}}
{{- define "gpu-inference.quantityDecimal" -}}
{{- $q := toString . }}
{{- if hasSuffix "m" $q }}{{- divf (trimSuffix "m" $q | float64) 1000 }}
{{- else if hasSuffix "k" $q }}{{- mulf (trimSuffix "k" $q | float64) 1000 }}
{{- else if hasSuffix "M" $q }}{{- mulf (trimSuffix "M" $q | float64) 1000000 }}
{{- else }}{{- $q }}{{- end }}
{{- end }}

{{/*
PromQL for one metric, summed over this release's pods (KEDA AverageValue divides the
sum by the threshold, the same arithmetic as an HPA Pods metric).
*/}}
{{- define "gpu-inference.keda.query" -}}
{{- $root := .root }}
{{- $k := $root.Values.autoscaling.keda }}
{{- /* DCGM series name the workload pod with the labels the exporter's scrape leaves
       (exported_* when honorLabels is false); the server's own series are scraped from
       its pods and always carry pod/namespace. */}}
{{- $podL := "pod" }}
{{- $nsL := "namespace" }}
{{- if hasPrefix "DCGM_" .metric.name }}
{{- $exported := eq (include "gpu-inference.dcgmLabelStyle" (dict "root" $root "explicit" "auto")) "exported" }}
{{- $podL = $k.podLabel | default (ternary "exported_pod" "pod" $exported) }}
{{- $nsL = $k.namespaceLabel | default (ternary "exported_namespace" "namespace" $exported) }}
{{- end }}
{{- $sel := printf "%s=%q,%s=~%q" $nsL (include "gpu-inference.namespace" $root) $podL (printf "%s-[a-z0-9]+-[a-z0-9]+" (include "gpu-inference.fullname" $root)) }}
{{- if eq .metric.name "nv_inference_queue_duration_us" }}
{{- printf "sum(sum by (%s) (rate(nv_inference_queue_duration_us{%s}[1m])) / clamp_min(sum by (%s) (rate(nv_inference_request_success{%s}[1m])), 1e-9))" $podL $sel $podL $sel }}
{{- else }}
{{- printf "sum(avg by (%s) (%s{%s}))" $podL .metric.name $sel }}
{{- end }}
{{- end }}

{{/* Multi-GPU pods (whole or dra GPUs, count > 1) with a topology key configured. */}}
{{- define "gpu-inference.topology.applies" -}}
{{- if and (gt (int .Values.gpu.count) 1) (has .Values.gpu.mode (list "whole" "dra")) (not (include "gpu-inference.gpu.isMig" .)) .Values.topology.key }}true{{- end }}
{{- end }}

{{/*
The pod's affinity: the chart's node requirements (GFD product, MIG strategy, sharing,
NVLink topology) ANDed into each of the user's required terms, preferred terms
concatenated, and pod anti-affinity per podAntiAffinity unless the user sets their own.
*/}}
{{- define "gpu-inference.affinity" -}}
{{- $v := .Values }}
{{- $exprs := list }}
{{- with $v.gpuProducts }}
{{- $exprs = append $exprs (dict "key" "nvidia.com/gpu.product" "operator" "In" "values" .) }}
{{- end }}
{{- if and (eq $v.gpu.mode "whole") (eq $v.gpu.resourceName "nvidia.com/gpu") }}
{{- /* A whole-GPU pod must not land where nvidia.com/gpu means a MIG slice (single strategy)
       or an unrenamed time-sliced/MPS replica. NotIn also matches nodes without GFD labels. */}}
{{- $exprs = append $exprs (dict "key" "nvidia.com/mig.strategy" "operator" "NotIn" "values" (list "single")) }}
{{- $exprs = append $exprs (dict "key" "nvidia.com/gpu.sharing-strategy" "operator" "NotIn" "values" (list "time-slicing" "mps")) }}
{{- end }}
{{- if eq $v.gpu.mode "mig" }}
{{- $exprs = append $exprs (dict "key" "nvidia.com/mig.strategy" "operator" "In" "values" (list $v.gpu.mig.strategy)) }}
{{- end }}
{{- if eq $v.gpu.mode "shared" }}
{{- if hasPrefix "nvidia.com/mig-" $v.gpu.shared.resourceName }}
{{- /* time-sliced MIG instances exist only under the mixed strategy (MPS does not support MIG) */}}
{{- $exprs = append $exprs (dict "key" "nvidia.com/mig.strategy" "operator" "In" "values" (list "mixed")) }}
{{- else }}
{{- $exprs = append $exprs (dict "key" "nvidia.com/gpu.sharing-strategy" "operator" "In" "values" (list "time-slicing" "mps")) }}
{{- end }}
{{- end }}
{{- $preferred := list }}
{{- if include "gpu-inference.topology.applies" . }}
{{- $exprs = append $exprs (dict "key" $v.topology.key "operator" "In" "values" $v.topology.values) }}
{{- with $v.topology.preferred }}
{{- $preferred = append $preferred (dict "weight" 100 "preference" (dict "matchExpressions" (list (dict "key" $v.topology.key "operator" "In" "values" .)))) }}
{{- end }}
{{- end }}
{{- $user := deepCopy ($v.affinity | default dict) }}
{{- $out := dict }}
{{- $na := dict }}
{{- $userNA := $user.nodeAffinity | default dict }}
{{- $userReq := $userNA.requiredDuringSchedulingIgnoredDuringExecution | default dict }}
{{- $terms := $userReq.nodeSelectorTerms | default list }}
{{- if $exprs }}
{{- if $terms }}
{{- $merged := list }}
{{- range $terms }}
{{- $t := deepCopy . }}
{{- $_ := set $t "matchExpressions" (concat ($t.matchExpressions | default list) $exprs) }}
{{- $merged = append $merged $t }}
{{- end }}
{{- $terms = $merged }}
{{- else }}
{{- $terms = list (dict "matchExpressions" $exprs) }}
{{- end }}
{{- end }}
{{- if $terms }}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" $terms) }}
{{- end }}
{{- $pref := concat $preferred ($userNA.preferredDuringSchedulingIgnoredDuringExecution | default list) }}
{{- if $pref }}
{{- $_ := set $na "preferredDuringSchedulingIgnoredDuringExecution" $pref }}
{{- end }}
{{- if $na }}{{- $_ := set $out "nodeAffinity" $na }}{{- end }}
{{- with $user.podAffinity }}{{- $_ := set $out "podAffinity" . }}{{- end }}
{{- if $user.podAntiAffinity }}
{{- $_ := set $out "podAntiAffinity" $user.podAntiAffinity }}
{{- else if ne $v.podAntiAffinity "none" }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "gpu-inference.selectorLabels" . | fromYaml)) }}
{{- if eq $v.podAntiAffinity "hard" }}
{{- $_ := set $out "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- else }}
{{- $_ := set $out "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- end }}
{{- if $out }}{{- toYaml $out }}{{- end }}
{{- end }}

{{/*
The model-hub token, only ever from an existing Secret: as a file (default; the
environment is visible in `kubectl describe` and to every child process) with
<envName>_PATH pointing at it (huggingface_hub reads HF_TOKEN_PATH), or as an env var.
*/}}
{{- define "gpu-inference.tokenEnv" -}}
{{- $t := .Values.model.token }}
{{- if $t.secretName }}
{{- if eq $t.mountAs "file" }}
- name: {{ printf "%s_PATH" $t.envName }}
  value: {{ printf "/var/run/secrets/model-token/%s" $t.secretKey | quote }}
{{- else }}
- name: {{ $t.envName }}
  valueFrom:
    secretKeyRef:
      name: {{ $t.secretName }}
      key: {{ $t.secretKey }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-inference.tokenMount" -}}
{{- if and .Values.model.token.secretName (eq .Values.model.token.mountAs "file") }}
- name: model-token
  mountPath: /var/run/secrets/model-token
  readOnly: true
{{- end }}
{{- end }}

{{/*
"true" when vLLM runs on a shared GPU without a memory fraction: vLLM preallocates 90% of
the GPU's memory by default, so the second pod on the GPU fails with CUDA out of memory.
NOTES.txt warns (a render failure would break callers that cannot know the replicas).
*/}}
{{- define "gpu-inference.sharedVllmWithoutFraction" -}}
{{- $g := .Values.gpu }}
{{- if and (eq $g.mode "shared") (eq .Values.server.type "vllm") (kindIs "invalid" $g.shared.memoryFraction) (not (regexMatch "--gpu-memory-utilization" (join " " (concat .Values.server.args .Values.extraArgs)))) }}true{{- end }}
{{- end }}

{{/* Bytes (as a decimal string) of a Kubernetes quantity with a unit the schema admits
(m, k, M, G, T, P, Ki, Mi, Gi, Ti, Pi; resource.Quantity's suffixes). */}}
{{- define "gpu-inference.quantityBytes" -}}
{{- $q := toString . }}
{{- $units := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 }}
{{- $num := regexFind "^[0-9.]+" $q }}
{{- mulf ($num | float64) (get $units (trimPrefix $num $q) | default 1.0) | printf "%.0f" }}
{{- end }}

{{/* sizeLimits of the chart's own scratch emptyDirs (disk-backed). */}}
{{- define "gpu-inference.scratchSizes" -}}
tmp: 1Gi
cache: 8Gi
{{- end }}

{{/* sizeLimits of the pod's disk-backed emptyDirs (model cache, /tmp, /cache, extraVolumes), as a YAML list. */}}
{{- define "gpu-inference.diskEmptyDirs" -}}
{{- $scratch := include "gpu-inference.scratchSizes" . | fromYaml }}
{{- $out := list $scratch.tmp $scratch.cache }}
{{- $src := .Values.model.source }}
{{- /* as templates/deployment.yaml's model volume: pvc and image are not emptyDirs */}}
{{- if eq $src "streamer" }}{{- $out = append $out "1Gi" }}
{{- else if not (has $src (list "pvc" "image")) }}{{- $out = append $out (include "gpu-inference.model.emptyDirSize" .) }}{{- end }}
{{- range .Values.extraVolumes }}
{{- if and .emptyDir (ne (toString .emptyDir.medium) "Memory") .emptyDir.sizeLimit }}{{- $out = append $out (toString .emptyDir.sizeLimit) }}{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
Which labels name the workload's pod on DCGM_* series: "exported" (exported_pod /
exported_namespace) when the exporter is scraped with honorLabels false, which the GPU
Operator's ServiceMonitor does and this chart's does with
platform.dcgmExporter.serviceMonitor.honorLabels=false; else "direct" (pod / namespace).
Args: dict root, explicit (a user setting: "direct" or "exported" wins over "auto").
*/}}
{{- define "gpu-inference.dcgmLabelStyle" -}}
{{- $p := .root.Values.platform }}
{{- if and .explicit (ne .explicit "auto") }}{{ .explicit }}
{{- else if or $p.gpuOperator (and $p.dcgmExporter.enabled (not $p.dcgmExporter.serviceMonitor.honorLabels)) }}exported
{{- else }}direct
{{- end }}
{{- end }}

{{/* The server container's cpu and memory that resources leaves out, as YAML {requests,
     limits}: requests resourceDefaults.*Base + *PerGpu x the pod's GPUs (gpu.count with whole
     GPUs or DRA, 1 for a MIG slice or a shared GPU), limits limitFactor x the request (the
     user's request when given). The fleet's rule (gpuvalues.fleet.spec Workload.pod_resources,
     whose numbers tests/chart/test_sizing.py holds equal to these). */}}
{{- define "gpu-inference.defaultResources" -}}
{{- $v := .Values }}
{{- $d := $v.resourceDefaults }}
{{- $gpus := ternary (int $v.gpu.count) 1 (has $v.gpu.mode (list "whole" "dra")) | float64 }}
{{- $req := $v.resources.requests | default dict }}
{{- $lim := $v.resources.limits | default dict }}
{{- $cpu := addf $d.cpuBase (mulf $d.cpuPerGpu $gpus) }}
{{- with (get $req "cpu") }}
{{- $q := toString . }}
{{- $cpu = ternary (divf (trimSuffix "m" $q | float64) 1000) ($q | float64) (hasSuffix "m" $q) }}
{{- end }}
{{- $mem := addf $d.memoryGiBBase (mulf $d.memoryGiBPerGpu $gpus) }}
{{- with (get $req "memory") }}
{{- $mem = divf (include "gpu-inference.quantityBytes" . | float64) 1073741824.0 }}
{{- end }}
{{- $lcpu := mulf $cpu $d.limitFactor }}
{{- $lmem := mulf $mem $d.limitFactor }}
requests:
  {{- if not (hasKey $req "cpu") }}
  cpu: {{ include "gpu-inference.cores" $cpu | quote }}
  {{- end }}
  {{- if not (hasKey $req "memory") }}
  memory: {{ include "gpu-inference.gib" $mem }}
  {{- end }}
limits:
  {{- if not (hasKey $lim "cpu") }}
  cpu: {{ include "gpu-inference.cores" $lcpu | quote }}
  {{- end }}
  {{- if not (hasKey $lim "memory") }}
  memory: {{ include "gpu-inference.gib" $lmem }}
  {{- end }}
{{- end }}

{{/* CPU cores as a quantity: whole cores as a number, else millicores rounded up. */}}
{{- define "gpu-inference.cores" -}}
{{- if eq (floor .) (float64 .) }}{{ printf "%.0f" (float64 .) }}{{ else }}{{ printf "%.0fm" (ceil (mulf . 1000)) }}{{ end }}
{{- end }}

{{/* GiB as a quantity: whole GiB as NGi, else MiB rounded up. */}}
{{- define "gpu-inference.gib" -}}
{{- if eq (floor .) (float64 .) }}{{ printf "%.0fGi" (float64 .) }}{{ else }}{{ printf "%.0fMi" (ceil (mulf . 1024)) }}{{ end }}
{{- end }}
