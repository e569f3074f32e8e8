{{- /* The pod spec of the workload's server pods: the Deployment's template, and the
       LeaderWorkerSet's leader and worker templates (leaderworkerset.yaml). Called with
       (dict "root" $ "role" R): R "" = a single-node replica (the Deployment), "leader" =
       the Ray head and vLLM's API server of a multi-node group, "worker" = a Ray worker
       that joins the leader (vLLM's LWS guide, docs.vllm.ai deployment/frameworks/lws; the
       LWS repo's docs/examples/vllm/GPU/lws.yaml at v0.9.0). */}}
{{- define "gpu-inference.podSpec" -}}
{{- $root := .root }}
{{- $role := .role }}
{{- with $root }}
{{- $v := .Values }}
{{- $srv := include "gpu-inference.server" . | fromYaml }}
{{- $fullname := include "gpu-inference.fullname" . }}
{{- $gpuRes := include "gpu-inference.gpu.resourceName" . }}
{{- $count := int $v.gpu.count }}
{{- $modelPath := printf "%s/%s" (trimSuffix "/" $v.model.mountPath) $v.model.name }}
serviceAccountName: {{ include "gpu-inference.serviceAccountName" . }}
automountServiceAccountToken: {{ $v.serviceAccount.automountToken }}
enableServiceLinks: false
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
terminationGracePeriodSeconds: {{ $v.server.terminationGracePeriodSeconds }}
{{- with $v.server.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (include "gpu-inference.affinity" .) }}
affinity:
  {{- . | nindent 2 }}
{{- end }}
tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
  {{- with $v.tolerations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- if $v.topologySpread.enabled }}
topologySpreadConstraints:
  {{- range $key := list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
  - maxSkew: {{ $v.topologySpread.maxSkew }}
    topologyKey: {{ $key }}
    whenUnsatisfiable: {{ $v.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "gpu-inference.selectorLabels" $root | nindent 8 }}
    matchLabelKeys:
      - pod-template-hash
  {{- end }}
{{- end }}
{{- if eq $v.gpu.mode "dra" }}
resourceClaims:
  - name: gpu
    resourceClaimTemplateName: {{ $fullname }}-gpu
{{- end }}
{{- $fillJob := and (eq $v.model.source "pvc") $v.model.pvc.create }}
{{- if or (eq $v.model.source "init") $fillJob $v.initContainers }}
initContainers:
{{- end }}
{{- if eq $v.model.source "init" }}
  - name: fetch-model
    image: {{ include "gpu-inference.imageRef" $v.model.init.image | quote }}
    imagePullPolicy: {{ $v.server.image.pullPolicy }}
    {{- with $v.model.init.command }}
    command:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $v.model.init.args }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    env:
      - name: MODEL_DIR
        value: {{ $v.model.mountPath | quote }}
      - name: MODEL_NAME
        value: {{ $v.model.name | quote }}
      - name: HOME
        value: /tmp
      {{- with (include "gpu-inference.tokenEnv" . | trim) }}{{ . | nindent 6 }}{{- end }}
    resources:
      requests:
        cpu: "1"
        memory: 2Gi
        ephemeral-storage: 256Mi
      limits:
        cpu: "2"
        memory: 4Gi
        ephemeral-storage: 512Mi
    securityContext:
      {{- toYaml $v.containerSecurityContext | nindent 6 }}
    volumeMounts:
      - name: model
        mountPath: {{ $v.model.mountPath }}
      - name: tmp
        mountPath: /tmp
      {{- with (include "gpu-inference.tokenMount" . | trim) }}{{ . | nindent 6 }}{{- end }}
{{- end }}
{{- if $fillJob }}
{{- /* Hold the server until the fill Job (model-fill-job.yaml) wrote its marker. */}}
  - name: wait-model
    image: {{ include "gpu-inference.imageRef" $v.model.init.image | quote }}
    imagePullPolicy: {{ $v.server.image.pullPolicy }}
    {{- /* The path reaches the script as an env var, never as text of it: a value pasted
           into the script would be shell code. `$$` is the kubelet's escape for `$`. */}}
    command: ["sh", "-c", 'until [ -f "$MODEL_DIR/.gpu-inference-complete" ]; do echo waiting for the model cache; sleep 10; done']
    env:
      - name: MODEL_DIR
        value: {{ $modelPath | replace "$" "$$" | quote }}
    resources:
      requests:
        cpu: 10m
        memory: 16Mi
        ephemeral-storage: 16Mi
      limits:
        cpu: 100m
        memory: 64Mi
        ephemeral-storage: 64Mi
    securityContext:
      {{- toYaml $v.containerSecurityContext | nindent 6 }}
    volumeMounts:
      - name: model
        mountPath: {{ $v.model.mountPath }}
        readOnly: true
{{- end }}
{{- with $v.initContainers }}
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: server
    image: {{ $srv.image | quote }}
    imagePullPolicy: {{ $v.server.image.pullPolicy }}
    {{- $rayPort := int $v.multiNode.rayPort }}
    {{- $script := "/vllm-workspace/examples/online_serving/multi-node-serving.sh" }}
    {{- if eq $role "leader" }}
    {{- /* The Ray head, blocking until the group's LWS_GROUP_SIZE pods joined, then vLLM's
           API server with the args below ("$@": never pasted into the script). The LWS
           pod webhook sets LWS_GROUP_SIZE / LWS_LEADER_ADDRESS (api/leaderworkerset/v1). */}}
    command: ["sh", "-c", {{ printf "bash %s leader --ray_cluster_size=\"$LWS_GROUP_SIZE\" --ray_port=%d && exec python3 -m vllm.entrypoints.openai.api_server \"$@\"" $script $rayPort | quote }}, "vllm-leader"]
    {{- else if eq $role "worker" }}
    command: ["sh", "-c", {{ printf "exec bash %s worker --ray_address=\"$LWS_LEADER_ADDRESS\" --ray_port=%d" $script $rayPort | quote }}]
    {{- else if eq $v.server.type "triton" }}
    command: ["tritonserver"]
    {{- else }}
    {{- with $v.server.command }}
    command:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- end }}
    {{- if ne $role "worker" }}
    args:
      {{- if eq $v.server.type "vllm" }}
      {{- if has $v.model.source (list "emptyDir" "download") }}
      - {{ printf "--model=%s" $v.model.name | quote }}
      - {{ printf "--download-dir=%s" $v.model.mountPath | quote }}
      {{- else if eq $v.model.source "streamer" }}
      {{- /* vllm/config/load.py (0.33.0): runai_streamer streams safetensors from object storage */}}
      - {{ printf "--model=%s" $v.model.streamer.uri | quote }}
      - {{ printf "--served-model-name=%s" $v.model.name | quote }}
      - --load-format=runai_streamer
      {{- with $v.model.streamer.concurrency }}
      - {{ printf "--model-loader-extra-config={\"concurrency\":%d}" (int .) | quote }}
      {{- end }}
      {{- else }}
      - {{ printf "--model=%s" $modelPath | quote }}
      - {{ printf "--served-model-name=%s" $v.model.name | quote }}
      {{- end }}
      - --host=0.0.0.0
      - --port={{ $v.server.ports.http }}
      {{- if and (gt $count 1) (has $v.gpu.mode (list "whole" "dra")) }}
      - --tensor-parallel-size={{ $count }}
      {{- end }}
      {{- if eq $role "leader" }}
      {{- /* tensor parallel inside a node, pipeline parallel across the group's nodes
             (docs.vllm.ai serving/parallelism_scaling.md) */}}
      - --pipeline-parallel-size={{ int $v.multiNode.nodes }}
      - --distributed-executor-backend=ray
      {{- end }}
      {{- if and (eq $v.gpu.mode "shared") (not (kindIs "invalid" $v.gpu.shared.memoryFraction)) }}
      - --gpu-memory-utilization={{ $v.gpu.shared.memoryFraction }}
      {{- end }}
      {{- with (include "gpu-inference.lora.args" . | trim) }}{{ . | nindent 6 }}{{- end }}
      {{- else if eq $v.server.type "triton" }}
      - {{ printf "--model-repository=%s" $v.model.mountPath | quote }}
      - --http-port={{ $v.server.ports.http }}
      {{- if gt (int $v.server.ports.grpc) 0 }}
      - --grpc-port={{ $v.server.ports.grpc }}
      {{- else }}
      - --allow-grpc=false
      {{- end }}
      - --metrics-port={{ $v.server.ports.metrics }}
      - --strict-readiness=true
      {{- end }}
      {{- range (concat $v.server.args $v.extraArgs) }}
      - {{ . | quote }}
      {{- end }}
    {{- end }}
    env:
      - name: HOME
        value: /tmp
      - name: XDG_CACHE_HOME
        value: /cache
      - name: HF_HOME
        value: /cache/huggingface
      {{- with (include "gpu-inference.tokenEnv" . | trim) }}{{ . | nindent 6 }}{{- end }}
      {{- with (include "gpu-inference.serving.env" . | trim) }}{{ . | nindent 6 }}{{- end }}
      {{- with (concat $v.server.env $v.extraEnv) }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- $streamer := and (eq $v.model.source "streamer") $v.model.streamer.secretName }}
    {{- if or $streamer $v.extraEnvFrom }}
    envFrom:
      {{- if $streamer }}
      - secretRef:
          name: {{ $v.model.streamer.secretName }}
      {{- end }}
      {{- with $v.extraEnvFrom }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- end }}
    {{- if eq $role "worker" }}
    {{- /* A worker serves no HTTP: it is ready once it joined the leader's Ray cluster; the
           group is ready when every pod is (LWS status.readyReplicas), and the leader's
           /health answers only once every pipeline stage loaded. */}}
    readinessProbe:
      exec:
        command: ["sh", "-c", {{ printf "ray status --address=\"$LWS_LEADER_ADDRESS:%d\" >/dev/null" $rayPort | quote }}]
      periodSeconds: {{ $v.probes.readiness.periodSeconds }}
      timeoutSeconds: {{ max (int $v.probes.readiness.timeoutSeconds) 10 }}
      failureThreshold: {{ $v.probes.readiness.failureThreshold }}
    {{- else }}
    ports:
      - name: http
        containerPort: {{ $v.server.ports.http }}
        protocol: TCP
      {{- if and (eq $v.server.type "triton") (gt (int $v.server.ports.grpc) 0) }}
      - name: grpc
        containerPort: {{ $v.server.ports.grpc }}
        protocol: TCP
      {{- end }}
      {{- if eq $srv.metricsPortName "metrics" }}
      - name: metrics
        containerPort: {{ $srv.metricsPort }}
        protocol: TCP
      {{- end }}
    {{- /* startupProbe: failureThreshold x periodSeconds >= modelLoadTimeoutSeconds */}}
    {{- $sp := int $v.probes.startup.periodSeconds }}
    startupProbe:
      httpGet:
        path: {{ $srv.startup }}
        port: http
      periodSeconds: {{ $sp }}
      timeoutSeconds: {{ $v.probes.startup.timeoutSeconds }}
      failureThreshold: {{ div (add (int $v.server.modelLoadTimeoutSeconds) (sub $sp 1)) $sp }}
    livenessProbe:
      httpGet:
        path: {{ $srv.liveness }}
        port: http
      periodSeconds: {{ $v.probes.liveness.periodSeconds }}
      timeoutSeconds: {{ $v.probes.liveness.timeoutSeconds }}
      failureThreshold: {{ $v.probes.liveness.failureThreshold }}
    readinessProbe:
      httpGet:
        path: {{ $srv.readiness }}
        port: http
      periodSeconds: {{ $v.probes.readiness.periodSeconds }}
      timeoutSeconds: {{ $v.probes.readiness.timeoutSeconds }}
      failureThreshold: {{ $v.probes.readiness.failureThreshold }}
    lifecycle:
      preStop:
        {{- /* Keep serving while endpoints drop the pod; the sleep action is on by default from 1.30. */}}
        {{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version }}
        sleep:
          seconds: {{ $v.server.preStopSleepSeconds }}
        {{- else }}
        exec:
          command: ["sleep", "{{ $v.server.preStopSleepSeconds }}"]
        {{- end }}
    {{- end }}
    resources:
      {{- $dflt := include "gpu-inference.defaultResources" . | fromYaml }}
      {{- /* cpu and memory the user leaves out scale with the pod's GPUs; given ones win */}}
      {{- $requests := merge (deepCopy ($v.resources.requests | default dict)) ($dflt.requests | default dict) }}
      {{- $limits := merge (deepCopy ($v.resources.limits | default dict)) ($dflt.limits | default dict) }}
      {{- /* The kubelet evicts the pod once its disk-backed emptyDirs plus the containers'
             own writes exceed the sum of its limits (the model download lands in an
             emptyDir), so resources.limits.ephemeral-storage is the server's own budget and
             the chart adds every disk-backed emptyDir of the pod to it. */}}
      {{- with (get $limits "ephemeral-storage") }}
      {{- $bytes := include "gpu-inference.quantityBytes" . | float64 }}
      {{- range (include "gpu-inference.diskEmptyDirs" $root | fromYamlArray) }}
      {{- $bytes = addf $bytes (include "gpu-inference.quantityBytes" . | float64) }}
      {{- end }}
      {{- $mi := divf $bytes 1048576 | ceil | int64 }}
      {{- $_ := set $limits "ephemeral-storage" (ternary (printf "%dGi" (div $mi 1024)) (printf "%dMi" $mi) (eq (mod $mi 1024) 0)) }}
      {{- end }}
      {{- if ne $v.gpu.mode "dra" }}
      {{- /* GPUs in limits only; a request (if given) was checked to equal it. */}}
      {{- $_ := set $limits $gpuRes $count }}
      {{- end }}
      {{- with include "gpu-inference.model.ephemeralGi" . }}
      {{- /* With the model's size known, the request reserves the disk the download needs
             (the limit above already covers it). */}}
      {{- $need := printf "%sGi" . }}
      {{- range $m := list $requests }}
      {{- $cur := toString (index $m "ephemeral-storage" | default "0") }}
      {{- if or (not (hasSuffix "Gi" $cur)) (lt (trimSuffix "Gi" $cur | int) ($need | trimSuffix "Gi" | int)) }}
      {{- $_ := set $m "ephemeral-storage" $need }}
      {{- end }}
      {{- end }}
      {{- end }}
      {{- with $requests }}
      requests:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      limits:
        {{- toYaml $limits | nindent 8 }}
      {{- if eq $v.gpu.mode "dra" }}
      claims:
        - name: gpu
      {{- end }}
    securityContext:
      {{- toYaml $v.containerSecurityContext | nindent 6 }}
    volumeMounts:
      - name: model
        mountPath: {{ $v.model.mountPath }}
        {{- if eq $v.model.source "image" }}
        readOnly: true
        {{- else if eq $v.model.source "pvc" }}
        readOnly: {{ $v.model.pvc.readOnly }}
        {{- with $v.model.pvc.subPath }}
        subPath: {{ . }}
        {{- end }}
        {{- end }}
      - name: tmp
        mountPath: /tmp
      - name: cache
        mountPath: /cache
      - name: shm
        mountPath: /dev/shm
      {{- with (include "gpu-inference.tokenMount" . | trim) }}{{ . | nindent 6 }}{{- end }}
      {{- with $v.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  {{- with $v.sidecars }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
volumes:
  - name: model
    {{- if eq $v.model.source "pvc" }}
    persistentVolumeClaim:
      claimName: {{ include "gpu-inference.model.claimName" . }}
      readOnly: {{ $v.model.pvc.readOnly }}
    {{- else if eq $v.model.source "image" }}
    {{- /* OCI image volume (KEP-4639): read-only, pulled by the kubelet like an image */}}
    image:
      reference: {{ $v.model.image.reference | quote }}
      pullPolicy: {{ $v.model.image.pullPolicy }}
    {{- else if eq $v.model.source "streamer" }}
    {{- /* weights stream into GPU memory; nothing is written here */}}
    emptyDir:
      sizeLimit: 1Gi
    {{- else }}
    emptyDir:
      sizeLimit: {{ include "gpu-inference.model.emptyDirSize" . }}
    {{- end }}
  {{- $scratch := include "gpu-inference.scratchSizes" . | fromYaml }}
  - name: tmp
    emptyDir:
      sizeLimit: {{ $scratch.tmp }}
  - name: cache
    emptyDir:
      sizeLimit: {{ $scratch.cache }}
  - name: shm
    emptyDir:
      medium: Memory
      sizeLimit: {{ $v.shmSizeLimit }}
  {{- if and $v.model.token.secretName (eq $v.model.token.mountAs "file") }}
  - name: model-token
    secret:
      secretName: {{ $v.model.token.secretName }}
      defaultMode: 0440
      items:
        - key: {{ $v.model.token.secretKey }}
          path: {{ $v.model.token.secretKey }}
  {{- end }}
  {{- with $v.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{- /* "true" when a replica spans nodes: the workload is a LeaderWorkerSet (multiNode.nodes > 1). */}}
{{- define "gpu-inference.multiNode" -}}
{{- if gt (int .Values.multiNode.nodes) 1 }}true{{- end }}
{{- end }}

{{- /* The scale target of the HPA / ScaledObject: the Deployment, or the LeaderWorkerSet
       through its scale subresource (specpath .spec.replicas, selectorpath
       .status.hpaPodSelector: the leaders; api/leaderworkerset/v1 at v0.9.0). */}}
{{- define "gpu-inference.scaleTargetRef" -}}
{{- if include "gpu-inference.multiNode" . -}}
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
{{- else -}}
apiVersion: apps/v1
kind: Deployment
{{- end }}
name: {{ include "gpu-inference.fullname" . }}
{{- end }}

{{- /* The pod label that tells a group's leader (the one pod serving HTTP) from its workers. */}}
{{- define "gpu-inference.roleLabel" -}}
gpu-inference.io/role
{{- end }}
