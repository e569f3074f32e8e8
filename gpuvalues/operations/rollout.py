"""`gpuvalues rollout`: apply a re-plan's MIG changes node by node, in waves (issue 17).

mig-manager reconfigures a node when its `nvidia.com/mig.config` label changes, but it only
waits for the GPU Operator's own DaemonSets; it never drains workloads (NVIDIA's advice is to
cordon, drain, relabel and uncordon by hand, gpu-operator#262). Per changed node, in order:

1. cordon (`drain.cordon`, owned: a node someone else cordoned stays theirs);
2. evict its GPU pods through the Eviction API (`drain.Drainer`: PDBs honoured, 429 retried
   with backoff, one pod per workload per step) — the project's one drain implementation;
3. set `nvidia.com/mig.config` to the new config;
4. wait for mig-manager's `nvidia.com/mig.config.state=success` (`failed` stops the rollout);
5. check the node advertises the new MIG resources (`nvidia.com/mig-<profile>` allocatable
   equal to the config's instance counts, mixed strategy; a stale `success` from the previous
   config cannot pass this);
6. uncordon.

Nodes the re-plan does not change are never touched. Waves (`plan_waves`, pure) hold at most
`max_unavailable_per_pool` nodes of a pool, and for every PodDisruptionBudget at most its
`disruptionsAllowed` pods across the wave's nodes (a node whose pods alone exceed it goes
alone; the Eviction API then paces it). Progress lives on the node (annotation
`ROLLOUT_ANNOTATION`: target config and step), so a rollout that stops resumes where it was.

Public API: `NodeChange`, `Wave`, `changes_from_replan(d)`, `expected_resources(devices)`,
`plan_waves(changes, pods, allowance, *, max_unavailable_per_pool=1, max_nodes_per_wave=None)`,
`describe(waves)` (the `--dry-run` text), `Rollout(core, waves, ...).run()`.
"""
from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from gpuvalues.catalog import mig_resource_name
from gpuvalues.errors import GpuValuesError
from gpuvalues.operations import drain

PREFIX = "rollout.gpu-inference.io"
ROLLOUT_ANNOTATION = f"{PREFIX}/state"
OWNER = "mig-rollout"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"   # set by mig-manager: pending|rebooting|success|failed
STEPS = ("start", "cordoned", "drained", "labelled", "done")


class RolloutError(GpuValuesError):
    """A rollout cannot go on (bad input, mig-manager failed, a timeout)."""


@dataclass(frozen=True)
class NodeChange:
    """One node to reconfigure: from its current config to `to`, and what it must advertise after."""

    node: str
    pool: str
    from_config: str | None
    to: str
    resources: Mapping[str, int]      # expected allocatable nvidia.com/mig-* after the change


@dataclass(frozen=True)
class Wave:
    """Nodes reconfigured together."""

    index: int
    changes: tuple[NodeChange, ...]
    pods: int = 0                     # GPU pods on these nodes when planned


def expected_resources(devices: Iterable[Mapping[str, int] | None]) -> dict[str, int]:
    """The mixed-strategy MIG resources a node with these per-GPU mig-devices advertises:
    one `nvidia.com/mig-<profile>` device per instance (k8s-device-plugin internal/rm/rm.go)."""
    out: Counter = Counter()
    for d in devices:
        for prof, n in (d or {}).items():
            if n:
                out[mig_resource_name(prof)] += n
    return dict(sorted(out.items()))


def changes_from_replan(d: Mapping) -> list[NodeChange]:
    """The node changes in a `replan` result (`Replan.to_dict()`, as `gpuvalues replan -o json` prints)."""
    try:
        devices = {}
        pools = {}
        for p in d["plan"]["pools"]:
            for ng in p["node_groups"]:
                devices[ng["config"]] = ng["devices"]
                pools[ng["config"]] = p["name"]
        out = []
        for c in d["changes"]:
            to = c["to"]
            out.append(NodeChange(c["node"], pools.get(to, ""), c.get("from"), to,
                                  expected_resources(dict(x) if x else None for x in devices.get(to, []))))
        return out
    except (KeyError, TypeError) as exc:
        raise RolloutError(f"not a replan result (`gpuvalues replan -o json`): missing {exc}") from None


def plan_waves(changes: Sequence[NodeChange], pods: Mapping[str, Mapping[str, int]],
               allowance: Mapping[str, int], *, max_unavailable_per_pool: int = 1,
               max_nodes_per_wave: int | None = None) -> tuple[Wave, ...]:
    """Group `changes` into waves. `pods[node][budget]` = GPU pods on `node` covered by the
    PodDisruptionBudget `budget`; `allowance[budget]` = its disruptionsAllowed. A wave holds at
    most `max_unavailable_per_pool` nodes per pool (and `max_nodes_per_wave` in all), and per
    budget at most its allowance of pods, except a node that alone exceeds it (alone in its wave).
    Nodes with the fewest pods go first; the order is deterministic."""
    if max_unavailable_per_pool < 1:
        raise RolloutError("max unavailable per pool must be >= 1")
    todo = sorted(changes, key=lambda c: (sum(pods.get(c.node, {}).values()), c.pool, c.node))
    waves: list[list[NodeChange]] = []
    while todo:
        wave: list[NodeChange] = []
        per_pool: Counter = Counter()
        used: Counter = Counter()
        rest = []
        for c in todo:
            mine = pods.get(c.node, {})
            fits = per_pool[c.pool] < max_unavailable_per_pool \
                and (max_nodes_per_wave is None or len(wave) < max_nodes_per_wave) \
                and all(used[b] + n <= allowance.get(b, 0) for b, n in mine.items() if b in allowance)
            if not wave and not fits and per_pool[c.pool] < max_unavailable_per_pool:
                fits = True          # too many pods for any wave: alone, the Eviction API paces it
            if fits:
                wave.append(c)
                per_pool[c.pool] += 1
                used.update(mine)
            else:
                rest.append(c)
        waves.append(wave)
        todo = rest
    return tuple(Wave(i + 1, tuple(w), sum(sum(pods.get(c.node, {}).values()) for c in w))
                 for i, w in enumerate(waves))


def describe(waves: Sequence[Wave]) -> str:
    """The ordered steps (`rollout --dry-run`)."""
    lines = []
    for w in waves:
        lines.append(f"wave {w.index}: {len(w.changes)} node(s), {w.pods} GPU pod(s) to move")
        for c in w.changes:
            res = ", ".join(f"{k} {v}" for k, v in c.resources.items()) or "no MIG devices"
            lines += [f"  {c.node} ({c.pool}): {c.from_config or '(unconfigured)'} -> {c.to}",
                      f"    1. cordon {c.node}",
                      f"    2. evict its GPU pods through the Eviction API (PodDisruptionBudgets honoured)",
                      f"    3. label {MIG_CONFIG_LABEL}={c.to}",
                      f"    4. wait for {MIG_STATE_LABEL}=success",
                      f"    5. check allocatable: {res}",
                      f"    6. uncordon {c.node}"]
    return "\n".join(lines) + "\n"


# --- reading the cluster -------------------------------------------------------------------

def _selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against labels (apimachinery semantics)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pods_and_budgets(core, policy, nodes: Iterable[str]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """GPU pods per node per PDB (`namespace/name`) and each PDB's disruptionsAllowed, read
    from the cluster (`core`: CoreV1Api, `policy`: PolicyV1Api)."""
    pdbs = json.loads(policy.list_pod_disruption_budget_for_all_namespaces(_preload_content=False).data)["items"]
    allowance = {f"{p['metadata']['namespace']}/{p['metadata']['name']}":
                 int((p.get("status") or {}).get("disruptionsAllowed", 0)) for p in pdbs}
    out: dict[str, dict[str, int]] = {}
    for node in nodes:
        items = json.loads(core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                            _preload_content=False).data)["items"]
        per: Counter = Counter()
        for pod in items:
            if drain.skip_reason(pod) or not drain.is_gpu_pod(pod):
                continue
            meta = pod["metadata"]
            keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pdbs
                    if p["metadata"]["namespace"] == meta["namespace"]
                    and _selector_matches((p.get("spec") or {}).get("selector"), meta.get("labels") or {})]
            for k in keys or [f"{meta['namespace']}/(no budget)"]:   # no budget: not limited by waves
                per[k] += 1
        out[node] = {k: v for k, v in per.items() if v}
    return out, allowance


# --- running it -----------------------------------------------------------------------------

@dataclass
class NodeResult:
    node: str
    to: str
    steps: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    done: bool = False


def _read(core, name: str) -> dict:
    return json.loads(core.read_node(name, _preload_content=False).data)


def _state(node: Mapping) -> dict:
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ROLLOUT_ANNOTATION)
    try:
        data = json.loads(raw) if raw else {}
        return data if isinstance(data, dict) else {}
    except ValueError:
        return {}


def advertises(node: Mapping, expected: Mapping[str, int]) -> bool:
    """The node's allocatable MIG resources are exactly `expected` (others absent or 0)."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    mig = {k: int(v) for k, v in alloc.items() if k.startswith("nvidia.com/mig-") and int(v)}
    return mig == {k: v for k, v in expected.items() if v}


class Rollout:
    """Drives the waves against the cluster. `core` is a CoreV1Api. Each `advance(change)`
    does what the node's recorded step allows and records the next one; `run()` loops the
    waves until every node is done, `timeout` seconds per wave."""

    def __init__(self, core, waves: Sequence[Wave], *, poll: float = 1.0, timeout: float = 900.0,
                 drainer: drain.Drainer | None = None, log: Callable[[str], None] = lambda m: None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.core = core
        self.waves = list(waves)
        self.poll, self.timeout = poll, timeout
        self.drainer = drainer or drain.Drainer(core)
        self.log, self.clock, self.sleep = log, clock, sleep
        self.results: dict[str, NodeResult] = {}

    def _record(self, node: dict, change: NodeChange, step: str, **extra: Any) -> None:
        state = {"target": change.to, "step": step, "at": time.time(), **extra}
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                             "annotations": {ROLLOUT_ANNOTATION: json.dumps(state, sort_keys=True)}}}
        self.core.patch_node(change.node, body, _content_type="application/merge-patch+json")
        self.results[change.node].steps.append(step)
        self.log(f"{change.node}: {step}")

    def advance(self, change: NodeChange) -> bool:
        """One step of `change`'s node; True once it is done. A write that loses a race with
        another writer of the node (409: its resourceVersion moved on) is retried next time."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._advance(change)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def _advance(self, change: NodeChange) -> bool:
        res = self.results.setdefault(change.node, NodeResult(change.node, change.to))
        node = _read(self.core, change.node)
        state = _state(node)
        step = state.get("step", "start") if state.get("target") == change.to else "start"
        labels = (node.get("metadata") or {}).get("labels") or {}
        if step == "done":
            res.done = True
            return True
        if step == "start":
            drain.cordon(self.core, change.node, OWNER)
            self._record(_read(self.core, change.node), change, "cordoned", since=time.time())
            return False
        if step == "cordoned":
            prog = self.drainer.step(change.node, float(state.get("since", time.time())), already=res.evicted)
            res.evicted += [r.uid for r in prog.results if r.outcome in ("evicted", "deleted")]
            for r in prog.results:
                if r.outcome == "blocked":
                    self.log(f"{change.node}: eviction of {r.namespace}/{r.name} blocked by its PodDisruptionBudget; "
                             "retrying")
            if prog.done:
                self._record(node, change, "drained")
            return False
        if step == "drained":
            body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                                 "labels": {MIG_CONFIG_LABEL: change.to}}}
            self.core.patch_node(change.node, body, _content_type="application/merge-patch+json")
            self._record(_read(self.core, change.node), change, "labelled")
            return False
        if step == "labelled":
            if labels.get(MIG_CONFIG_LABEL) != change.to:   # someone changed it back: set it again
                self._record(node, change, "drained")
                return False
            mstate = labels.get(MIG_STATE_LABEL)
            if mstate == "failed":
                raise RolloutError(f"{change.node}: mig-manager reports {MIG_STATE_LABEL}=failed for {change.to}; "
                                   "the node stays cordoned (see the mig-manager logs)")
            if mstate == "success" and advertises(node, change.resources):
                drain.uncordon(self.core, change.node, OWNER)
                self._record(_read(self.core, change.node), change, "done")
                res.done = True
                return True
            return False
        raise RolloutError(f"{change.node}: unknown rollout step {step!r} in {ROLLOUT_ANNOTATION}")

    def run(self) -> dict[str, NodeResult]:
        """Every wave in order; a wave ends when all its nodes are done."""
        for wave in self.waves:
            self.log(f"wave {wave.index}: {', '.join(c.node for c in wave.changes)}")
            pending = {c.node: c for c in wave.changes}
            deadline = self.clock() + self.timeout
            while pending:
                for name in sorted(pending):
                    if self.advance(pending[name]):
                        del pending[name]
                if not pending:
                    break
                if self.clock() > deadline:
                    raise RolloutError(f"wave {wave.index} not done after {self.timeout:g} s: "
                                       f"{', '.join(sorted(pending))} (rerun to resume)")
                self.sleep(self.poll)
        return self.results


def apply_mig_parted_config(core, namespace: str, name: str, cfg: Mapping, key: str = "config.yaml",
                            dry_run: bool = False) -> list[str]:
    """Merge the re-plan's mig-parted configs into the ConfigMap mig-manager reads (the GPU
    Operator's `migManager.config`, key `config.yaml`) before any node is relabelled; configs
    already there under other names are kept. Returns the config names written."""
    import yaml
    from kubernetes.client.exceptions import ApiException

    try:
        cm = json.loads(core.read_namespaced_config_map(name, namespace, _preload_content=False).data)
    except ApiException as exc:
        raise RolloutError(f"configmap {namespace}/{name}: {exc.status} {exc.reason}") from None
    current = yaml.safe_load((cm.get("data") or {}).get(key) or "") or {"version": "v1", "mig-configs": {}}
    merged = {"version": current.get("version", "v1"),
              "mig-configs": {**(current.get("mig-configs") or {}), **cfg.get("mig-configs", {})}}
    body = {"metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]},
            "data": {key: yaml.safe_dump(merged, sort_keys=False)}}
    core.patch_namespaced_config_map(name, namespace, body, _content_type="application/merge-patch+json",
                                     **({"dry_run": "All"} if dry_run else {}))
    return sorted(cfg.get("mig-configs", {}))
