"""Draining a node: the project's one implementation (remediation and MIG rollouts use it).

* `cordon` / `uncordon` and `add_taint` / `remove_taint` record what they did in a node
  annotation (`OWNER_ANNOTATION`, one entry per owner), and undo only what that owner did:
  a node someone else cordoned stays cordoned (NVSentinel#1424).
* `Drainer.step(node)` evicts a node's pods through the Eviction API
  (`POST pods/<name>/eviction`, policy/v1), which honours PodDisruptionBudgets: the API
  server answers 429 while a budget allows no disruption, and we retry that pod with
  exponential backoff. It never deletes a pod, unless the pod's namespace opts into
  delete-after-timeout (annotation `DRAIN_MODE_ANNOTATION: DeleteAfterTimeout`, timeout
  from `DELETE_AFTER_ANNOTATION`, seconds), and then only after the drain has run that
  long. Namespaces annotated `Skip` are left alone.
* Which pods: as `kubectl drain` (k8s.io/kubectl/pkg/drain/filters.go) it skips
  DaemonSet pods, mirror (static) pods and pods already terminating or finished; with
  `gpu_only` (the default) it takes only pods that request a GPU (an `nvidia.com/*`
  extended resource or a DRA resource claim).

Every eviction carries a UID precondition, so a new pod that reuses the name is never
evicted by a stale decision (NVSentinel#1415/#1451: races on stale drain events).

A LeaderWorkerSet group moves as a unit, through its leader: to drain any pod of a group
the drainer evicts the group's leader with foreground propagation (as LWS recreates a group
itself), so the group goes down once and comes back whole without the LWS controller having
to catch a worker's brief terminating state.

A LeaderWorkerSet group placed by exclusive topology (one group per domain, e.g. a rack)
moves as a unit, and the domain it leaves has one node fewer. LWS schedules leader first,
with no gang scheduling (sigs.k8s.io/lws issue 167): the recreated leader may land on a
healthy node of that same domain, and its workers, which must share its domain, then stay
Pending forever. So before the first eviction of such a group the drainer (given an
`owner`) puts a `PreferNoSchedule` taint (`DOMAIN_TAINT_KEY`) on the other nodes of the
drained node's domain: the scheduler prefers every other domain, and still uses this one
when nothing else has room. The taints are recorded on the drained node
(`DOMAIN_ANNOTATION`) and removed when that owner lets the node go (`uncordon`,
`remove_taint`).
"""
from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TypeVar

from gpuvalues.operations.kubeapi import MAX_LIST_BYTES, answered, read_json
from gpuvalues.operations.remediation import PREFIX

OWNER_ANNOTATION = f"{PREFIX}/owners"
DRAIN_MODE_ANNOTATION = f"{PREFIX}/drain-mode"
DELETE_AFTER_ANNOTATION = f"{PREFIX}/delete-after-seconds"
MODES = ("Evict", "Skip", "DeleteAfterTimeout")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


# --- what a pod is --------------------------------------------------------------------------

def is_gpu_pod(pod: Mapping[str, Any], prefixes: tuple[str, ...] = ("nvidia.com/",)) -> bool:
    """The pod asks for a GPU: an extended resource with one of `prefixes` in a container's
    limits or requests, or a DRA resource claim."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            if any(k.startswith(prefixes) for k in (res.get(part) or {})):
                return True
    return False


def skip_reason(pod: Mapping[str, Any]) -> str | None:
    """Why a drain leaves this pod alone (None: it must go), as kubectl drain's filters."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "terminating"
    if status.get("phase") in ("Succeeded", "Failed"):
        return "finished"
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "mirror pod"
    if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in meta.get("ownerReferences") or []):
        return "DaemonSet pod"
    return None


# A LeaderWorkerSet's pods carry its name (sigs.k8s.io/lws v0.9.0,
# api/leaderworkerset/v1/leaderworkerset_types.go SetNameLabelKey); under its default
# restartPolicy RecreateGroupOnPodRestart, evicting one pod of a group recreates the group.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
# The LWS controller copies the set's exclusive-topology annotation onto every pod of a group
# (pkg/controllers/pod_controller.go, leaderworkerset_controller.go; the pod webhook turns it
# into the group's (anti-)affinity on that topology key).
LWS_EXCLUSIVE_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
DOMAIN_TAINT_KEY = f"{PREFIX}/domain-degraded"
DOMAIN_TAINT_EFFECT = "PreferNoSchedule"
DOMAIN_ANNOTATION = f"{PREFIX}/degraded-domain"   # on the drained node: {owner: [mates tainted]}


LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"   # leaderworkerset_types.go GroupIndexLabelKey
LWS_WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # WorkerIndexLabelKey: "0" is the leader
LWS_LEADER_ANNOTATION = "leaderworkerset.sigs.k8s.io/leader-name"  # LeaderPodNameAnnotationKey, on workers


def lws_group(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, LeaderWorkerSet, group index) of a LeaderWorkerSet pod, else None: the
    pods of one group go down together, whichever of them is evicted."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not labels.get(LWS_NAME_LABEL) or LWS_GROUP_LABEL not in labels:
        return None
    return meta.get("namespace", ""), labels[LWS_NAME_LABEL], labels[LWS_GROUP_LABEL]


def exclusive_topology_key(pod: Mapping[str, Any]) -> str | None:
    """The topology key a LeaderWorkerSet pod's group must share (one group per domain)."""
    meta = pod.get("metadata") or {}
    if not (meta.get("labels") or {}).get(LWS_NAME_LABEL):
        return None
    return (meta.get("annotations") or {}).get(LWS_EXCLUSIVE_ANNOTATION) or None


def disruption_unit(pod: Mapping[str, Any]) -> tuple[str, str]:
    """What one eviction of `pod` disrupts, as (namespace, key): its controller (a
    Deployment's ReplicaSet, a StatefulSet), or for a LeaderWorkerSet pod the whole set: a
    group's leader and workers have different controllers (a leader StatefulSet, one worker
    StatefulSet per group), but evicting any of them takes the whole group down, so a drain
    step evicts at most one pod of each LeaderWorkerSet (its PodDisruptionBudget then sees
    the group's pods go unhealthy before the next one)."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace", "")
    lws = (meta.get("labels") or {}).get(LWS_NAME_LABEL)
    if lws:
        return ns, f"LeaderWorkerSet/{lws}"
    return ns, next((o.get("uid", "") for o in meta.get("ownerReferences") or [] if o.get("controller")),
                    meta.get("uid", ""))


@dataclass(frozen=True)
class NamespacePolicy:
    """How a namespace wants its pods drained."""
    mode: str = "Evict"
    delete_after_s: float | None = None

    @classmethod
    def from_namespace(cls, ns: Mapping | None) -> "NamespacePolicy":
        ann = ((ns or {}).get("metadata") or {}).get("annotations") or {}
        mode = ann.get(DRAIN_MODE_ANNOTATION, "Evict")
        if mode not in MODES:
            mode = "Evict"  # unknown value: the safe default (evict, never delete)
        after = None
        if mode == "DeleteAfterTimeout":
            try:
                after = float(ann.get(DELETE_AFTER_ANNOTATION, "600"))
            except ValueError:
                after = 600.0
        return cls(mode, after)


@dataclass(frozen=True)
class Eviction:
    """The outcome of one eviction request: evicted, blocked (429: a PDB), gone (404),
    deleted (delete-after-timeout), or error (anything else; retried)."""
    namespace: str
    name: str
    uid: str
    outcome: str
    message: str = ""


@dataclass(frozen=True)
class DrainProgress:
    """After one drain step: pods still to go and what this step did."""
    remaining: tuple[tuple[str, str, str], ...]   # (namespace, name, uid)
    results: tuple[Eviction, ...] = ()
    skipped: tuple[tuple[str, str, str], ...] = ()  # (namespace, name, why)

    @property
    def done(self) -> bool:
        return not self.remaining


@dataclass
class Backoff:
    """Per-key exponential backoff: base * 2**failures, capped at `cap` seconds."""
    base: float = 1.0
    cap: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _next: dict[str, tuple[float, int]] = field(default_factory=dict)

    def ready(self, key: str) -> bool:
        return self.clock() >= self._next.get(key, (0.0, 0))[0]

    def failed(self, key: str) -> float:
        n = self._next.get(key, (0.0, 0))[1]
        delay = min(self.cap, self.base * (2 ** n))
        self._next[key] = (self.clock() + delay, n + 1)
        return delay

    def forget(self, key: str) -> None:
        self._next.pop(key, None)


class TokenBucket:
    """Eviction pacing: `rate` tokens per minute, at most `burst` saved."""

    def __init__(self, per_minute: float, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = burst if burst is not None else max(1.0, per_minute / 6.0)
        self.tokens = self.burst
        self.clock = clock
        self.t = clock()

    def take_up_to(self, n: int) -> int:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now
        k = min(n, int(self.tokens))
        self.tokens -= k
        return k

    def give_back(self, n: int) -> None:
        self.tokens = min(self.burst, self.tokens + n)


class Drainer:
    """Evicts a node's pods through the Eviction API, a step at a time (at most one pod
    of each workload per step).

    `core` is a `kubernetes.client.CoreV1Api`. Call `step(node_name, since)` once per sync:
    it lists the node's pods, evicts those whose backoff allows (at most `max_per_step`),
    and returns the progress. `since` is when the drain began (unix time; the
    delete-after-timeout clock). `dry_run` sends the evictions with dryRun=All; `guard`,
    if given, is called before each eviction or delete and refuses it by raising (the
    remediation controller: still the leader, inside the sync's deadline)."""

    def __init__(self, core, *, gpu_only: bool = True, resource_prefixes: tuple[str, ...] = ("nvidia.com/",),
                 backoff: Backoff | None = None, max_per_step: int = 10, dry_run: bool = False,
                 wall: Callable[[], float] = time.time, guard: Callable[[], None] | None = None,
                 read_timeout: Callable[[], float] = lambda: 30.0, owner: str | None = None):
        self.core = core
        self.owner = owner          # who marks a LeaderWorkerSet group's domain (None: nobody)
        self.gpu_only = gpu_only
        self.prefixes = resource_prefixes
        self.backoff = backoff or Backoff()
        self.max_per_step = max_per_step
        self.dry_run = dry_run
        self.wall = wall
        self.guard = guard          # called before every eviction or delete (raises to refuse it)
        self.read_timeout = read_timeout   # seconds an answer may take to read (the caller's deadline)
        self._ns_cache: dict[str, NamespacePolicy] = {}

    def pods_to_drain(self, node: str) -> tuple[list[dict], list[dict], list[tuple[str, str, str]]]:
        """(pods that must leave, pods already leaving (terminating: never evicted again,
        but the node is not drained until they are gone), (namespace, name, why) of pods
        left alone)."""
        resp = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                     _preload_content=False)
        pods = read_json(resp, MAX_LIST_BYTES, timeout_s=self.read_timeout(), what=f"the pods of node {node}")["items"]
        go, leaving, skipped = [], [], []
        for p in pods:
            meta = p["metadata"]
            why = skip_reason(p)
            if why not in (None, "terminating"):
                skipped.append((meta["namespace"], meta["name"], why))
            elif self.gpu_only and not is_gpu_pod(p, self.prefixes):
                skipped.append((meta["namespace"], meta["name"], "no GPU"))
            elif self.policy(meta["namespace"]).mode == "Skip":
                skipped.append((meta["namespace"], meta["name"], "namespace opted out"))
            elif why == "terminating":
                leaving.append(p)
            else:
                go.append(p)
        return go, leaving, skipped

    def policy(self, namespace: str) -> NamespacePolicy:
        if namespace not in self._ns_cache:
            from kubernetes.client.exceptions import ApiException
            try:
                resp = self.core.read_namespace(namespace, _preload_content=False)
                self._ns_cache[namespace] = NamespacePolicy.from_namespace(
                    read_json(resp, timeout_s=self.read_timeout(), what=f"namespace {namespace}"))
            except ApiException:
                self._ns_cache[namespace] = NamespacePolicy()
        return self._ns_cache[namespace]

    def forget_policies(self) -> None:
        """Re-read namespace policies on the next step (call once per sync)."""
        self._ns_cache.clear()

    def step(self, node: str, since: float, budget: int | None = None,
             already: Iterable[str] = ()) -> DrainProgress:
        """Evict what may go now. `budget` caps evictions this step (a rate limit);
        `already` are pod UIDs evicted earlier in this drain (never evicted twice)."""
        pods, leaving, skipped = self.pods_to_drain(node)
        already = set(already)
        remaining, results = [], []
        cap = self.max_per_step if budget is None else min(budget, self.max_per_step)
        touched: set[tuple[str, str]] = set()
        for p in pods:
            meta = p["metadata"]
            ns, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
            remaining.append((ns, name, uid))
            if uid in already or not self.backoff.ready(uid) or len(results) >= cap:
                continue
            # One pod per workload per step: the next one waits for a later step, when the
            # PDB's status (recomputed by the disruption controller) has seen the first go.
            owner = disruption_unit(p)
            if owner in touched:
                continue
            touched.add(owner)
            pol = self.policy(ns)
            propagation = None
            if lws_group(p) is not None:
                # A group moves through its leader: evicted, it takes the group's workers with
                # it (their StatefulSet is the leader's dependent) and its StatefulSet recreates
                # the group. Foreground, as LWS itself recreates a group (pod_controller.go,
                # handleRestartPolicy): the leader stays until its workers are gone, so the new
                # group never meets the old one. Evicting a worker instead relies on the LWS
                # controller seeing it terminating; a pod gone before it looks (no grace
                # period, a controller restart) leaves the old leader with a new worker that
                # cannot join its group.
                leader = self.group_leader(p)
                if leader is None or (leader.get("metadata") or {}).get("deletionTimestamp") \
                        or leader["metadata"].get("uid", "") in already:
                    continue                          # the group is already going: p goes with it
                ns, name, uid = leader["metadata"]["namespace"], leader["metadata"]["name"], leader["metadata"].get("uid", "")
                if not self.backoff.ready(uid):
                    continue
                propagation = "Foreground"
                key = exclusive_topology_key(p)
                if key and self.owner:
                    # before the eviction: LWS recreates the group within a second of it
                    mark_domain(self.core, node, key, self.owner, dry_run=self.dry_run, guard=self.guard)
            if self.guard is not None:
                self.guard()
            if pol.mode == "DeleteAfterTimeout" and pol.delete_after_s is not None \
                    and self.wall() - since >= pol.delete_after_s:
                res = self.delete(ns, name, uid, propagation)
            else:
                res = self.evict(ns, name, uid, propagation)
            results.append(res)
            if res.outcome in ("evicted", "gone", "deleted"):
                self.backoff.forget(uid)
            else:
                self.backoff.failed(uid)
        gone = {(r.namespace, r.name) for r in results if r.outcome in ("gone",)}
        remaining = [x for x in remaining if (x[0], x[1]) not in gone]
        remaining += [(p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"].get("uid", "")) for p in leaving]
        return DrainProgress(tuple(remaining), tuple(results), tuple(skipped))

    def group_leader(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """The leader pod of a LeaderWorkerSet pod's group (the pod itself for a leader), read
        from the API server; None when it is gone or is not this group's (being replaced).
        Workers name it in an annotation (pod_controller.go, LeaderPodNameAnnotationKey)."""
        from kubernetes.client.exceptions import ApiException

        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LWS_WORKER_LABEL) == "0":
            return dict(pod)
        name = (meta.get("annotations") or {}).get(LWS_LEADER_ANNOTATION) \
            or f"{labels.get(LWS_NAME_LABEL)}-{labels.get(LWS_GROUP_LABEL)}"
        try:
            leader: dict[str, Any] = read_json(self.core.read_namespaced_pod(name, meta.get("namespace", ""),
                                                                             _preload_content=False),
                                               timeout_s=self.read_timeout(), what=f"the leader pod {name}")
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return leader if lws_group(leader) == lws_group(pod) else None

    def evict(self, namespace: str, name: str, uid: str, propagation: str | None = None) -> Eviction:
        """POST an Eviction (policy/v1) with a UID precondition (and `propagation`, the
        delete's propagationPolicy: the Eviction API deletes with the options given)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None,
                                                  propagation_policy=propagation,
                                                  dry_run=["All"] if self.dry_run else None))
        try:
            answered(self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False),
                     f"the eviction of {namespace}/{name}")
            return Eviction(namespace, name, uid, "evicted")
        except ApiException as e:
            return Eviction(namespace, name, uid, _outcome(e.status), _message(e))

    def delete(self, namespace: str, name: str, uid: str, propagation: str | None = None) -> Eviction:
        """Delete a pod (only for namespaces that opted into delete-after-timeout)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            answered(self.core.delete_namespaced_pod(name, namespace, body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid=uid) if uid else None, propagation_policy=propagation,
                dry_run=["All"] if self.dry_run else None), _preload_content=False), f"the delete of {namespace}/{name}")
            return Eviction(namespace, name, uid, "deleted")
        except ApiException as e:
            return Eviction(namespace, name, uid, "gone" if e.status == 404 else "error", _message(e))


def _outcome(status: int | None) -> str:
    # policy/v1 Eviction: 429 TooManyRequests while a PDB allows no disruption; 404 the
    # pod is gone; 409 the UID precondition failed (a new pod has the name: not ours).
    return {429: "blocked", 404: "gone", 409: "gone"}.get(status or 0, "error")


def _message(e) -> str:
    try:
        return json.loads(e.body).get("message", "") or str(e.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(e, "reason", e))


# --- cordon and taints, with ownership ---------------------------------------------------------

def _owner_lists(node: Mapping[str, Any], annotation: str) -> dict[str, list[str]]:
    """The JSON object {owner: [strings]} in one of the node's annotations; {} when absent or
    unreadable (a hand edit must not stop a drain)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(annotation) or "{}"
    try:
        data = json.loads(raw)
        return {str(k): [str(x) for x in v] for k, v in data.items() if isinstance(v, list)}
    except (ValueError, AttributeError):
        return {}


def owners(node: Mapping) -> dict[str, list[str]]:
    """owner -> what it did to the node ("cordon", "taint:<key>")."""
    return _owner_lists(node, OWNER_ANNOTATION)


def _with_owner(node: Mapping, owner: str, what: str, add: bool) -> str:
    data = owners(node)
    items = set(data.get(owner, []))
    items = items | {what} if add else items - {what}
    if items:
        data[owner] = sorted(items)
    else:
        data.pop(owner, None)
    return json.dumps(data, sort_keys=True)


_F = TypeVar("_F", bound=Callable[..., Any])


def _retry_on_conflict(fn: _F) -> _F:
    """Run a read-decide-patch helper again (a few times) when its patch meets a newer
    resourceVersion (409): each try re-reads the node and decides anew, as client-go's
    retry.RetryOnConflict. A node changes often by itself (status, the node lifecycle
    controller's unschedulable taint right after a cordon or uncordon)."""
    @functools.wraps(fn)
    def run(*args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        for attempt in range(5):
            try:
                return fn(*args, **kw)
            except ApiException as e:
                if e.status != 409 or attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))
    return run  # type: ignore[return-value]


def _read(core, name: str) -> dict:
    return read_json(core.read_node(name, _preload_content=False), what=f"node {name}")


def _patch(core, node: dict, spec: dict | None, annotations: dict | None, dry_run: bool) -> None:
    """Merge-patch with the read resourceVersion: a stale view fails (409) instead of
    overwriting someone else's newer change."""
    body: dict = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
    if annotations:
        body["metadata"]["annotations"] = annotations
    if spec is not None:
        body["spec"] = spec
    answered(core.patch_node(node["metadata"]["name"], body, _content_type="application/merge-patch+json",
                             _preload_content=False, **({"dry_run": "All"} if dry_run else {})),
             f"node {node['metadata']['name']}")


def domain_marks(node: Mapping[str, Any]) -> dict[str, list[str]]:
    """owner -> the other nodes of this node's domain it tainted (DOMAIN_ANNOTATION)."""
    return _owner_lists(node, DOMAIN_ANNOTATION)


@_retry_on_conflict
def mark_domain(core: Any, name: str, key: str, owner: str, dry_run: bool = False,
                guard: Callable[[], None] | None = None) -> list[str]:
    """Taint the other nodes of `name`'s domain (same value of label `key`) with
    DOMAIN_TAINT_KEY:PreferNoSchedule as `owner`, and record them on `name`. Idempotent;
    returns the nodes marked (none when `name` has no such label)."""
    node = _read(core, name)
    value = ((node.get("metadata") or {}).get("labels") or {}).get(key)
    if value is None:
        return []
    marks = domain_marks(node)
    if owner in marks:
        return marks[owner]
    resp = core.list_node(label_selector=f"{key}={value}", _preload_content=False)
    mates = sorted(n["metadata"]["name"] for n in read_json(resp, MAX_LIST_BYTES, what=f"the nodes of {key}={value}")["items"]
                   if n["metadata"]["name"] != name)
    if guard is not None:
        guard()
    # recorded first: a crash between the two writes leaves a record to undo, never a stray taint
    _patch(core, node, None, {DOMAIN_ANNOTATION: json.dumps({**marks, owner: mates}, sort_keys=True)}, dry_run)
    for m in mates:
        if guard is not None:
            guard()
        add_taint(core, m, DOMAIN_TAINT_KEY, DOMAIN_TAINT_EFFECT, owner, dry_run=dry_run)
    return mates


@_retry_on_conflict
def unmark_domain(core: Any, name: str, owner: str, dry_run: bool = False) -> list[str]:
    """Undo `mark_domain(name, ..., owner)`: remove `owner`'s domain taint from the nodes
    recorded on `name` (a mate another drain of the same owner still marks keeps it)."""
    node = _read(core, name)
    marks = domain_marks(node)
    mates = marks.pop(owner, None)
    if mates is None:
        return []
    _patch(core, node, None, {DOMAIN_ANNOTATION: json.dumps(marks, sort_keys=True) if marks else None}, dry_run)
    # one taint per owner on a mate: keep it while another node of this owner marks it
    from kubernetes.client.exceptions import ApiException
    others = set()
    try:
        resp = core.list_node(_preload_content=False)
        for n in read_json(resp, MAX_LIST_BYTES, what="the nodes")["items"]:
            if n["metadata"]["name"] != name:
                others.update(domain_marks(n).get(owner, []))
    except ApiException:
        others = set(mates)         # unsure: leave them marked rather than unmark a live drain's
    done = []
    for m in mates:
        if m in others:
            continue
        try:
            if remove_taint(core, m, DOMAIN_TAINT_KEY, owner, dry_run=dry_run):
                done.append(m)
        except ApiException as e:
            if e.status != 404:     # a mate deleted meanwhile has no taint left
                raise
    return done


@_retry_on_conflict
def cordon(core, name: str, owner: str, dry_run: bool = False) -> bool:
    """Mark the node unschedulable and record `owner` as the one who did. A node already
    cordoned by someone else is left as it is (returns False: not ours)."""
    node = _read(core, name)
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordon" in owners(node).get(owner, [])
    _patch(core, node, {"unschedulable": True}, {OWNER_ANNOTATION: _with_owner(node, owner, "cordon", True)}, dry_run)
    return True


@_retry_on_conflict
def uncordon(core, name: str, owner: str, dry_run: bool = False) -> bool:
    """Uncordon only if `owner` cordoned the node; returns whether it did."""
    node = _read(core, name)
    if "cordon" not in owners(node).get(owner, []):
        return False
    others = [o for o, items in owners(node).items() if o != owner and "cordon" in items]
    spec = None if others else {"unschedulable": None}
    _patch(core, node, spec, {OWNER_ANNOTATION: _with_owner(node, owner, "cordon", False)}, dry_run)
    if owner in domain_marks(node):
        unmark_domain(core, name, owner, dry_run)
    return True


@_retry_on_conflict
def add_taint(core, name: str, key: str, effect: str, owner: str, value: str = "",
              extra_annotations: Mapping[str, str] | None = None, dry_run: bool = False) -> bool:
    """Add taint key:effect, recorded as `owner`'s. A taint with that key that someone else
    put there is left alone (returns False)."""
    node = _read(core, name)
    taints = list((node.get("spec") or {}).get("taints") or [])
    ours = f"taint:{key}" in owners(node).get(owner, [])
    if any(t["key"] == key for t in taints):
        if ours and extra_annotations:
            _patch(core, node, None, dict(extra_annotations), dry_run)
        return ours
    t = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    ann = {OWNER_ANNOTATION: _with_owner(node, owner, f"taint:{key}", True), **(extra_annotations or {})}
    _patch(core, node, {"taints": taints + [t]}, ann, dry_run)
    return True


@_retry_on_conflict
def remove_taint(core, name: str, key: str, owner: str,
                 extra_annotations: Mapping[str, str] | None = None, dry_run: bool = False) -> bool:
    """Remove taint `key` only if `owner` added it; returns whether it did."""
    node = _read(core, name)
    if f"taint:{key}" not in owners(node).get(owner, []):
        if extra_annotations:
            _patch(core, node, None, dict(extra_annotations), dry_run)
        return False
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != key]
    ann = {OWNER_ANNOTATION: _with_owner(node, owner, f"taint:{key}", False), **(extra_annotations or {})}
    _patch(core, node, {"taints": taints}, ann, dry_run)
    if key != DOMAIN_TAINT_KEY and owner in domain_marks(node):
        unmark_domain(core, name, owner, dry_run)
    return True


# --- what would block a drain, from rendered manifests ------------------------------------------

def tolerates(toleration: Mapping, key: str, effect: str) -> bool:
    """core/v1 Toleration matching (k8s.io/api core/v1 toleration.go ToleratesTaint): an
    empty key with operator Exists matches every key; an empty effect matches every effect."""
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    return toleration["key"] == key


def drain_blockers(objects: Iterable[Mapping], taint_key: str, taint_effect: str = "NoSchedule") -> list[str]:
    """Why a drain of these rendered objects' GPU Deployments would hurt or stall: fewer
    than 2 replicas (HPA minReplicas, else spec.replicas), a toleration of the quarantine
    taint (pods would come back to the quarantined node), no PodDisruptionBudget, a PDB
    other than maxUnavailable 1, or one without unhealthyPodEvictionPolicy AlwaysAllow
    (a pod stuck unready on a broken GPU could not be evicted). Empty: drainable."""
    objects = list(objects)
    problems = []
    deps = [d for d in objects if d.get("kind") == "Deployment" and is_gpu_pod({"spec": d["spec"]["template"]["spec"]})]
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in objects if h.get("kind") == "HorizontalPodAutoscaler"}
    pdbs = [p for p in objects if p.get("kind") == "PodDisruptionBudget"]
    for d in deps:
        name = d["metadata"]["name"]
        replicas = hpas[name]["spec"].get("minReplicas", 1) if name in hpas else d["spec"].get("replicas", 1)
        if replicas < 2:
            problems.append(f"{name}: {replicas} replica(s): draining its node takes the service down")
        for t in d["spec"]["template"]["spec"].get("tolerations") or []:
            if tolerates(t, taint_key, taint_effect):
                problems.append(f"{name}: tolerates the quarantine taint {taint_key} ({t})")
        labels = d["spec"]["template"]["metadata"].get("labels") or {}
        mine = [p for p in pdbs if all(labels.get(k) == v for k, v in
                                      ((p["spec"].get("selector") or {}).get("matchLabels") or {}).items())]
        if not mine:
            problems.append(f"{name}: no PodDisruptionBudget: a drain may evict every replica at once")
        for p in mine:
            if p["spec"].get("maxUnavailable") != 1:
                problems.append(f"{name}: PDB {p['metadata']['name']} is not maxUnavailable 1 "
                                f"(maxUnavailable {p['spec'].get('maxUnavailable')}, minAvailable {p['spec'].get('minAvailable')})")
            if p["spec"].get("unhealthyPodEvictionPolicy") != "AlwaysAllow":
                problems.append(f"{name}: PDB {p['metadata']['name']} lacks unhealthyPodEvictionPolicy AlwaysAllow")
    return problems
