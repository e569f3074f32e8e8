"""The spec model: one short file describing a GPU cluster and the models to serve, as
frozen dataclasses with defaults filled in (`from_data`).

Reading and checking a spec file is `gpuvalues.checks.spec.load_spec`; this module holds
only the model, so the fleet builder depends on nothing above it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuvalues.yamlio.loader import Loaded
from gpuvalues.catalog import GIB_PER_GB
from gpuvalues.errors import Finding, SpecError
from gpuvalues.kube import kube_minor

SHARING_MODES = ("auto", "whole", "mig", "time-slicing", "mps", "dra")
# The node label that names a node's pool when the spec gives no nodeSelector (nodes carry
# it from day 0, as a cloud's node-pool label), and the one the printed install order puts
# on each node it assigns to a node group (so a rerun assigns no node twice).
POOL_LABEL = "gpu-inference.io/node-pool"
GROUP_LABEL = "gpu-inference.io/node-group"
NFD_MODES = ("deploy", "present")


@dataclass(frozen=True)
class Topology:
    """A pool's GPU interconnect: an `nvidia-smi topo -m` file or a topology label."""

    file: Path | None = None
    label: str | None = None


@dataclass(frozen=True)
class NodePool:
    """A pool of identical GPU nodes (`cluster.nodePools[]`)."""

    name: str
    gpu: str
    gpus_per_node: int
    nodes: int
    mig: bool = False
    topology: Topology | None = None
    price_per_gpu_hour: float | None = None
    node_selector: tuple[tuple[str, str], ...] = ()   # day-0 labels; () = POOL_LABEL: name

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


@dataclass(frozen=True)
class Gateway:
    """The Gateway every vLLM workload's HTTPRoute attaches to (`gateway`)."""

    name: str
    namespace: str | None = None
    section_name: str | None = None


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
    return ModelSource(raw["type"], raw.get("image"), raw.get("uri"), raw.get("secretName"),
                       raw.get("storageClassName"))


def _kube_version(text: str) -> str:
    parts = text.lstrip("v").split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def from_data(data: dict, *, base_dir: Path = Path("."), loaded: Loaded | None = None
              ) -> Spec:
    """Dataclasses from schema-valid spec data (no validation here; see load_spec)."""
    pools = []
    for p in data["cluster"]["nodePools"]:
        topo = None
        if "topology" in p:
            t = p["topology"]
            topo = Topology(file=(base_dir / t["file"]) if "file" in t else None,
                            label=t.get("label"))
        pools.append(NodePool(p["name"], p["gpu"], p["gpusPerNode"], p["nodes"],
                              bool(p.get("mig", False)), topo, p.get("pricePerGpuHour"),
                              tuple(sorted((p.get("nodeSelector") or {}).items()))))
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
            lora=tuple((a["name"], a["source"]) for a in w.get("lora", ()))))
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
        gateway=Gateway(g["name"], g.get("namespace"), g.get("sectionName"))
        if (g := data.get("gateway")) else None,
        kubernetes_version=_kube_version(data.get("kubernetesVersion", "1.34.0")),
        nfd=data["cluster"].get("nfd", "deploy"),
        loaded=loaded)


