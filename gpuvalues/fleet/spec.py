"""The spec model: one short file describing a GPU cluster and the models to serve, as
frozen dataclasses with defaults filled in (`from_data`).

Reading and checking a spec file is `gpuvalues.checks.spec.load_spec`; this module holds
only the model, so the fleet builder depends on nothing above it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuvalues.yamlio.loader import Loaded, format_path
from gpuvalues.catalog import GIB_PER_GB, GpuModel, get_gpu
from gpuvalues.errors import CatalogError, Finding, SpecError
from gpuvalues.kube import kube_minor

SHARING_MODES = ("auto", "whole", "mig", "time-slicing", "mps", "dra")
# The node label that names a node's pool when the spec gives no nodeSelector (nodes carry
# it from day 0, as a cloud's node-pool label), and the one the printed install order puts
# on each node it assigns to a node group (so a rerun assigns no node twice).
POOL_LABEL = "gpu-inference.io/node-pool"
GROUP_LABEL = "gpu-inference.io/node-group"
NFD_MODES = ("deploy", "present")

# Bytes per parameter of a checkpoint's weights (`dtype`). 16- and 32-bit: the element size
# of the torch dtype vLLM loads (`--dtype`: vllm/config/model.py _STR_DTYPE_TO_TORCH_DTYPE;
# torch.bfloat16.itemsize == 2); fp8 (float8_e4m3fn, vLLM `--quantization fp8`) and int8
# (W8A8) one byte; 4-bit formats half a byte plus their block scales: int4 (GPTQ/AWQ,
# group size 128, an fp16 scale per group: vllm/model_executor/layers/quantization/gptq.py),
# nvfp4 / fp4 (an fp8 scale per 16 values: vLLM's modelopt NVFP4) and mxfp4 (an 8-bit scale
# per 32 values: the OCP Microscaling spec). Hugging Face accelerate's `estimate-memory`
# counts 4, 2, 1 and 0.5 bytes for float32, float16, int8 and int4 the same way. Quantized
# checkpoints keep embeddings and norms in 16-bit, so give `modelSizeGB` for the exact size.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
               "int4": 0.5 + 2 / 128, "fp4": 0.5 + 1 / 16, "nvfp4": 0.5 + 1 / 16,
               "mxfp4": 0.5 + 1 / 32}
DEFAULT_DTYPE = "bf16"


def weights_gb(model_size_gb: float | None, parameters_b: float | None,
               dtype: str | None) -> float | None:
    """The weights in GB (10^9 bytes): `modelSizeGB` when given, else `parameters` (billions)
    x DTYPE_BYTES[dtype] (bf16 when no dtype is given), else None (not stated)."""
    if model_size_gb:
        return float(model_size_gb)
    if parameters_b:
        return parameters_b * DTYPE_BYTES[dtype or DEFAULT_DTYPE]
    return None


# Host resources of a server pod: a fixed part (the API server and engine process) plus one
# part per GPU of the pod (vLLM runs one worker process per GPU for tensor parallelism, each
# with its own CUDA context, pinned staging buffers and CPU threads). With one GPU this is
# the chart's default (4 CPU / 32Gi requested, 8 CPU / 64Gi limit); limits are 2x requests.
POD_CPU_BASE, POD_CPU_PER_GPU = 2.0, 2.0
POD_MEMORY_GIB_BASE, POD_MEMORY_GIB_PER_GPU = 16.0, 16.0


@dataclass(frozen=True)
class TopologySource:
    """Where a pool's GPU interconnect comes from (`topology`): an `nvidia-smi topo -m`
    file or a topology label; the parsed links are `planners.scheduling.topology.Topology`."""

    file: Path | None = None
    label: str | None = None


@dataclass(frozen=True)
class NodePool:
    """A pool of identical GPU nodes (`cluster.nodePools[]`)."""

    name: str
    gpu: GpuModel           # resolved from the spec's name (any alias) once, by `from_data`
    gpus_per_node: int
    nodes: int
    mig: bool = False
    topology: TopologySource | None = None
    price_per_gpu_hour: float | None = None
    node_selector: tuple[tuple[str, str], ...] = ()   # day-0 labels; () = POOL_LABEL: name
    group_domain_label: str | None = None   # one multi-node group per value of this label
    # the device plugin's container features on this pool's nodes (containerFeatures:
    # gds, mofed, gdrcopy; planners.deviceplugin.CONTAINER_FEATURES says why all default off)
    container_features: tuple[tuple[str, bool], ...] = ()

    @property
    def selector(self) -> dict[str, str]:
        """The labels that pick this pool's nodes on a bare cluster (`nodeSelector`, else
        `POOL_LABEL: <name>`); the printed install order labels node groups among them."""
        return dict(self.node_selector) or {POOL_LABEL: self.name}

    @property
    def gpus(self) -> int:
        """GPUs in the pool (nodes x GPUs per node)."""
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Sharing:
    """How replicas get GPUs. `mode` is one of SHARING_MODES (`auto`: the planner picks)."""

    mode: str = "auto"
    replicas_per_gpu: int | None = None
    mig_profile: str | None = None
    mig_strategy: str = "mixed"
    rename_resource: bool = True     # shared replicas as nvidia.com/gpu.shared


@dataclass(frozen=True)
class Slo:
    """The latency objective of a workload (`slo.latencyMs` at `slo.percentile`)."""

    latency_ms: float | None = None
    percentile: float = 95.0


@dataclass(frozen=True)
class Load:
    """Request rates (requests/s) at the daily base and at peak."""

    peak: float
    base: float | None = None


@dataclass(frozen=True)
class Workload:
    """One model to serve (`workloads[]`): server, resources, load and where it runs."""

    name: str
    model: str
    server: str = "vllm"
    image: str | None = None
    gpus: int | None = None
    memory_gb: float | None = None
    tensor_parallel: int = 1
    throughput_per_replica: float | None = None
    slo: Slo = field(default_factory=Slo)
    load: Load | None = None
    node_pool: str | None = None
    sharing: Sharing | None = None          # None: the spec-wide sharing applies
    model_load_timeout_seconds: int | None = None
    model_pvc: str | None = None            # existing claim with the weights/repository
    namespace: str = "gpu-inference"        # namespace of the workload's release
    memory_gib_given: float | None = None   # `memoryGiB`, when the spec gives GiB
    model_size_gb: float | None = None      # weights on disk (download volume, ephemeral limit)
    model_source: ModelSource | None = None
    scale_to_zero: bool = False
    lora: tuple[tuple[str, str], ...] = ()  # (name, source) adapters
    parameters_b: float | None = None       # `parameters`, in billions
    dtype: str | None = None                # `dtype`: a DTYPE_BYTES key
    cpu_per_gpu: float = POD_CPU_PER_GPU    # `resources.cpuPerGpu` (requested cores per GPU)
    memory_gib_per_gpu: float = POD_MEMORY_GIB_PER_GPU   # `resources.memoryGiBPerGpu`
    nodes_per_replica: int | None = None    # None: one node, or derived from the weights

    @property
    def weights_gb(self) -> float | None:
        """The weights in GB (10^9 bytes) the spec states: `modelSizeGB`, else `parameters`
        x the bytes per parameter of `dtype` (`weights_gb()`); None when not stated."""
        return weights_gb(self.model_size_gb, self.parameters_b, self.dtype)

    def pod_resources(self, gpus_per_pod: int) -> dict[str, dict[str, str]]:
        """CPU and memory requests and limits of one server pod with `gpus_per_pod` GPUs
        (or MIG instances / shared replicas: 1): POD_*_BASE + the per-GPU part x GPUs,
        limits twice the requests (the chart's 1-GPU default ratio)."""
        n = max(1, gpus_per_pod)
        cpu = POD_CPU_BASE + self.cpu_per_gpu * n
        mem = POD_MEMORY_GIB_BASE + self.memory_gib_per_gpu * n

        def cores(x: float) -> str:
            return f"{x:g}" if x == int(x) else f"{math.ceil(x * 1000)}m"

        def gib(x: float) -> str:
            return f"{x:g}Gi" if x == int(x) else f"{math.ceil(x * 1024)}Mi"
        return {"requests": {"cpu": cores(cpu), "memory": gib(mem)},
                "limits": {"cpu": cores(2 * cpu), "memory": gib(2 * mem)}}

    @property
    def memory_gib(self) -> float | None:
        """Memory one replica needs, in GiB (`memoryGiB`, else `memoryGB` converted)."""
        if self.memory_gib_given is not None:
            return self.memory_gib_given
        return None if self.memory_gb is None else self.memory_gb * GIB_PER_GB

    @property
    def gpus_per_replica(self) -> int:
        """Whole GPUs one replica needs when it gets whole GPUs (>= tensorParallel)."""
        return max(self.gpus or 1, self.tensor_parallel)


@dataclass(frozen=True)
class ModelSource:
    """Where a workload's weights come from (`modelSource`): download | image | streamer | cache."""

    type: str = "download"
    image: str | None = None
    uri: str | None = None
    secret_name: str | None = None
    storage_class: str | None = None
    token_secret: str | None = None         # `token.secretName`: a Hugging Face token Secret
    token_key: str = "token"                # `token.secretKey` (the chart's default key)
    token_mount_as: str = "file"            # `token.mountAs`: file (HF_TOKEN_PATH) or env (HF_TOKEN)


@dataclass(frozen=True)
class Gateway:
    """The Gateway every vLLM workload's HTTPRoute attaches to (`gateway`), and whether the
    platform deploys the body-based router in front of its routes (`provider` wires it)."""

    name: str
    namespace: str | None = None
    section_name: str | None = None
    body_based_routing: bool = True
    provider: str = "envoyGateway"


@dataclass(frozen=True)
class Autoscaling:
    """Spec-wide autoscaling choices (`autoscaling`): engine, metric and replica bounds."""

    engine: str = "hpa"
    metric: str = "choose"
    target: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    prometheus_address: str | None = None


@dataclass(frozen=True)
class Platform:
    """Which GPU platform parts the first release installs (`platform`)."""

    gpu_operator: bool = False
    device_plugin: bool = True
    gpu_feature_discovery: bool | None = None   # None: on when a workload selects its labels
    dcgm_exporter: bool = True
    prometheus_adapter: bool = True
    alerts: bool = True
    service_monitor: bool = False
    namespace: str = "gpu-platform"
    release_name: str = "gpu-platform"


@dataclass(frozen=True)
class Spec:
    """A validated spec. `loaded` keeps the source text and positions for messages."""

    node_pools: tuple[NodePool, ...]
    workloads: tuple[Workload, ...]
    sharing: Sharing = field(default_factory=Sharing)
    autoscaling: Autoscaling = field(default_factory=Autoscaling)
    platform: Platform = field(default_factory=Platform)
    kubernetes_version: str = "1.34.0"
    memory_headroom: float = 0.05
    gateway: Gateway | None = None
    nfd: str = "deploy"                     # cluster.nfd: NFD_MODES
    loaded: Loaded | None = field(default=None, compare=False, repr=False)
    warnings: tuple[Finding, ...] = ()

    def pool(self, name: str) -> NodePool:
        """The node pool called `name`, else a SpecError."""
        for p in self.node_pools:
            if p.name == name:
                return p
        raise SpecError(f"no node pool named {name!r}")

    def workload(self, name: str) -> Workload:
        """The workload called `name`, else a SpecError listing the workloads."""
        for w in self.workloads:
            if w.name == name:
                return w
        known = ", ".join(w.name for w in self.workloads)
        raise SpecError(f"no workload named {name!r}; the spec has: {known}")

    def sharing_for(self, workload: Workload) -> Sharing:
        """The sharing that applies to `workload`: its own, else the spec-wide one."""
        return workload.sharing or self.sharing

    def pools_for(self, workload: Workload) -> tuple[NodePool, ...]:
        """The pools a workload may run on: its nodePool, else all."""
        if workload.node_pool:
            return (self.pool(workload.node_pool),)
        return self.node_pools

    @property
    def kube_minor(self) -> int:
        """The minor of `kubernetes_version` (34 for 1.34.0)."""
        return kube_minor(self.kubernetes_version)

    def position(self, *path: Any) -> tuple[str, int | None, int | None]:
        """(source, line, column) of a spec path, for messages."""
        if self.loaded is None:
            return ("<spec>", None, None)
        line, col = self.loaded.position(path)
        return (self.loaded.source, line, col)


def _sharing(raw: Any) -> Sharing | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return Sharing(mode=raw)
    return Sharing(mode=raw["mode"], replicas_per_gpu=raw.get("replicasPerGpu"),
                   mig_profile=raw.get("migProfile"), mig_strategy=raw.get("migStrategy", "mixed"),
                   rename_resource=raw.get("renameResource", True))


def _model_source(raw: Any) -> ModelSource | None:
    if raw is None:
        return None
    token = raw.get("token") or {}
    return ModelSource(raw["type"], raw.get("image"), raw.get("uri"), raw.get("secretName"),
                       raw.get("storageClassName"), token.get("secretName"),
                       token.get("secretKey", "token"), token.get("mountAs", "file"))


def _kube_version(text: str) -> str:
    parts = text.lstrip("v").split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def pool_gpu(data: dict[str, Any], index: int, loaded: Loaded | None = None) -> GpuModel:
    """The catalog model `cluster.nodePools[index].gpu` names (any alias); an unknown name
    is a CatalogError placed at that field (`loaded` gives the position)."""
    at = ("cluster", "nodePools", index, "gpu")
    try:
        return get_gpu(data["cluster"]["nodePools"][index]["gpu"])
    except CatalogError as exc:
        line, col = loaded.position(at) if loaded is not None else (None, None)
        raise CatalogError(exc.message, source=loaded.source if loaded is not None else "",
                           line=line, column=col, field=format_path(at)) from None


def from_data(data: dict[str, Any], *, base_dir: Path = Path("."), loaded: Loaded | None = None
              ) -> Spec:
    """Dataclasses from schema-valid spec data (no validation here; see load_spec); a pool's
    GPU is resolved in the catalog here, once (`pool_gpu`: an unknown one raises)."""
    pools = []
    for i, p in enumerate(data["cluster"]["nodePools"]):
        topo = None
        if "topology" in p:
            t = p["topology"]
            topo = TopologySource(file=(base_dir / t["file"]) if "file" in t else None,
                            label=t.get("label"))
        pools.append(NodePool(p["name"], pool_gpu(data, i, loaded), p["gpusPerNode"], p["nodes"],
                              bool(p.get("mig", False)), topo, p.get("pricePerGpuHour"),
                              tuple(sorted((p.get("nodeSelector") or {}).items())),
                              p.get("groupDomainLabel"),
                              tuple(sorted((p.get("containerFeatures") or {}).items()))))
    workloads = []
    for w in data["workloads"]:
        slo = w.get("slo", {})
        load = w.get("load")
        workloads.append(Workload(
            name=w["name"], model=w["model"], server=w.get("server", "vllm"),
            image=w.get("image"), gpus=w.get("gpus"), memory_gb=w.get("memoryGB"),
            tensor_parallel=w.get("tensorParallel", 1),
            throughput_per_replica=w.get("throughputPerReplica"),
            slo=Slo(slo.get("latencyMs"), slo.get("percentile", 95.0)),
            load=Load(load["peak"], load.get("base")) if load else None,
            node_pool=w.get("nodePool"), sharing=_sharing(w.get("sharing")),
            model_load_timeout_seconds=w.get("modelLoadTimeoutSeconds"),
            model_pvc=w.get("modelPvc"),
            namespace=w.get("namespace", data.get("namespace", "gpu-inference")),
            memory_gib_given=w.get("memoryGiB"), model_size_gb=w.get("modelSizeGB"),
            model_source=_model_source(w.get("modelSource")),
            scale_to_zero=w.get("scaleToZero", False),
            lora=tuple((a["name"], a["source"]) for a in w.get("lora", ())),
            parameters_b=w.get("parameters"), dtype=w.get("dtype"),
            cpu_per_gpu=w.get("resources", {}).get("cpuPerGpu", POD_CPU_PER_GPU),
            memory_gib_per_gpu=w.get("resources", {}).get("memoryGiBPerGpu",
                                                          POD_MEMORY_GIB_PER_GPU),
            nodes_per_replica=w.get("nodesPerReplica")))
    a = data.get("autoscaling", {})
    pl = data.get("platform", {})
    return Spec(
        node_pools=tuple(pools), workloads=tuple(workloads),
        sharing=_sharing(data.get("sharing")) or Sharing(),
        autoscaling=Autoscaling(a.get("engine", "hpa"), a.get("metric", "choose"),
                                a.get("target"), a.get("minReplicas"), a.get("maxReplicas"),
                                a.get("prometheusAddress")),
        platform=Platform(pl.get("gpuOperator", False), pl.get("devicePlugin", True),
                          pl.get("gpuFeatureDiscovery"), pl.get("dcgmExporter", True),
                          pl.get("prometheusAdapter", True), pl.get("alerts", True),
                          pl.get("serviceMonitor", False), pl.get("namespace", "gpu-platform"),
                          pl.get("releaseName", "gpu-platform")),
        memory_headroom=data.get("memoryHeadroom", 0.05),
        gateway=Gateway(g["name"], g.get("namespace"), g.get("sectionName"),
                        g.get("bodyBasedRouting", True), g.get("provider", "envoyGateway"))
        if (g := data.get("gateway")) else None,
        kubernetes_version=_kube_version(data.get("kubernetesVersion", "1.34.0")),
        nfd=data["cluster"].get("nfd", "deploy"),
        loaded=loaded)


