"""Does a rendered release fit a cluster? A planning aid that replays the scheduler's filters.

`fit(manifests, inventory)` takes rendered objects (or `fit_values(values, inventory)`
renders a values file through helm first) and, for two scenarios -- every workload at its
minimum and at its maximum replica count (from its HorizontalPodAutoscaler, KEDA
ScaledObject, or `spec.replicas`) -- places the pods one at a time with the filters that
decide GPU placement, in kube-scheduler's order (pkg/scheduler/apis/config/v1 default
plugins): NodeUnschedulable, NodeName, TaintToleration (NoSchedule/NoExecute), NodeAffinity
(nodeSelector and required node affinity, all operators, matchFields on metadata.name),
NodeResourcesFit (pods, cpu, memory, ephemeral-storage, and extended resources such as
nvidia.com/gpu and nvidia.com/mig-<profile>: integers, never overcommitted; a resource a
node does not have counts as 0), and InterPodAffinity for *required pod anti-affinity*
(e.g. one replica per node: topologyKey kubernetes.io/hostname, which defaults to the
node name), both the pod's own terms and existing pods' terms. Topology constraints are
node labels (`nvidia.com/gpu.topology`, ...) and go through NodeAffinity like any other
label.

A LeaderWorkerSet replica is a group (leaderWorkerTemplate.size pods): placed all or
nothing, leader first, and with the `leaderworkerset.sigs.k8s.io/exclusive-topology`
annotation inside one value of that node label that no other group of the set holds (the
pod affinity and anti-affinity the LWS webhook injects); its counts are groups.

How fit chooses a node: **first fit in node-name order** among the nodes that pass every
filter. kube-scheduler instead scores feasible nodes (by default it spreads:
NodeResourcesFit LeastAllocated). For pods of one shape (one Deployment) the number that
fit does not depend on the choice -- every node ends up holding as many as fit on it -- so
fit's Pending *count* equals the scheduler's (also with one-per-node self anti-affinity);
*which* node holds which pod, and results for several differently-shaped workloads
competing for the same nodes, can differ. Pods are
queued by priority (PriorityClass objects in the manifests; others count as 0), then
round-robin across workloads in manifest order (as if created together).

A Pending pod's reason uses the scheduler's words and FitError format, evaluated against
the final state: "0/5 nodes are available: 2 Insufficient nvidia.com/gpu, 3 node(s) had
untolerated taint {dedicated: infer}." -- one reason per node from the first filter that
fails (NodeResourcesFit may give several).

NOT modelled (fit says so in every report): scoring, preemption and priority-based
eviction, DRA allocation beyond whole GPUs (a claim's ExactCount of DeviceClass
`gpu.nvidia.com` from its ResourceClaimTemplate counts against the GPUs of nodes without
the device plugin; other claims: only the pod's other requests are checked),
required pod affinity and topology spread constraints, host ports, volumes, pods already
running on the nodes (nodes start empty), DaemonSets, and which physical GPU a pod gets
(`gpuvalues.planners.scheduling.topology.best_gpu_set` answers that per node). Basic resources (cpu, memory,
pods) a node's inventory does not list are treated as unlimited.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from gpuvalues.errors import CapacityError
from gpuvalues.planners.deviceplugin import DRA_GPU_CLASS
from gpuvalues.planners.scheduling.inventory import Inventory, Node, resource_amount

NOT_MODELLED = (
    "scoring: fit takes the first feasible node in name order; the scheduler scores nodes",
    "preemption and eviction of lower-priority pods",
    "DRA allocation beyond whole GPUs (gpu.nvidia.com claims count against a node's GPUs; "
    "other claims: only a pod's other requests are checked)",
    "required pod affinity (anti-affinity is modelled) and topology spread constraints",
    "pods already running on the nodes (every node starts empty), DaemonSets, host ports, volumes",
    "which physical GPU or MIG slice a pod gets (see `gpuvalues topo --best N`)",
)
PLACEMENT = "first fit in node-name order; pods queued by priority, then round-robin across workloads"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "Job", "Pod", "LeaderWorkerSet")
# LeaderWorkerSet (sigs.k8s.io/lws v0.9.0, api/leaderworkerset/v1/leaderworkerset_types.go):
# a replica is a group of leaderWorkerTemplate.size pods, a leader and size-1 workers; with
# this annotation every pod of a group shares one value of the named node label and no
# other group of the set uses that value (the LWS pod webhook's required pod affinity and
# anti-affinity).
LWS_EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
_BASIC = ("cpu", "memory", "ephemeral-storage", "pods")
_MSG_UNSCHEDULABLE = "node(s) were unschedulable"
_MSG_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
_MSG_TOO_MANY_PODS = "Too many pods"
_MSG_NODE_NAME = "node(s) didn't match the requested node name"
# A LeaderWorkerSet group that no free domain holds whole: the scheduler's InterPodAffinity
# reason for the required pod affinity the LWS webhook injects.
_MSG_GROUP = "node(s) didn't match pod affinity rules"
# Whole GPUs claimed through DRA (deviceplugin.DRA_GPU_CLASS) count as a resource of their
# own; the DynamicResources filter's reason
# (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go).
_MSG_DRA = "cannot allocate all claims"


@dataclass(frozen=True)
class PodShape:
    """What the filters look at in a pod template."""

    requests: tuple[tuple[str, int], ...]
    node_selector: tuple[tuple[str, str], ...] = ()
    node_affinity: tuple = ()  # required terms: ((("key", "op", (values...)), ...), fields), ...
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    uses_dra: bool = False
    node_name: str | None = None  # spec.nodeName: the NodeName filter

    @property
    def gpu_requests(self) -> dict[str, int]:
        """The pod's `nvidia.com/*` requests (whole GPUs, MIG devices, shared replicas)."""
        return {r: q for r, q in self.requests if r.startswith("nvidia.com/")}


@dataclass(frozen=True)
class ManifestWorkload:
    """A controller (or bare pod) found in rendered manifests and the replica range fit
    checks; the spec's workload is `fleet.spec.Workload`."""

    kind: str
    namespace: str
    name: str
    shape: PodShape
    min_replicas: int
    max_replicas: int
    scaled_by: str | None = None
    priority: int = 0
    pod_labels: tuple[tuple[str, str], ...] = ()
    anti_affinity: tuple = ()  # required terms: (topologyKey, (matchLabels, matchExpressions), namespaces|None)
    group_size: int = 1                      # pods per replica (a LeaderWorkerSet group)
    worker_shape: PodShape | None = None     # a group's workers (None: like the leader)
    group_domain: str | None = None          # LWS exclusive-topology: one label value per group

    @property
    def ref(self) -> str:
        """`kind/namespace/name`, as reports name the workload."""
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class WorkloadFit:
    """One workload in one scenario: how many replicas were scheduled, where, and why the rest are Pending."""

    workload: str
    replicas: int
    scheduled: int
    pending: int
    reason: str | None
    nodes: tuple[tuple[str, int], ...]
    extra_replicas: int

    def to_dict(self) -> dict:
        """Plain data for `--output yaml|json`."""
        d = {"workload": self.workload, "replicas": self.replicas, "scheduled": self.scheduled,
             "pending": self.pending}
        if self.reason:
            d["reason"] = self.reason
        d["nodes"] = dict(self.nodes)
        d["extraReplicasThatFit"] = self.extra_replicas
        return d


@dataclass(frozen=True)
class NodeUse:
    """One node after placement: pods and GPU resources used of allocatable."""

    node: str
    pods: int
    gpu: tuple[tuple[str, int, int], ...]  # (resource, used, allocatable)

    def to_dict(self) -> dict:
        """Plain data for `--output yaml|json`."""
        return {"node": self.node, "pods": self.pods,
                "resources": {r: {"used": u, "allocatable": a} for r, u, a in self.gpu}}


@dataclass(frozen=True)
class Scenario:
    """Every workload placed at one replica count (`min` or `max`) on the inventory."""

    name: str
    workloads: tuple[WorkloadFit, ...]
    nodes: tuple[NodeUse, ...]
    headroom: tuple[tuple[str, int], ...]

    @property
    def fits(self) -> bool:
        """True when no pod stays Pending."""
        return all(w.pending == 0 for w in self.workloads)

    @property
    def pending(self) -> int:
        """Pods that stay Pending, over all workloads."""
        return sum(w.pending for w in self.workloads)

    def to_dict(self) -> dict:
        """Plain data for `--output yaml|json`."""
        return {"fits": self.fits, "pending": self.pending,
                "workloads": [w.to_dict() for w in self.workloads],
                "nodes": [n.to_dict() for n in self.nodes],
                "headroom": dict(self.headroom)}


@dataclass(frozen=True)
class FitReport:
    """Both scenarios, plus what was skipped and what fit does not model."""

    min: Scenario
    max: Scenario
    skipped: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    placement: str = PLACEMENT
    not_modelled: tuple[str, ...] = NOT_MODELLED

    @property
    def fits(self) -> bool:
        """True when both the min and the max scenario fit."""
        return self.min.fits and self.max.fits

    def to_dict(self) -> dict:
        """Plain data for `--output yaml|json` (the keys `report_table` reads)."""
        return {"fits": self.fits, "minFits": self.min.fits, "maxFits": self.max.fits,
                "placement": self.placement, "notModelled": list(self.not_modelled),
                "warnings": list(self.warnings), "skipped": list(self.skipped),
                "scenarios": {"min": self.min.to_dict(), "max": self.max.to_dict()}}


# -- reading manifests -----------------------------------------------------------------------
def _where(obj: Mapping) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return f"{obj.get('kind')}/{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _container_requests(c: Mapping, where: str) -> dict[str, int]:
    res = c.get("resources") or {}
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    out: dict[str, int] = {}
    for name in set(limits) | set(requests):
        basic = name in _BASIC or name.startswith("hugepages-")
        try:
            lim = resource_amount(name, limits[name]) if name in limits else None
            req = resource_amount(name, requests[name]) if name in requests else None
        except ValueError as exc:
            raise CapacityError(f"container {c.get('name')}: {exc}", source=where,
                                field="resources") from None
        if not basic:
            if lim is None:
                raise CapacityError(f"container {c.get('name')}: {name} needs a limit; extended resources "
                                    "cannot be overcommitted, so set limits (requests, if given, equal)",
                                    source=where, field="resources.limits")
            if req is not None and req != lim:
                raise CapacityError(f"container {c.get('name')}: {name} requests ({req}) must equal limits "
                                    f"({lim}); extended resources cannot be overcommitted",
                                    source=where, field="resources.requests")
        amount = req if req is not None else lim
        if amount:
            out[name] = amount
    return out


def _pod_requests(spec: Mapping, where: str) -> dict[str, int]:
    """Effective pod requests: max(sum of containers + sidecars, largest init container)."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        for r, q in _container_requests(c, where).items():
            total[r] = total.get(r, 0) + q
    sidecar: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        req = _container_requests(c, where)
        if c.get("restartPolicy") == "Always":  # native sidecar: runs alongside
            for r, q in req.items():
                total[r] = total.get(r, 0) + q
                sidecar[r] = sidecar.get(r, 0) + q
        else:
            for r, q in req.items():
                init_peak[r] = max(init_peak.get(r, 0), q + sidecar.get(r, 0))
    for r, q in init_peak.items():
        total[r] = max(total.get(r, 0), q)
    return total


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _terms(spec: Mapping, where: str) -> tuple:
    aff = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not aff:
        return ()
    terms = []
    for t in aff.get("nodeSelectorTerms") or ():
        exprs, fields = [], []
        for kind, out in (("matchExpressions", exprs), ("matchFields", fields)):
            for e in t.get(kind) or ():
                op = e.get("operator")
                values = tuple(str(v) for v in e.get("values") or ())
                if op not in _OPERATORS:
                    raise CapacityError(f"node affinity operator {op!r} is not one of {', '.join(_OPERATORS)}",
                                        source=where, field="affinity.nodeAffinity")
                if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
                    raise CapacityError(f"node affinity {op} needs exactly one integer value",
                                        source=where, field="affinity.nodeAffinity")
                if op in ("In", "NotIn") and not values:
                    raise CapacityError(f"node affinity {op} needs values", source=where,
                                        field="affinity.nodeAffinity")
                out.append((e.get("key"), op, values))
        terms.append((tuple(exprs), tuple(fields)))
    return (tuple(terms),)  # wrapped: () means "no required affinity"


def pod_shape(spec: Mapping, where: str = "pod") -> PodShape:
    """The filter-relevant part of a pod spec."""
    tolerations = tuple((t.get("key") or "", t.get("operator") or "Equal", str(t.get("value") or ""),
                         t.get("effect") or "") for t in spec.get("tolerations") or ())
    uses_dra = bool(spec.get("resourceClaims")) or any(
        (c.get("resources") or {}).get("claims") for c in spec.get("containers") or ())
    return PodShape(requests=tuple(sorted(_pod_requests(spec, where).items())),
                    node_selector=tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())),
                    node_affinity=_terms(spec, where), tolerations=tolerations, uses_dra=uses_dra,
                    node_name=spec.get("nodeName") or None)


def _selector(sel: Mapping | None, where: str) -> tuple | None:
    if sel is None:
        return None
    exprs = []
    for e in sel.get("matchExpressions") or ():
        op = e.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise CapacityError(f"label selector operator {op!r} is not In, NotIn, Exists or DoesNotExist",
                                source=where, field="affinity.podAntiAffinity")
        exprs.append((e.get("key"), op, tuple(str(v) for v in e.get("values") or ())))
    return (tuple(sorted((str(k), str(v)) for k, v in (sel.get("matchLabels") or {}).items())), tuple(exprs))


def _anti_affinity_terms(pod_spec: Mapping, where: str, warnings: list[str]) -> tuple:
    terms = []
    anti = ((pod_spec.get("affinity") or {}).get("podAntiAffinity") or {})
    for t in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        selector = _selector(t.get("labelSelector"), where)
        if selector is None or not t.get("topologyKey"):
            continue  # a null selector matches no pod
        if t.get("namespaceSelector") is not None:
            namespaces = None  # cannot evaluate namespace labels here: assume every namespace
            if t.get("namespaceSelector"):
                warnings.append(f"{where}: anti-affinity namespaceSelector is treated as all namespaces")
        else:
            namespaces = frozenset(t.get("namespaces") or ())  # empty: the pod's own namespace
        if t.get("matchLabelKeys") or t.get("mismatchLabelKeys"):
            warnings.append(f"{where}: anti-affinity matchLabelKeys/mismatchLabelKeys are ignored")
        terms.append((t["topologyKey"], selector, namespaces))
    return tuple(terms)


def workloads_from_manifests(objects: Sequence[Mapping]) -> tuple[list[ManifestWorkload], list[str], list[str]]:
    """Workloads with their replica range, plus skipped objects and warnings.

    A malformed object (a list where a map belongs, a non-number replica count) is a
    CapacityError naming the object, never a traceback.
    """
    try:
        return _workloads_from_manifests(objects)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        if isinstance(exc, CapacityError):
            raise
        for o in objects:  # error path only: find the object that cannot be read
            try:
                _workloads_from_manifests([o])
            except (AttributeError, TypeError, ValueError, KeyError) as inner:
                if isinstance(inner, CapacityError):
                    raise
                where = _where(o) if isinstance(o, Mapping) else repr(o)[:40]
                raise CapacityError(_WRONG_TYPE.format(what="object"), source=where) from None
        raise CapacityError(_WRONG_TYPE.format(what="manifests")) from None


# Python's own words ("list indices must be integers or slices, not str") describe the
# reader, not the input: a malformed object is worded for the person who wrote it.
_WRONG_TYPE = ("malformed {what}: a field holds the wrong type (a list where a mapping belongs, text "
               "where a number belongs, or the like); render it with helm or kubectl first")


def _workloads_from_manifests(objects: Sequence[Mapping]) -> tuple[list[ManifestWorkload], list[str], list[str]]:
    priorities = {o["metadata"]["name"]: int(o.get("value", 0)) for o in objects
                  if isinstance(o, Mapping) and o.get("kind") == "PriorityClass" and o.get("metadata")}
    scalers: dict[tuple[str, str, str], list[tuple[str, int, int]]] = {}
    for o in objects:
        if not isinstance(o, Mapping):
            continue
        kind, spec, meta = o.get("kind"), o.get("spec") or {}, o.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        if kind == "HorizontalPodAutoscaler":
            ref = spec.get("scaleTargetRef") or {}
            scalers.setdefault((ref.get("kind", ""), ns, ref.get("name", "")), []).append(
                (f"HorizontalPodAutoscaler/{meta.get('name')}", int(spec.get("minReplicas", 1)),
                 int(spec.get("maxReplicas", 0))))
        elif kind == "ScaledObject":
            ref = spec.get("scaleTargetRef") or {}
            scalers.setdefault((ref.get("kind", "Deployment"), ns, ref.get("name", "")), []).append(
                (f"ScaledObject/{meta.get('name')}", int(spec.get("minReplicaCount", 0)),
                 int(spec.get("maxReplicaCount", 100))))
    workloads, skipped, warnings = [], [], []
    templates = {((o.get("metadata") or {}).get("namespace") or "default", (o.get("metadata") or {}).get("name")): o
                 for o in objects if isinstance(o, Mapping) and o.get("kind") == "ResourceClaimTemplate"}
    for o in objects:
        if not isinstance(o, Mapping) or o.get("kind") not in WORKLOAD_KINDS:
            if isinstance(o, Mapping) and o.get("kind") == "DaemonSet":
                skipped.append(f"{_where(o)}: DaemonSets are not simulated")
            continue
        meta = o.get("metadata") or {}
        where = _where(o)
        if "helm.sh/hook" in (meta.get("annotations") or {}):
            skipped.append(f"{where}: helm hook, not part of the release's steady state")
            continue
        kind, spec = o["kind"], o.get("spec") or {}
        pod_spec = spec if kind == "Pod" else ((spec.get("template") or {}).get("spec") or {})
        group_size, worker_shape, group_domain = 1, None, None
        template_meta = meta if kind == "Pod" else ((spec.get("template") or {}).get("metadata") or {})
        if kind == "LeaderWorkerSet":
            lwt = spec.get("leaderWorkerTemplate") or {}
            worker = lwt.get("workerTemplate") or {}
            leader = lwt.get("leaderTemplate") or worker
            pod_spec, template_meta = leader.get("spec") or {}, leader.get("metadata") or {}
            group_size = int(lwt.get("size", 1))
            if group_size > 1:
                worker_shape = pod_shape(worker.get("spec") or {}, where)
            group_domain = (meta.get("annotations") or {}).get(LWS_EXCLUSIVE_TOPOLOGY) or None
        shape = pod_shape(pod_spec, where)
        if not shape.gpu_requests and not shape.uses_dra:
            skipped.append(f"{where}: requests no nvidia.com/* resource")
            continue
        if kind == "Pod":
            lo = hi = 1
        elif kind == "Job":
            lo = hi = int(spec.get("parallelism", 1))
        else:
            lo = hi = int(spec.get("replicas", 1))
        ns = meta.get("namespace") or "default"
        scaled_by = None
        found = scalers.get((kind, ns, meta.get("name")), [])
        if found:
            scaled_by, lo, hi = found[-1]
            if len(found) > 1:
                warnings.append(f"{where} is scaled by {len(found)} autoscalers "
                                f"({', '.join(f[0] for f in found)}); they will fight; fit uses {scaled_by}")
        if lo > hi:
            raise CapacityError(f"minimum replicas {lo} exceed maximum {hi}", source=scaled_by or where)
        if shape.uses_dra:
            devices = _dra_gpus(pod_spec, ns, templates)
            if devices is None:
                warnings.append(f"{where} uses DRA ResourceClaims fit cannot count (not whole "
                                f"{DRA_GPU_CLASS} devices of a ResourceClaimTemplate in the "
                                "manifests); fit checks only its other requests")
            elif devices:
                shape = replace(shape, requests=tuple(sorted(shape.requests + ((DRA_GPU_CLASS, devices),))))
        if pod_spec.get("topologySpreadConstraints") and any(
                c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
                for c in pod_spec["topologySpreadConstraints"]):
            warnings.append(f"{where} has DoNotSchedule topology spread constraints; fit ignores them, "
                            "so it may report pods as schedulable that the scheduler keeps Pending")
        if ((pod_spec.get("affinity") or {}).get("podAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"):
            warnings.append(f"{where} has required pod affinity; fit ignores it")
        workloads.append(ManifestWorkload(kind=kind, namespace=ns, name=meta.get("name"), shape=shape,
                                  min_replicas=lo, max_replicas=hi, scaled_by=scaled_by,
                                  priority=priorities.get(pod_spec.get("priorityClassName"),
                                                          int(pod_spec.get("priority", 0) or 0)),
                                  pod_labels=tuple(sorted((str(k), str(v)) for k, v in
                                                          (template_meta.get("labels") or {}).items())),
                                  anti_affinity=_anti_affinity_terms(pod_spec, where, warnings),
                                  group_size=group_size, worker_shape=worker_shape,
                                  group_domain=group_domain))
    return workloads, skipped, warnings


def _dra_gpus(pod_spec: Mapping, ns: str, templates: Mapping) -> int | None:
    """Whole GPUs a pod claims through DRA: the ExactCount requests of DeviceClass
    gpu.nvidia.com in the ResourceClaimTemplates its resourceClaims name; None when some
    claim is anything else (another class, a selector-free count fit cannot read, a
    ResourceClaim or template not in the manifests)."""
    total = 0
    for claim in pod_spec.get("resourceClaims") or ():
        tmpl = templates.get((ns, (claim or {}).get("resourceClaimTemplateName")))
        if tmpl is None:
            return None
        for req in (((tmpl.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or ():
            exactly = (req or {}).get("exactly") or {}
            count = exactly.get("count", 1)
            if exactly.get("deviceClassName") != DRA_GPU_CLASS or \
                    exactly.get("allocationMode", "ExactCount") != "ExactCount" or \
                    not isinstance(count, int) or isinstance(count, bool) or count < 1:
                return None
            total += count
    return total


def dra_gpus(node: Node) -> int:
    """GPUs a node offers to DRA claims: its GPU count (GFD's nvidia.com/gpu.count) when the
    device plugin advertises none of them (NVIDIA's DRA driver and device plugin must not
    share a node), else 0."""
    return node.gpu.count if node.gpu.count and not node.gpu_resources else 0


# -- filters -----------------------------------------------------------------------------------
def _tolerates(tolerations, key: str, value: str, effect: str) -> bool:
    """v1.Toleration.ToleratesTaint for each toleration (k8s.io/api core/v1 toleration.go)."""
    for t_key, t_op, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if t_key and t_key != key:
            continue
        if t_op == "Exists" or (t_op == "Equal" and t_value == value):
            return True
    return False


def _expr_matches(labels: Mapping[str, str], key: str, op: str, values: tuple) -> bool:
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:
        return False
    try:
        have, want = int(labels[key]), int(values[0])
    except ValueError:
        return False
    return have > want if op == "Gt" else have < want


def _affinity_matches(shape: PodShape, node: Node) -> bool:
    for k, v in shape.node_selector:
        if node.labels.get(k) != v:
            return False
    if not shape.node_affinity:
        return True
    for exprs, fields in shape.node_affinity[0]:
        if not exprs and not fields:
            continue  # an empty term matches no node
        if all(_expr_matches(node.labels, *e) for e in exprs) and \
                all(_expr_matches({"metadata.name": node.name}, *f) for f in fields):
            return True
    return False


def static_reason(shape: PodShape, node: Node) -> str | None:
    """The first failing non-resource filter, in kube-scheduler's order, or None."""
    if node.unschedulable and not _tolerates(shape.tolerations, "node.kubernetes.io/unschedulable", "",
                                             "NoSchedule"):
        return _MSG_UNSCHEDULABLE
    if shape.node_name is not None and shape.node_name != node.name:
        return _MSG_NODE_NAME
    for t in node.taints:
        if t.effect in ("NoSchedule", "NoExecute") and not _tolerates(shape.tolerations, t.key, t.value, t.effect):
            return f"node(s) had untolerated taint {{{t.key}: {t.value}}}"
    if not _affinity_matches(shape, node):
        return _MSG_AFFINITY
    return None


def _resource_reasons(requests, free: Mapping[str, int], pods_free: int | None) -> list[str]:
    reasons = []
    if pods_free is not None and pods_free < 1:
        reasons.append(_MSG_TOO_MANY_PODS)
    for r, q in requests:
        have = free.get(r)
        if have is None and r in _BASIC:
            continue  # not in the inventory: unlimited
        if (have or 0) < q:
            reasons.append(_MSG_DRA if r == DRA_GPU_CLASS else f"Insufficient {r}")
    return reasons


def fit_error(num_nodes: int, reasons: Iterable[str]) -> str:
    """kube-scheduler's FitError text: counts per reason, sorted as strings."""
    hist: dict[str, int] = {}
    for r in reasons:
        hist[r] = hist.get(r, 0) + 1
    parts = sorted(f"{v} {k}" for k, v in hist.items())
    return f"0/{num_nodes} nodes are available: {', '.join(parts)}."


# -- simulation --------------------------------------------------------------------------------
_HOSTNAME = "kubernetes.io/hostname"
_MSG_ANTI = "node(s) didn't match pod anti-affinity rules"
_MSG_EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"


def _selector_matches(selector: tuple, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: matchLabels AND matchExpressions; {} matches all."""
    match_labels, exprs = selector
    if any(labels.get(k) != v for k, v in match_labels):
        return False
    return all(_expr_matches(labels, k, op, values) for k, op, values in exprs)


def _term_matches(term: tuple, pod_labels: Mapping[str, str], pod_ns: str, owner_ns: str) -> bool:
    _key, selector, namespaces = term
    if namespaces is not None and pod_ns not in (namespaces or {owner_ns}):
        return False  # None: every namespace; empty: the term owner's namespace
    return _selector_matches(selector, pod_labels)


class _Cluster:
    """Free resources and placed pods per node; first-fit placement per workload."""

    def __init__(self, inventory: Inventory, workloads: Sequence[ManifestWorkload]):
        self.nodes = list(inventory.nodes)  # sorted by name
        self.workloads = workloads
        self.free = [{**n.allocatable, DRA_GPU_CLASS: dra_gpus(n)} for n in self.nodes]
        self.pods_free = [n.allocatable.get("pods") for n in self.nodes]
        self.pod_count = [0] * len(self.nodes)
        self.static: dict[PodShape, list[str | None]] = {}
        self.feasible: dict[PodShape, list[int]] = {}
        self.cursor = [0] * len(workloads)
        # Required pod anti-affinity: (topologyKey, workloads it excludes, which side's term).
        self.conflicts: list[list[tuple[str, frozenset, str]]] = [[] for _ in workloads]
        for w, wl in enumerate(workloads):
            for term in wl.anti_affinity:
                hit = frozenset(o for o, other in enumerate(workloads)
                                if _term_matches(term, dict(other.pod_labels), other.namespace, wl.namespace))
                if hit:
                    self.conflicts[w].append((term[0], hit, _MSG_ANTI))
                    for o in hit:  # symmetry: the scheduler also honours existing pods' terms
                        self.conflicts[o].append((term[0], frozenset([w]), _MSG_EXISTING_ANTI))
        self.keys = sorted({k for c in self.conflicts for k, _, _ in c})
        self.domains = {k: [self._domain(i, k) for i in range(len(self.nodes))] for k in self.keys}
        self.placed: dict[tuple[str, str], dict[int, int]] = {}
        self.group_domains: dict[int, set[str]] = {}   # LWS: domains held by a group, per workload

    def _domain(self, i: int, key: str) -> str | None:
        value = self.nodes[i].labels.get(key)
        return self.nodes[i].name if value is None and key == _HOSTNAME else value

    def _static(self, shape: PodShape) -> list[int]:
        if shape not in self.static:
            reasons = [static_reason(shape, n) for n in self.nodes]
            self.static[shape] = reasons
            self.feasible[shape] = [i for i, r in enumerate(reasons) if r is None]
        return self.feasible[shape]

    def _fits(self, shape: PodShape, i: int) -> bool:
        room = self._room(shape, i)
        return room is None or room >= 1

    def _room(self, shape: PodShape, i: int) -> int | None:
        """How many more pods of `shape` node i holds now (None: no limit). An extended
        resource the node does not list counts as 0; an unlisted basic one (_BASIC) as
        no limit."""
        n = self.pods_free[i]
        free = self.free[i]
        for r, q in shape.requests:
            have = free.get(r)
            if have is None:
                if r in _BASIC:
                    continue
                have = 0
            m = have // q
            n = m if n is None else min(n, m)
        return n

    def _anti_reason(self, w: int, i: int) -> str | None:
        """InterPodAffinity's Filter checks the pod's own anti-affinity before existing pods' terms."""
        found = None
        for key, group, msg in self.conflicts[w]:
            dom = self.domains[key][i]
            if dom is None:
                continue
            placed = self.placed.get((key, dom))
            if placed and any(placed.get(g) for g in group):
                if msg == _MSG_ANTI:
                    return msg
                found = msg
        return found

    def place(self, w: int) -> int | None:
        """First fit. Resources only shrink and pods only arrive, so a node that cannot take
        this workload's pod now never will: the per-workload cursor only moves forward."""
        shape = self.workloads[w].shape
        feas, k = self._static(shape), self.cursor[w]
        anti = bool(self.conflicts[w])
        while k < len(feas) and not (self._fits(shape, feas[k]) and not (anti and self._anti_reason(w, feas[k]))):
            k += 1
        self.cursor[w] = k
        if k == len(feas):
            return None
        i = feas[k]
        self._commit(w, shape, i)
        return i

    def _commit(self, w: int, shape: PodShape, i: int) -> None:
        free = self.free[i]
        for r, q in shape.requests:
            if r in free:
                free[r] -= q
        if self.pods_free[i] is not None:
            self.pods_free[i] -= 1
        self.pod_count[i] += 1
        for key in self.keys:
            dom = self.domains[key][i]
            if dom is not None:
                slot = self.placed.setdefault((key, dom), {})
                slot[w] = slot.get(w, 0) + 1

    def _snapshot(self) -> tuple[Any, ...]:
        return ([dict(f) for f in self.free], list(self.pods_free), list(self.pod_count),
                list(self.cursor), {k: dict(v) for k, v in self.placed.items()},
                {k: set(v) for k, v in self.group_domains.items()})

    def _restore(self, saved: tuple[Any, ...]) -> None:
        (self.free, self.pods_free, self.pod_count, self.cursor, self.placed,
         self.group_domains) = saved

    def place_group(self, w: int) -> list[int] | None:
        """All or nothing: the nodes of one LeaderWorkerSet group (leader first, then the
        workers, first fit each), inside one domain of its exclusive-topology label that no
        other group of the set holds (domains in label-value order); None, with nothing
        placed, when no domain holds the whole group."""
        wl = self.workloads[w]
        shapes = [wl.shape] + [wl.worker_shape or wl.shape] * (wl.group_size - 1)
        taken = self.group_domains.setdefault(w, set())
        domains: list[str | None] = [None]
        if wl.group_domain:
            label = wl.group_domain
            domains = [d for d in sorted({n.labels[label] for n in self.nodes if label in n.labels} - taken)]
        for dom in domains:
            saved = self._snapshot()
            got: list[int] = []
            for shape in shapes:
                i = next((i for i in self._static(shape)
                          if (dom is None or self.nodes[i].labels.get(wl.group_domain or "") == dom)
                          and self._fits(shape, i) and not self._anti_reason(w, i)), None)
                if i is None:
                    break
                self._commit(w, shape, i)
                got.append(i)
            if len(got) == len(shapes):
                if dom is not None:
                    self.group_domains[w].add(dom)
                return got
            self._restore(saved)
        return None

    def diagnose(self, w: int) -> str:
        """FitError for one more pod of workload w, against the current state."""
        shape = self.workloads[w].shape
        self._static(shape)
        reasons = []
        for i, r in enumerate(self.static[shape]):
            if r is not None:
                reasons.append(r)
                continue
            res = _resource_reasons(shape.requests, self.free[i], self.pods_free[i])
            if res:
                reasons.extend(res)
                continue
            anti = self._anti_reason(w, i)
            if anti:
                reasons.append(anti)
            elif self.workloads[w].group_size > 1:
                # the node could take a pod, but no domain holds the whole group
                reasons.append(_MSG_GROUP)
        return fit_error(len(self.nodes), reasons)

    def extra(self, w: int) -> int:
        """How many more pods of workload w fit now, alone."""
        shape = self.workloads[w].shape
        if self.workloads[w].group_size > 1:   # whole groups, placed for real on a copy
            saved = self._snapshot()
            groups = 0
            while self.place_group(w) is not None:
                groups += 1
            self._restore(saved)
            return groups
        if self.conflicts[w]:  # place them for real on a copy of the state
            saved = ([dict(f) for f in self.free], list(self.pods_free), list(self.pod_count), list(self.cursor),
                     {k: dict(v) for k, v in self.placed.items()})
            n = 0
            while self.place(w) is not None:
                n += 1
            self.free, self.pods_free, self.pod_count, self.cursor, self.placed = saved
            return n
        total = 0
        for i in self._static(shape):  # identical pods fill each node independently
            n = self._room(shape, i)
            total += max(n, 0) if n is not None else 0
        return total


def _simulate(name: str, workloads: Sequence[ManifestWorkload], inventory: Inventory, counts: Sequence[int]) -> Scenario:
    cluster = _Cluster(inventory, workloads)
    placed = [dict() for _ in workloads]
    scheduled = [0] * len(workloads)
    groups: dict[int, list[int]] = {}
    for w in range(len(workloads)):
        groups.setdefault(workloads[w].priority, []).append(w)
    for prio in sorted(groups, reverse=True):
        members = groups[prio]
        for rnd in range(max((counts[w] for w in members), default=0)):
            for w in members:
                if rnd < counts[w]:
                    if workloads[w].group_size > 1:   # a group: all its pods or none
                        got = cluster.place_group(w)
                        if got is not None:
                            scheduled[w] += 1
                            for j in got:
                                node = cluster.nodes[j].name
                                placed[w][node] = placed[w].get(node, 0) + 1
                        continue
                    i = cluster.place(w)
                    if i is not None:
                        scheduled[w] += 1
                        node = cluster.nodes[i].name
                        placed[w][node] = placed[w].get(node, 0) + 1
    fits = []
    for w, wl in enumerate(workloads):
        pending = counts[w] - scheduled[w]
        fits.append(WorkloadFit(workload=wl.ref, replicas=counts[w], scheduled=scheduled[w], pending=pending,
                                reason=cluster.diagnose(w) if pending else None,
                                nodes=tuple(sorted(placed[w].items())), extra_replicas=cluster.extra(w)))
    uses, headroom = [], {}
    for i, node in enumerate(cluster.nodes):
        gpu = tuple((r, a - cluster.free[i][r], a) for r, a in sorted(node.allocatable.items())
                    if r.startswith("nvidia.com/"))
        uses.append(NodeUse(node=node.name, pods=cluster.pod_count[i], gpu=gpu))
        if not node.unschedulable:
            for r, used, a in gpu:
                headroom[r] = headroom.get(r, 0) + a - used
    return Scenario(name=name, workloads=tuple(fits), nodes=tuple(uses), headroom=tuple(sorted(headroom.items())))


def fit(manifests: Sequence[Mapping], inventory: Inventory) -> FitReport:
    """Simulate min and max replicas of every GPU workload in `manifests` on `inventory`."""
    workloads, skipped, warnings = workloads_from_manifests(manifests)
    claims = [w for w in workloads if dict(w.shape.requests).get(DRA_GPU_CLASS)]
    if claims and not any(dra_gpus(n) for n in inventory.nodes):
        # no node reports GPUs outside the device plugin (no GFD labels?): do not invent
        # a shortage, say what is not checked
        warnings += [f"{w.ref}: no node of the inventory reports GPUs for DRA claims "
                     "(nvidia.com/gpu.count without device-plugin resources); fit checks only "
                     "its other requests" for w in claims]
        workloads = [replace(w, shape=replace(w.shape, requests=tuple(
            (r, q) for r, q in w.shape.requests if r != DRA_GPU_CLASS))) if w in claims else w
            for w in workloads]
    if not inventory.nodes:
        warnings.append("the inventory has no nodes")
    lo = _simulate("min", workloads, inventory, [w.min_replicas for w in workloads])
    hi = _simulate("max", workloads, inventory, [w.max_replicas for w in workloads])
    return FitReport(min=lo, max=hi, skipped=tuple(skipped), warnings=tuple(warnings))


def load_manifests(text: str, source: str) -> list[dict]:
    """Objects from a rendered YAML (or JSON) stream; `List` objects are flattened."""
    from gpuvalues.yamlio.loader import parse_yaml

    docs = parse_yaml(text, source=source, error=CapacityError, all_documents=True, unique_keys=True)
    out = []
    for i, d in enumerate(docs):
        if isinstance(d, dict) and str(d.get("kind", "")).endswith("List") and isinstance(d.get("items"), list):
            out.extend(d["items"])
        elif isinstance(d, dict):
            out.append(d)
        else:
            line, col = _document_position(text, i)
            raise CapacityError(f"document {i + 1} is {type(d).__name__}, not a Kubernetes object (a mapping "
                                "with apiVersion and kind)", source=source, line=line, column=col)
    return out


def _document_position(text: str, index: int) -> tuple[int | None, int | None]:
    """Where the `index`-th non-empty document of `text` starts (1-based; error path only)."""
    import yaml

    from gpuvalues.yamlio.loader import SAFE_LOADER

    try:
        nodes = [n for n in yaml.compose_all(text, Loader=SAFE_LOADER) if n is not None]
    except yaml.YAMLError:
        return None, None
    if index >= len(nodes):
        return None, None
    return nodes[index].start_mark.line + 1, nodes[index].start_mark.column + 1

