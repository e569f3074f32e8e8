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
Per server type defaults: image, probe paths, metrics port and path. Returned as YAML
(consume with fromYaml). Images are pinned tags, never `latest`.
  vllm:   vllm/vllm-openai, /health (liveness, startup), /v1/models (readiness: the model
          is loaded and served), metrics at /metrics on the http port.
  triton: nvcr.io/nvidia/tritonserver, /v2/health/live, /v2/health/ready (KServe v2),
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
{{- $envNames := list }}{{- range $s.env }}{{- $envNames = append $envNames .name }}{{- end }}
{{- if or (regexMatch "--api-key" (join " " $s.args)) (has "VLLM_API_KEY" $envNames) }}{{- $ready = "/health" }}{{- end }}
{{- $d = dict "repository" "vllm/vllm-openai" "tag" "v0.11.0" "liveness" "/health" "readiness" $ready "startup" "/health" "metricsPath" "/metrics" "metricsPort" $s.ports.http "metricsPortName" "http" }}
{{- else if eq $t "triton" }}
{{- $d = dict "repository" "nvcr.io/nvidia/tritonserver" "tag" "25.01-py3" "liveness" "/v2/health/live" "readiness" "/v2/health/ready" "startup" "/v2/health/ready" "metricsPath" "/metrics" "metricsPort" $s.ports.metrics "metricsPortName" "metrics" }}
{{- else }}
{{- $mport := $s.ports.http }}
{{- $mname := "http" }}
{{- if gt (int $s.ports.metrics) 0 }}{{- $mport = $s.ports.metrics }}{{- $mname = "metrics" }}{{- end }}
{{- $d = dict "repository" "" "tag" "" "liveness" $s.custom.livenessPath "readiness" $s.custom.readinessPath "startup" (default $s.custom.readinessPath $s.custom.startupPath) "metricsPath" $s.custom.metricsPath "metricsPort" $mport "metricsPortName" $mname }}
{{- end }}
{{- with $.Values.probes.liveness.path }}{{- $_ := set $d "liveness" . }}{{- end }}
{{- with $.Values.probes.readiness.path }}{{- $_ := set $d "readiness" . }}{{- end }}
{{- $_ := set $d "image" (include "gpu-inference.imageRef" (dict "repository" (default $d.repository $s.image.repository) "tag" (default $d.tag $s.image.tag) "digest" $s.image.digest)) }}
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
Defaults when autoscaling.metrics is empty (same rules as gpuvalues.autoscaling):
  whole (and dra gpu.nvidia.com): DCGM_FI_DEV_GPU_UTIL "70"   (0-100)
  mig   (and dra mig.nvidia.com): DCGM_FI_PROF_GR_ENGINE_ACTIVE "700m" (0-1 ratio; GPU_UTIL
                                  is not reported per MIG instance)
  shared: a GPU metric cannot be attributed per pod, so the server's own queue metric:
          vllm -> vllm:num_requests_waiting "5"; triton -> nv_inference_queue_duration_us
          "50000" (mean queue time per request, µs); custom -> must be set explicitly.
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
{{- else }}
{{- fail "autoscaling.metrics: gpu.mode=shared cannot scale on GPU metrics (time-sliced/MPS replicas are not attributed per pod) and a custom server has no default queue metric: set autoscaling.metrics to your server's load metric, e.g. [{name: my_queue_depth, target: \"5\"}], or autoscaling.engine=none" }}
{{- end }}
{{- else if include "gpu-inference.gpu.isMig" . }}
{{- $ms = list (dict "name" "DCGM_FI_PROF_GR_ENGINE_ACTIVE" "target" "700m") }}
{{- else }}
{{- $ms = list (dict "name" "DCGM_FI_DEV_GPU_UTIL" "target" "70") }}
{{- end }}
{{- end }}
{{- range $ms }}
{{- if and (eq $.Values.gpu.mode "shared") (hasPrefix "DCGM_" .name) }}
{{- fail (printf "autoscaling.metrics: %s is a GPU metric, but gpu.mode=shared: time-sliced/MPS replicas share one device, so dcgm-exporter cannot attribute it per pod; scale on the server's queue metric instead (vllm:num_requests_waiting, nv_inference_queue_duration_us)" .name) }}
{{- end }}
{{- if and (include "gpu-inference.gpu.isMig" $) (eq .name "DCGM_FI_DEV_GPU_UTIL") }}
{{- fail "autoscaling.metrics: DCGM_FI_DEV_GPU_UTIL is not reported per MIG instance (NVIDIA/DCGM#80); use DCGM_FI_PROF_GR_ENGINE_ACTIVE with a ratio target such as \"700m\"" }}
{{- end }}
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
{{- if hasPrefix "DCGM_" .metric.name }}{{- $podL = $k.podLabel }}{{- $nsL = $k.namespaceLabel }}{{- end }}
{{- $sel := printf "%s=%q,%s=~%q" $nsL $root.Release.Namespace $podL (printf "%s-[a-z0-9]+-[a-z0-9]+" (include "gpu-inference.fullname" $root)) }}
{{- if eq .metric.name "nv_inference_queue_duration_us" }}
{{- printf "sum(sum by (%s) (rate(nv_inference_queue_duration_us{%s}[1m])) / clamp_min(sum by (%s) (rate(nv_inference_request_success{%s}[1m])), 1e-9))" $podL $sel $podL $sel }}
{{- else }}
{{- printf "sum(avg by (%s) (%s{%s}))" $podL .metric.name $sel }}
{{- end }}
{{- end }}

{{/*
Render-time checks that JSON Schema cannot express (cross-field rules). Each message says
what to change. Included once, from the Deployment.
*/}}
{{- define "gpu-inference.validate" -}}
{{- $v := .Values }}
{{- $g := $v.gpu }}
{{- $a := $v.autoscaling }}
{{- /* DRA needs resource.k8s.io/v1, GA in Kubernetes 1.34 */ -}}
{{- if and (eq $g.mode "dra") (semverCompare "<1.34.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "gpu.mode=dra needs Kubernetes >= 1.34 (resource.k8s.io/v1 ResourceClaimTemplate), but the target cluster is %s: use gpu.mode=whole or mig, or upgrade the cluster" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if and (eq $g.mode "dra") (eq $g.dra.deviceClassName "mig.nvidia.com") (not $g.dra.migProfile) }}
{{- fail "gpu.dra.migProfile: deviceClassName mig.nvidia.com needs a MIG profile (e.g. 1g.10gb) for the CEL selector" }}
{{- end }}
{{- if and (eq $g.mode "shared") $g.shared.failRequestsGreaterThanOne (gt (int $g.count) 1) }}
{{- fail (printf "gpu.count=%d with gpu.mode=shared: the device plugin rejects shared requests > 1 when failRequestsGreaterThanOne is true (the MPS default); use gpu.count=1, or set gpu.shared.failRequestsGreaterThanOne=false only if your device plugin config does" (int $g.count)) }}
{{- end }}
{{- if and (eq $g.mode "shared") (eq $v.server.type "vllm") (not (kindIs "invalid" $g.shared.memoryFraction)) (regexMatch "--gpu-memory-utilization" (join " " $v.server.args)) }}
{{- fail "gpu.shared.memoryFraction and a --gpu-memory-utilization in server.args: set only one" }}
{{- end }}
{{- /* GPUs in limits only: requests, if present, must equal the limit */ -}}
{{- $res := include "gpu-inference.gpu.resourceName" . }}
{{- range $k, $val := ($v.resources.requests | default dict) }}
{{- if or (hasPrefix "nvidia.com/" $k) (hasPrefix "gpu.nvidia.com" $k) }}
{{- if eq $g.mode "dra" }}
{{- fail (printf "resources.requests.%s: with gpu.mode=dra the GPUs come from the ResourceClaim; remove GPU keys from resources" $k) }}
{{- end }}
{{- if ne $k $res }}
{{- fail (printf "resources.requests.%s: the pod's GPU resource is %s (from gpu.mode=%s); remove %s" $k $res $g.mode $k) }}
{{- end }}
{{- if ne (toString $val) (toString (int $g.count)) }}
{{- fail (printf "resources.requests.%s=%v but the GPU limit is %d (gpu.count): GPU requests must equal limits; remove the request (it defaults to the limit) or make it equal" $k $val (int $g.count)) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Replicas and autoscaling */ -}}
{{- if and (ne $a.engine "none") (gt (int $a.minReplicas) (int $a.maxReplicas)) }}
{{- fail (printf "autoscaling.minReplicas (%d) is greater than autoscaling.maxReplicas (%d): lower minReplicas or raise maxReplicas" (int $a.minReplicas) (int $a.maxReplicas)) }}
{{- end }}
{{- if and (eq $a.engine "keda") $a.keda.fallback (gt (int $a.keda.fallback.replicas) (int $a.maxReplicas)) }}
{{- fail (printf "autoscaling.keda.fallback.replicas (%d) exceeds autoscaling.maxReplicas (%d)" (int $a.keda.fallback.replicas) (int $a.maxReplicas)) }}
{{- end }}
{{- $_ := include "gpu-inference.autoscaling.metrics" . }}
{{- /* PDB must leave at least one pod evictable, or node drains block forever */ -}}
{{- if $v.pdb.enabled }}
{{- $min := include "gpu-inference.minReplicas" . | int }}
{{- if not (kindIs "invalid" $v.pdb.minAvailable) }}
{{- $ma := toString $v.pdb.minAvailable }}
{{- $need := 0 }}
{{- if hasSuffix "%" $ma }}
{{- $pct := trimSuffix "%" $ma | int }}
{{- $need = div (add (mul $pct $min) 99) 100 | int }}
{{- else }}
{{- $need = $ma | int }}
{{- end }}
{{- if ge $need $min }}
{{- fail (printf "pdb.minAvailable=%s with %d replica(s) (the minimum) leaves no pod evictable, so it would block every node drain: use pdb.maxUnavailable=1 (set pdb.minAvailable=null) or raise the minimum replicas" $ma $min) }}
{{- end }}
{{- else }}
{{- $mu := toString (default 0 $v.pdb.maxUnavailable) }}
{{- if or (eq $mu "0") (eq $mu "0%") }}
{{- fail "pdb.maxUnavailable=0 would block every node drain: use pdb.maxUnavailable=1" }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Probes and termination */ -}}
{{- if le (int $v.server.terminationGracePeriodSeconds) (int $v.server.preStopSleepSeconds) }}
{{- fail (printf "server.terminationGracePeriodSeconds (%d) must exceed server.preStopSleepSeconds (%d), or the server is killed before it drains" (int $v.server.terminationGracePeriodSeconds) (int $v.server.preStopSleepSeconds)) }}
{{- end }}
{{- $probeSrv := include "gpu-inference.server" . | fromYaml }}
{{- $l := $v.probes.liveness }}
{{- $r := $v.probes.readiness }}
{{- if and (eq $probeSrv.liveness $probeSrv.readiness) (eq (int $l.periodSeconds) (int $r.periodSeconds)) (eq (int $l.timeoutSeconds) (int $r.timeoutSeconds)) (eq (int $l.failureThreshold) (int $r.failureThreshold)) }}
{{- fail (printf "probes: liveness and readiness would be identical (%s, same timing): a failing readiness check would then also restart the pod; use a readiness path that proves the model is served, or different timing" $probeSrv.liveness) }}
{{- end }}
{{- if and (eq $v.server.type "custom") (eq $v.server.custom.livenessPath $v.server.custom.readinessPath) }}
{{- fail "server.custom.readinessPath must differ from livenessPath: readiness gates traffic (model loaded), liveness only restarts a hung process" }}
{{- end }}
{{- if and (eq $v.server.type "custom") (not $v.server.image.repository) }}
{{- fail "server.image.repository (and a pinned server.image.tag or digest) is required for server.type=custom" }}
{{- end }}
{{- if and (eq $v.server.type "custom") (not $v.server.image.tag) (not $v.server.image.digest) }}
{{- fail "server.image.tag or server.image.digest is required for server.type=custom (no implicit latest)" }}
{{- end }}
{{- range $what, $img := dict "server.image" $v.server.image "model.init.image" $v.model.init.image "helmTest.image" $v.helmTest.image }}
{{- if eq (toString $img.tag) "latest" }}
{{- fail (printf "%s.tag: latest is not allowed (it changes under you and breaks rollbacks): pin a version tag, or set %s.digest" $what $what) }}
{{- end }}
{{- end }}
{{- /* Model source */ -}}
{{- if and (eq $v.model.source "pvc") (not $v.model.pvc.claimName) (not $v.model.pvc.create) }}
{{- fail "model.pvc.claimName: model.source=pvc needs the name of an existing PersistentVolumeClaim (or model.pvc.create=true for a cache the chart fills)" }}
{{- end }}
{{- if and (eq $v.model.source "init") (not $v.model.init.command) (not $v.model.init.args) }}
{{- fail "model.init.command: model.source=init needs a command that writes the model under model.mountPath" }}
{{- end }}
{{- range $v.server.env }}
{{- if and (hasKey . "value") (regexMatch "(?i)(TOKEN|SECRET|PASSWORD|API_?KEY)" .name) }}
{{- fail (printf "server.env %s: a literal credential in values ends up in the release Secret and in `helm get values`; reference an existing Secret (model.token.secretName, or valueFrom.secretKeyRef)" .name) }}
{{- end }}
{{- end }}
{{- /* Topology: multi-GPU pods need a node whose NVLink group fits them */ -}}
{{- if and (include "gpu-inference.topology.applies" .) (not $v.topology.values) }}
{{- fail (printf "topology.values: a pod with gpu.count=%d needs a required node affinity on %s; set topology.values to the label values whose NVLink group fits %d GPUs (`gpuvalues topo` computes them), or set topology.key=\"\" to place without it" (int $g.count) $v.topology.key (int $g.count)) }}
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
{{- if and (eq $g.mode "shared") (eq .Values.server.type "vllm") (kindIs "invalid" $g.shared.memoryFraction) (not (regexMatch "--gpu-memory-utilization" (join " " .Values.server.args))) }}true{{- end }}
{{- end }}
