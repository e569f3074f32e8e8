"""Releases: the chart values of every release of a fleet.

One platform release (`workload.enabled: false`) installs the GPU platform once: the
device plugin with every node group's named config, GFD, the DCGM exporter, the GPU
alert groups, and one Prometheus adapter whose rules serve every workload's scaling
metrics. Each workload gets a release of its own (its name, its namespace) that renders
only the inference workload and its alerts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from gpuvalues.yamlio.writer import dump
from gpuvalues.errors import Finding, SpecError
from gpuvalues.fleet import producers, routing, sizing
from gpuvalues.fleet.layout import DEFAULT_DEVICE_PLUGIN_CONFIG, Layout
from gpuvalues.fleet.placement import Placement, spec_error
from gpuvalues.fleet.spec import DEFAULT_DTYPE, DTYPE_BYTES, Spec
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.scheduling import topology
from gpuvalues.yamlio.loader import format_path

__all__ = ["Release", "platform_release", "workload_release", "split_image", "gpu_operator_release",
           "GPU_OPERATOR_CHART", "GPU_OPERATOR_VERSION"]

# The NVIDIA GPU Operator's Helm chart, at the version whose values and ClusterPolicy CRD
# tests/chart/test_gpu_operator.py checks (tests/chart/data/gpu-operator-v26.7.0).
GPU_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_CHART = "nvidia/gpu-operator"
GPU_OPERATOR_VERSION = "v26.7.0"
# The ConfigMaps the operator chart creates from our values (devicePlugin.config,
# migManager.config: templates/plugin_config.yaml, mig_config.yaml).
OPERATOR_DEVICE_PLUGIN_CONFIGMAP = "gpu-inference-device-plugin-configs"
OPERATOR_MIG_CONFIGMAP = "gpu-inference-mig-parted-config"
# mig-manager's config for MIG-capable nodes without nvidia.com/mig.config (the operator's
# values.yaml migManager.config.default); it must be a config of the ConfigMap.
ALL_DISABLED = "all-disabled"


@dataclass(frozen=True)
class Release:
    """One helm release of the fleet: `values` for the chart, installed as `name` in
    `namespace`. `workload` is None for the platform release. `decisions` say why each
    choice was made; `facts` are what the semantic checks need to know about its nodes."""

    name: str
    namespace: str
    values: Mapping[str, Any]
    workload: str | None = None
    decisions: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_platform(self) -> bool:
        """True for the release that installs the GPU platform."""
        return self.workload is None


def split_image(image: str) -> tuple[str, str, str]:
    """`repo:tag@sha256:...` -> (repo, tag, digest); the schema checked the syntax."""
    digest = ""
    if "@" in image:
        image, digest = image.split("@", 1)
    repo, tag = image, ""
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        repo, tag = image[:colon], image[colon + 1:]
    return repo, tag, digest


def _pool_topology(spec: Spec, placement: Placement, layout: Layout) -> tuple[str | None, int | None]:
    """(topology label value, NVLink group size) of the workload's pool, None if unknown."""
    for g in layout.groups_of(placement.pool.name):
        value = g.labels.get(topology.DEFAULT_TOPOLOGY_KEY)
        if value:
            return value, topology.nvlink_size(value) or 1
    return None, None


class Warn(Protocol):
    """Records a warning at a spec path (`build_fleet`'s `warn`)."""

    def __call__(self, code: str, message: str, *path: Any) -> None: ...


def workload_release(spec: Spec, wi: int, placement: Placement, layout: Layout,
                     warn: Warn) -> Release:
    """The release of workload `wi`. `warn(code, message, *spec_path)` records warnings;
    a problem that makes the values impossible raises a placed `GpuValuesError`."""
    w = spec.workloads[wi]
    gpu = placement.gpu
    pool = placement.pool
    decisions = [f"{w.name}: pool {pool.name} ({pool.nodes} x {pool.gpus_per_node} "
                 f"{gpu.name}); {placement.why}"]
    if placement.mode == "dra" and spec.kube_minor < 34:
        at: tuple[str | int, ...] = ("kubernetesVersion",)
        if spec.loaded is None or at not in spec.loaded.positions:
            at = ("workloads", wi)
        raise spec_error(SpecError, f"sharing dra needs Kubernetes >= 1.34 (resource.k8s.io/v1); "
                         f"the spec targets {spec.kubernetes_version}", spec, *at, code="GV009")

    server: dict[str, Any] = {"type": w.server}
    if w.image:
        repo, tag, digest = split_image(w.image)
        server["image"] = {"repository": repo, "tag": tag, "digest": digest}
    if w.model_load_timeout_seconds:
        server["modelLoadTimeoutSeconds"] = w.model_load_timeout_seconds
    gpu_values: dict[str, Any] = {"mode": placement.mode, "count": placement.count}
    if placement.mode == "mig":
        gpu_values["mig"] = {"strategy": spec.sharing_for(w).mig_strategy,
                             "profile": placement.mig_profile}
    if placement.mode == "shared":
        gpu_values["shared"] = {"resourceName": placement.resource}
        if w.server == "vllm" and placement.replicas_per_gpu:   # shared placements have replicas
            # vLLM pre-allocates --gpu-memory-utilization (default 0.9) of the whole GPU;
            # with time-slicing or MPS every replica on the GPU would, and all but one OOM.
            gpu_values["shared"]["memoryFraction"] = math.floor(90 / placement.replicas_per_gpu) / 100
    model = _model_values(spec, wi)
    values: dict[str, Any] = {"server": server, "model": model, "gpu": gpu_values}
    if w.weights_gb and not w.model_size_gb:
        decisions.append(f"{w.name}: weights {w.weights_gb:g} GB ({w.parameters_b:g}B parameters "
                         f"x {DTYPE_BYTES[w.dtype or DEFAULT_DTYPE]:g} bytes, {w.dtype or DEFAULT_DTYPE}) "
                         "size the model volume and ephemeral storage")
    src = w.model_source
    if src is not None and src.token_secret:
        decisions.append(f"{w.name}: the Hub token comes from Secret {src.token_secret} (key "
                         f"{src.token_key}) in namespace {w.namespace}: create it before the install")
    # Host CPU and memory grow with the pod's GPUs (one vLLM worker process per GPU).
    values["resources"] = w.pod_resources(placement.count if placement.whole_gpus else 1)
    if w.lora:
        # --max-loras follows the adapters in the chart (lora.maxLoras: null)
        values["lora"] = {"adapters": [{"name": n, "source": s} for n, s in w.lora]}
    if spec.gateway and w.server == "vllm":
        ref = {"name": spec.gateway.name}
        if spec.gateway.namespace:
            ref["namespace"] = spec.gateway.namespace
        if spec.gateway.section_name:
            ref["sectionName"] = spec.gateway.section_name
        values["gateway"] = {"enabled": True, "parentRefs": [ref]}
        names = routing.model_names(w.model, (n for n, _ in w.lora))
        gw = f"{spec.gateway.namespace or w.namespace}/{spec.gateway.name}"
        decisions.append(f"{w.name}: Gateway {gw} routes model "
                         + ", ".join(repr(n) for n in names)
                         + f" to its InferencePool ({routing.MODEL_HEADER} header)")

    # Topology: multi-GPU pods go to nodes whose NVLink group fits them.
    label, nvlink_group = _pool_topology(spec, placement, layout)
    if placement.count > 1 and placement.whole_gpus:
        if label is None:
            values["topology"] = {"key": ""}
            warn("GV006", f"{placement.count} GPUs per pod, but node pool {pool.name} has no "
                 "topology: pods are placed without an NVLink affinity (add topology.file or "
                 "topology.label to the pool)", "workloads", wi)
        else:
            values["topology"] = {"values": [label]}
    if placement.multi_node:
        values["multiNode"] = _multi_node_values(spec, wi, placement)
        decisions.append(f"{w.name}: a LeaderWorkerSet of groups of {placement.nodes} pods (a leader "
                         f"and {placement.nodes - 1} worker(s), {placement.count} GPUs each): vLLM "
                         f"--tensor-parallel-size={placement.count} "
                         f"--pipeline-parallel-size={placement.nodes} over Ray")
    config = layout.device_plugin_configs.get(_config_of(placement, layout) or "")
    values["gpuProducts"] = deviceplugin.gfd_products(gpu, config)

    units = layout.units.get(w.name, 0)
    decisions += list(layout.notes) if placement.mode == "mig" else []
    decisions.append(f"the fleet's layout gives {w.name} {units} x {placement.resource} at peak")
    autoscaling, more, capacity_warnings = sizing.autoscaling_values(spec, wi, placement, units)
    decisions += more
    for text in capacity_warnings:
        warn("GV003", text, "workloads", wi)
    p = spec.platform
    if autoscaling["engine"] == "keda" and p.gpu_operator:
        # the GPU Operator's exporter scrape uses honorLabels false: DCGM series name the
        # workload pod exported_pod / exported_namespace
        autoscaling.setdefault("keda", {}).update(
            {"podLabel": "exported_pod", "namespaceLabel": "exported_namespace"})
    if w.scale_to_zero:
        _scale_to_zero(spec, wi, autoscaling, decisions)
    values["autoscaling"] = autoscaling
    if p.service_monitor or (w.scale_to_zero and values.get("gateway")):
        # scale to zero wakes on the endpoint picker's queue: Prometheus must scrape it
        values["serviceMonitor"] = {"enabled": True}
    values["platform"] = {
        "gpuOperator": p.gpu_operator,
        "devicePlugin": {"enabled": False}, "gfd": {"enabled": False},
        "dcgmExporter": {"enabled": False}, "prometheusAdapter": {"enabled": False},
        # the workload's own alerts; the GPU alert groups are the platform release's
        "alerts": {"enabled": p.alerts, "gpuRules": False},
    }
    facts = {"kube_version": spec.kubernetes_version, "gpu_models": (gpu.name,),
             "gpus_per_node": pool.gpus_per_node, "inventory_gpus": pool.gpus,
             "nvlink_group": nvlink_group, "nvlink_source": f"node pool {pool.name}",
             "memory_gb": w.memory_gb, "tensor_parallel": w.tensor_parallel,
             "shared_replicas": placement.replicas_per_gpu}
    return Release(w.name, w.namespace, values, w.name, tuple(decisions), facts)


def _multi_node_values(spec: Spec, wi: int, placement: Placement) -> dict[str, Any]:
    """The chart's multiNode block: the group size and the label of the domain a group
    stays inside (the pool's groupDomainLabel; none: the group may span the pool)."""
    out: dict[str, Any] = {"nodes": placement.nodes}
    out["topologyKey"] = placement.pool.group_domain_label or ""
    if spec.workloads[wi].scale_to_zero:
        raise spec_error(SpecError, "scaleToZero with a multi-node replica: a group cold-starts "
                         "over several nodes (Ray, then every pipeline stage's weights); keep "
                         "minReplicas >= 1", spec, "workloads", wi, "scaleToZero", code="GV064")
    return out


def _model_values(spec: Spec, wi: int) -> dict[str, Any]:
    """The chart's model block: the source of the weights and the size that sizes the
    download volume and the ephemeral-storage limit."""
    w = spec.workloads[wi]
    model: dict[str, Any] = {"name": w.model}
    if w.weights_gb:
        model["sizeGB"] = round(w.weights_gb, 2)
    src = w.model_source
    if src is not None and src.token_secret:
        model["token"] = {"secretName": src.token_secret, "secretKey": src.token_key,
                          "mountAs": src.token_mount_as}
    if w.model_pvc:
        model.update({"source": "pvc", "pvc": {"claimName": w.model_pvc}})
    elif src is None or src.type == "download":
        if src is not None:
            model["source"] = "download"
    elif src.type == "image":
        if spec.kube_minor < 33:
            raise spec_error(SpecError, f"modelSource image needs Kubernetes >= 1.33 (the image "
                             f"volume source); the spec targets {spec.kubernetes_version}", spec,
                             "workloads", wi, "modelSource", "type")
        model.update({"source": "image", "image": {"reference": src.image}})
    elif src.type == "streamer":
        model.update({"source": "streamer", "streamer": {"uri": src.uri, **(
            {"secretName": src.secret_name} if src.secret_name else {})}})
    elif src.type == "cache":
        pvc: dict[str, Any] = {"create": True}
        if src.storage_class:
            pvc["storageClassName"] = src.storage_class
        model.update({"source": "pvc", "pvc": pvc})
    return model


def _scale_to_zero(spec: Spec, wi: int, autoscaling: dict[str, Any], decisions: list[str]) -> None:
    """minReplicas 0 with what wakes the workload: KEDA on the inference gateway's queue
    (the chart's activation query), or an HPA only where the cluster enables HPAScaleToZero."""
    w = spec.workloads[wi]
    if autoscaling["engine"] != "keda":
        raise spec_error(SpecError, "scaleToZero needs autoscaling.engine keda (an HPA cannot scale "
                         "from zero on its pods' metrics: there are no pods)", spec,
                         "workloads", wi, "scaleToZero")
    if not spec.gateway or w.server != "vllm":
        raise spec_error(SpecError, "scaleToZero needs the inference gateway (spec `gateway`, vLLM "
                         "workloads): its endpoint picker holds the first request and its queue "
                         "wakes the workload", spec, "workloads", wi, "scaleToZero")
    autoscaling["minReplicas"] = 0
    keda = autoscaling.setdefault("keda", {})
    keda["activationThreshold"] = "0"
    keda["fallback"] = {"replicas": 1}
    decisions.append(f"scale to zero: {w.name} idles at 0 replicas and wakes when a request waits "
                     "in the gateway's queue (cold start up to modelLoadTimeoutSeconds)")


def _config_of(placement: Placement, layout: Layout) -> str | None:
    """The device-plugin config the workload's node groups run."""
    for g in layout.groups_of(placement.pool.name):
        if placement.workload in g.workloads:
            return g.device_plugin_config
    return None


def _gfd_wanted(spec: Spec, workloads: Sequence[Release]) -> bool:
    """GFD whenever a workload's pods select a label only GFD produces, unless the spec says
    false (validate then names the missing producer, GV021)."""
    if spec.platform.gpu_feature_discovery is not None:
        return spec.platform.gpu_feature_discovery
    return any(producers.producer_of(k) == producers.GFD for r in workloads
               for k in producers.required_node_labels(r.values))


def _operator_mig_strategy(spec: Spec, configs: Mapping[str, Mapping[str, Any]]) -> str:
    """The ClusterPolicy's one MIG strategy. The operator passes it to the device plugin
    and GFD as MIG_STRATEGY (v26.7.0 controllers/object_controls.go applyMIGConfiguration),
    and an env var wins over each config file's flags.migStrategy (k8s-device-plugin
    api/config/v1/flags.go updateFromCLIFlag): so it must be what every config says (a
    config without MIG devices works with any). `mixed` with an MPS config is refused by the
    plugin ("using --mig-strategy=mixed is not supported with MPS", cmd/nvidia-device-plugin
    main.go validateFlags; found by tests/oracle/test_gpu_operator_oracle.py), and the chart
    cannot leave the strategy unset (templates/clusterpolicy.yaml renders `mig:` empty,
    which the API server refuses: tests/e2e/test_day1.py). Raises GV080 for that fleet."""
    strategies = {c.get("flags", {}).get("migStrategy", "none") for c in configs.values()} - {"none"}
    mps = sorted(n for n, c in configs.items() if (c.get("sharing") or {}).get("mps"))
    if len(strategies) > 1 or (strategies == {"mixed"} and mps):
        raise spec_error(SpecError, "platform.gpuOperator: the GPU Operator gives every node one MIG "
                         f"strategy, but the node groups' configs need {sorted(strategies | {'none'} if mps else strategies)}"
                         f"{' (MPS configs ' + ', '.join(mps) + ' refuse mixed)' if mps else ''}; use the "
                         "platform's own device plugin (gpuOperator: false) or one strategy for the "
                         "fleet", spec, "platform", "gpuOperator", code="GV080")
    return strategies.pop() if strategies else "none"


def gpu_operator_release(spec: Spec, layout: Layout | None, workloads: Sequence[Release]
                         ) -> Release | None:
    """With `platform.gpuOperator`, the values of NVIDIA's gpu-operator chart
    (GPU_OPERATOR_VERSION; its values.yaml and templates/clusterpolicy.yaml name the keys):
    its device plugin and mig-manager use the fleet's configs, which the chart creates as
    ConfigMaps (`config.create`), its GFD and DCGM exporter follow the spec, and its NFD is
    off when the cluster has one (`cluster.nfd: present`). None without the operator."""
    p = spec.platform
    if not p.gpu_operator:
        return None
    configs = {"default": DEFAULT_DEVICE_PLUGIN_CONFIG, **(dict(layout.device_plugin_configs) if layout else {})}
    device_plugin: dict[str, Any] = {"enabled": p.device_plugin, "config": {
        "create": True, "name": OPERATOR_DEVICE_PLUGIN_CONFIGMAP, "default": "default",
        "data": {name: dump(cfg) for name, cfg in configs.items()}}}
    mig_manager: dict[str, Any] = {"enabled": bool(layout and layout.mig_parted)}
    if layout and layout.mig_parted:
        mig = {"version": layout.mig_parted["version"],
               "mig-configs": {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}],
                               **layout.mig_parted["mig-configs"]}}
        mig_manager["config"] = {"create": True, "name": OPERATOR_MIG_CONFIGMAP,
                                 "default": ALL_DISABLED, "data": {"config.yaml": dump(mig)}}
    values = {
        "nfd": {"enabled": spec.nfd == "deploy"},
        "mig": {"strategy": _operator_mig_strategy(spec, configs)},
        "devicePlugin": device_plugin,
        "gfd": {"enabled": _gfd_wanted(spec, workloads)},
        "migManager": mig_manager,
        "dcgmExporter": {"enabled": p.dcgm_exporter,
                         "serviceMonitor": {"enabled": p.service_monitor}},
    }
    decisions = (f"the NVIDIA GPU Operator chart {GPU_OPERATOR_CHART} {GPU_OPERATOR_VERSION} runs the "
                 "device plugin with every node group's config, GFD, mig-manager with the plan's "
                 "mig-parted config and the DCGM exporter",)
    return Release("gpu-operator", "gpu-operator", values, None, decisions,
                   {"chart": GPU_OPERATOR_CHART, "version": GPU_OPERATOR_VERSION,
                    "repo": GPU_OPERATOR_REPO})


def platform_release(spec: Spec, layout: Layout | None, workloads: Sequence[Release]) -> Release:
    """The platform release: every part the spec asks for, once, for the whole fleet."""
    p = spec.platform
    own = not p.gpu_operator
    metrics: list[dict[str, Any]] = []
    for r in workloads:
        a = r.values.get("autoscaling", {})
        if a.get("engine") == "hpa":
            for m in a.get("metrics", []):
                if m["name"] not in [x["name"] for x in metrics]:
                    metrics.append({"name": m["name"]})
    adapter = bool(metrics) and p.prometheus_adapter
    # No device plugin when every node opts out of it (a DRA-only fleet).
    plugin_nodes = layout is None or not layout.node_groups or any(
        g.labels.get(deviceplugin.DEPLOY_LABEL) != "false" for g in layout.node_groups)
    gfd = _gfd_wanted(spec, workloads)
    # mig-manager wherever mig-parted manages a pool: it applies the plan's MIG layouts and
    # also turns MIG off on the GPUs the plan keeps whole (they may come with MIG on)
    mig_enabled = bool(layout and layout.mig_parted)
    platform: dict[str, Any] = {
        "gpuOperator": p.gpu_operator,
        "devicePlugin": {"enabled": own and p.device_plugin and plugin_nodes},
        "gfd": {"enabled": own and gfd},
        "nfd": {"enabled": own and spec.nfd == "deploy"},
        "migManager": {"enabled": own and mig_enabled},
        "dcgmExporter": {"enabled": own and p.dcgm_exporter},
        "prometheusAdapter": {"enabled": adapter},
        "alerts": {"enabled": p.alerts, "gpuRules": True},
    }
    if adapter:
        platform["prometheusAdapter"]["metrics"] = metrics
        if p.gpu_operator:
            platform["prometheusAdapter"]["exporterLabels"] = "exported"
    configs = dict(layout.device_plugin_configs) if layout else {}
    if configs and platform["devicePlugin"]["enabled"]:
        platform["devicePlugin"]["config"] = {"map": {"default": DEFAULT_DEVICE_PLUGIN_CONFIG,
                                                      **configs}}
    if platform["migManager"]["enabled"] and layout is not None and layout.mig_parted:   # (mig_enabled)
        # the plan's mig-parted config; each node group's nvidia.com/mig.config selects one
        platform["migManager"]["config"] = dict(layout.mig_parted)
    if p.service_monitor and platform["dcgmExporter"]["enabled"]:
        platform["dcgmExporter"]["serviceMonitor"] = {"enabled": True}
    g = spec.gateway
    bbr_note = ""
    if g and g.body_based_routing and any(w.server == "vllm" for w in spec.workloads):
        # one router per Gateway: the routes of every workload match the header it sets
        # (a parentRef without a namespace names the Gateway of the route's namespace; the
        # spec check GV052 keeps those to one namespace)
        gw_ns = g.namespace or next(w.namespace for w in spec.workloads if w.server == "vllm")
        platform["bodyBasedRouting"] = {"enabled": True, "provider": g.provider,
                                        "gateway": {"name": g.name, "namespace": gw_ns}}
        bbr_note = (f"the body-based router sets {routing.MODEL_HEADER} from each request's "
                    f"`model` before Gateway {gw_ns}/{g.name} picks a route")
    decisions = [f"platform release {p.release_name} in {p.namespace}: "
                 + ", ".join(k for k, v in platform.items() if isinstance(v, dict) and v.get("enabled"))]
    if adapter:
        decisions.append("the Prometheus adapter serves " + ", ".join(m["name"] for m in metrics)
                         + " for every workload's HPA")
    values = {"workload": {"enabled": False}, "autoscaling": {"engine": "none"},
              "platform": platform}
    if bbr_note:
        decisions.append(bbr_note)
    return Release(p.release_name, p.namespace, values, None, tuple(decisions),
                   {"kube_version": spec.kubernetes_version})


def warning(spec: Spec, code: str, message: str, *path: Any) -> Finding:
    """A warning placed at `path` in the spec."""
    source, line, col = spec.position(*path)
    return Finding(code, message, format_path(path), source, line, col, "warning")
