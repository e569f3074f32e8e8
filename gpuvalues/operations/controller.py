"""The remediation controller loop (`gpuvalues remediate`).

A worker thread loops: renew the leader Lease (a coordination.k8s.io/v1 Lease, as
client-go's tools/leaderelection does it: holderIdentity, leaseDurationSeconds, renewTime,
and expiry judged on the local clock from when the record last changed), then, while
leader, sync: list the nodes, read the signals (signals.py), advance each node's state
machine (remediation.py) and apply the decisions: its taint, its Node condition, its
annotations (written with the node's resourceVersion, so a stale view fails and is
re-read), Events, and evictions (drain.py).

Every sync has a deadline, half the lease after the renewal it started from; before every
write the controller checks it still leads and is inside that deadline (`_guard`), so a
slow sync never acts after another replica could have taken over. Every call to
Prometheus and the API server has a deadline, Prometheus answers a size cap. The main
thread only waits: SIGTERM ends the process within a second, whatever the worker is
blocked on. `/healthz` answers 500 when the loop has made no progress for a sync period
plus a lease (a wedged loop is restarted by the kubelet).

`/metrics` serves the Prometheus text exposition format (written by hand: a handful of
series does not justify a client library).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from gpuvalues.errors import SpecError
from gpuvalues.operations import drain as drainlib
from gpuvalues.operations.remediation import (CONDITION_TYPE, MAX_REASON, PREFIX, RESET_LABEL, TAINT_EFFECT, TAINT_KEY,
                                              Config, NodeView, Record, State, Taint, clip, step)
from gpuvalues.operations.signals import (PrometheusError, Prometheus, SignalConfig, evidence_from_results,
                                          faults_from_results, node_faults)

OWNER = "gpu-inference-remediation"
# On the Lease: the breaker pools latched open (JSON list; "" is the whole fleet).
BREAKER_ANNOTATION = f"{PREFIX}/breaker-latched"
log = logging.getLogger("gpuvalues.remediate")


class RemediateError(SpecError):
    """Bad options, config file or kubeconfig at start-up (exit 2, one line)."""
    code = "GV041"


@dataclass(frozen=True)
class Options:
    """Everything `gpuvalues remediate` takes."""
    kubeconfig: str | None = None
    context: str | None = None
    prometheus_url: str | None = None
    sync_period_s: float = 30.0
    dry_run: bool = False
    once: bool = False
    metrics_address: str = "0.0.0.0:8080"
    lease_namespace: str = "default"
    lease_name: str = "gpu-inference-remediation"
    identity: str = ""
    lease_duration_s: float = 15.0
    node_selector: str = ""
    evictions_per_minute: float = 30.0
    api_timeout_s: float = 10.0          # each API server request (connect, and each read)
    prometheus_timeout_s: float = 10.0   # each Prometheus query, whole exchange
    machine: Config = field(default_factory=Config)
    signals: SignalConfig = field(default_factory=SignalConfig)


# --- metrics -------------------------------------------------------------------------------

class Metrics:
    """The controller's series, rendered in the text exposition format (version 0.0.4)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.lock = threading.Lock()
        self.clock = clock
        self.nodes: dict[str, int] = {s.value: 0 for s in State}
        self.evictions: dict[str, int] = {}
        self.breaker_trips = 0
        self.breaker_open = 0
        self.leader = 0
        self.syncs: dict[str, int] = {"ok": 0, "error": 0, "skipped": 0, "deadline": 0}
        self.last_sync_s = 0.0
        self.no_evidence = 0
        self.invalid_records = 0
        self.source_up: dict[str, int] = {"prometheus": 1, "apiserver": 1}
        self.heartbeat = clock()         # the loop's last progress (monotonic)
        self.stale_after = float("inf")  # /healthz fails when the heartbeat is older

    def beat(self) -> None:
        with self.lock:
            self.heartbeat = self.clock()

    def healthy(self) -> bool:
        """The loop made progress recently (a wedged loop must not look alive)."""
        with self.lock:
            return self.clock() - self.heartbeat <= self.stale_after

    def render(self) -> str:
        with self.lock:
            out = ["# HELP gpu_remediation_nodes GPU nodes per remediation state.",
                   "# TYPE gpu_remediation_nodes gauge"]
            out += [f'gpu_remediation_nodes{{state="{k}"}} {v}' for k, v in sorted(self.nodes.items())]
            out += ["# HELP gpu_remediation_evictions_total Eviction requests by outcome.",
                    "# TYPE gpu_remediation_evictions_total counter"]
            out += [f'gpu_remediation_evictions_total{{outcome="{k}"}} {v}' for k, v in sorted(self.evictions.items())]
            out += ["# HELP gpu_remediation_breaker_trips_total Quarantines the circuit breaker refused.",
                    "# TYPE gpu_remediation_breaker_trips_total counter",
                    f"gpu_remediation_breaker_trips_total {self.breaker_trips}",
                    "# HELP gpu_remediation_breaker_open 1 while the circuit breaker refuses quarantines.",
                    "# TYPE gpu_remediation_breaker_open gauge",
                    f"gpu_remediation_breaker_open {self.breaker_open}",
                    "# HELP gpu_remediation_leader 1 when this replica holds the Lease.",
                    "# TYPE gpu_remediation_leader gauge",
                    f"gpu_remediation_leader {self.leader}",
                    "# HELP gpu_remediation_syncs_total Syncs by result.",
                    "# TYPE gpu_remediation_syncs_total counter"]
            out += [f'gpu_remediation_syncs_total{{result="{k}"}} {v}' for k, v in sorted(self.syncs.items())]
            out += ["# HELP gpu_remediation_sync_duration_seconds Duration of the last sync.",
                    "# TYPE gpu_remediation_sync_duration_seconds gauge",
                    f"gpu_remediation_sync_duration_seconds {self.last_sync_s:.6f}",
                    "# HELP gpu_remediation_nodes_without_evidence GPU nodes waiting for evidence of health "
                    "(series missing, exporter not scraped).",
                    "# TYPE gpu_remediation_nodes_without_evidence gauge",
                    f"gpu_remediation_nodes_without_evidence {self.no_evidence}",
                    "# HELP gpu_remediation_invalid_records Nodes skipped because their remediation record "
                    "does not parse.",
                    "# TYPE gpu_remediation_invalid_records gauge",
                    f"gpu_remediation_invalid_records {self.invalid_records}",
                    "# HELP gpu_remediation_signal_source_up 1 when the last sync could read the source.",
                    "# TYPE gpu_remediation_signal_source_up gauge"]
            out += [f'gpu_remediation_signal_source_up{{source="{k}"}} {v}' for k, v in sorted(self.source_up.items())]
        return "\n".join(out) + "\n"


def serve_metrics(metrics: Metrics, address: str) -> ThreadingHTTPServer:
    """Serve /metrics and /healthz on host:port in a daemon thread."""
    host, _, port = address.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] == "/metrics":
                body, ctype = metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8"
            elif self.path == "/healthz":
                ok = metrics.healthy()
                body, ctype = (b"ok\n" if ok else b"the sync loop made no progress\n"), "text/plain"
                if not ok:
                    self.send_response(500)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    try:
        srv = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    except (OSError, ValueError) as e:
        raise RemediateError(f"--metrics-address {address}: {e}") from None
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True, name="metrics").start()
    return srv


# --- leader election -------------------------------------------------------------------

def _now_micro() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Leader election on a coordination.k8s.io/v1 Lease (client-go
    tools/leaderelection/leaderelection.go semantics, one call per sync): the holder
    renews; others take over only after leaseDurationSeconds without a change of the
    record, measured on their own monotonic clock (no cross-node clock comparison).
    Updates carry the Lease's resourceVersion, so two candidates never both win."""

    def __init__(self, api_client, namespace: str, name: str, identity: str, duration_s: float,
                 clock: Callable[[], float] = time.monotonic):
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.ns, self.name, self.identity, self.duration = namespace, name, identity, duration_s
        self.clock = clock
        self._observed: tuple | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._lease: dict = {}

    @property
    def renewed_at(self) -> float | None:
        """When (monotonic) our last successful renewal was, or None."""
        return self._renewed_at

    def latched(self) -> frozenset[str]:
        """The breaker pools latched open, as the Lease we last read records them (the
        latch survives a failover; an operator resets it by removing the annotation)."""
        raw = ((self._lease.get("metadata") or {}).get("annotations") or {}).get(BREAKER_ANNOTATION)
        try:
            pools = json.loads(raw) if raw else []
        except ValueError:
            return frozenset({""})          # unreadable: stay safe, the fleet's breaker open
        if not isinstance(pools, list):
            return frozenset({""})
        return frozenset(str(p) for p in pools)

    def set_latched(self, pools: frozenset[str]) -> None:
        """Record the latched pools on the Lease (its resourceVersion: a lost race fails)."""
        lease = json.loads(self.api.read_namespaced_lease(self.name, self.ns, _preload_content=False).data)
        if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        ann = lease.setdefault("metadata", {}).setdefault("annotations", {}) or {}
        ann[BREAKER_ANNOTATION] = json.dumps(sorted(pools))
        lease["metadata"]["annotations"] = ann
        self.api.replace_namespaced_lease(self.name, self.ns, lease)
        self._lease = lease

    def is_leader(self) -> bool:
        """True while our last successful renewal is younger than the lease duration."""
        return self._renewed_at is not None and self.clock() - self._renewed_at < self.duration

    def try_acquire_or_renew(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        try:
            lease = json.loads(self.api.read_namespaced_lease(self.name, self.ns, _preload_content=False).data)
        except ApiException as e:
            if e.status != 404:
                log.warning("lease %s/%s: %s", self.ns, self.name, e.reason)
                return self.is_leader()
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.ns},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                             "acquireTime": _now_micro(), "renewTime": _now_micro(), "leaseTransitions": 0}}
            try:
                self.api.create_namespaced_lease(self.ns, body)
            except ApiException:
                return False
            self._renewed_at = now
            return True
        self._lease = lease
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity")
        if holder and holder != self.identity and now - self._observed_at < float(spec.get("leaseDurationSeconds") or self.duration):
            self._renewed_at = None
            return False
        new_spec = dict(spec, holderIdentity=self.identity, leaseDurationSeconds=int(self.duration), renewTime=_now_micro())
        if holder != self.identity:
            new_spec["acquireTime"] = _now_micro()
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            self.api.replace_namespaced_lease(self.name, self.ns, lease)
        except ApiException as e:
            log.info("lease %s/%s: lost the race (%s)", self.ns, self.name, e.status)
            return self.is_leader() if holder == self.identity else False
        if holder != self.identity:
            log.info("acquired lease %s/%s as %s", self.ns, self.name, self.identity)
        self._renewed_at = now
        return True

    def release(self) -> None:
        """Give the Lease up on a clean exit, so another replica takes over at once."""
        from kubernetes.client.exceptions import ApiException

        if not self.is_leader():
            return
        try:
            lease = json.loads(self.api.read_namespaced_lease(self.name, self.ns, _preload_content=False).data)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                self.api.replace_namespaced_lease(self.name, self.ns, lease)
        except ApiException:
            pass


# --- the controller ----------------------------------------------------------------------

class TokenBucket:
    """`rate` tokens per minute, at most `burst` saved."""

    def __init__(self, per_minute: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
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


class SyncAborted(Exception):
    """A write refused: no longer leader, past the sync's deadline, or stopping."""


def read_json(resp, limit: int) -> dict:
    """The JSON body of an unpreloaded API response, refused past `limit` bytes."""
    data = resp.read(limit + 1)
    if len(data) > limit:
        raise SyncAborted(f"API server answer larger than {limit // 2**20} MiB")
    return json.loads(data)


MAX_API_BYTES = 256 * 2**20    # a node list of ~50,000 nodes; the chart's memory limit bounds us anyway


class Controller:
    """One remediation controller replica. `sync()` is one pass; `run()` loops."""

    def __init__(self, opts: Options, api_client, prometheus: Prometheus | None, metrics: Metrics | None = None,
                 elector: "LeaseElector | None" = None):
        from kubernetes import client

        self.opts = opts
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.prom = prometheus
        self.metrics = metrics or Metrics()
        self.elector = elector
        self.drainer = drainlib.Drainer(self.core, resource_prefixes=(opts.signals.gpu_resource_prefix,),
                                        dry_run=opts.dry_run, max_per_step=50, guard=self._guard)
        self.bucket = TokenBucket(opts.evictions_per_minute)
        self.shadow: dict[str, Record] = {}   # --dry-run: the records we would have written
        self._said: dict[tuple[str, str], float] = {}  # (node, reason) -> when last reported
        self.stopping = threading.Event()
        self.deadline = float("inf")          # monotonic: no write after it (this sync's budget)
        self.latched: frozenset[str] = frozenset()   # without a Lease (--once): in memory

    @property
    def sync_budget_s(self) -> float:
        """How long a sync may write after the renewal it started from: half the lease,
        so a standby (which waits a whole lease from when it saw our renewal) never acts
        while we still might."""
        return self.opts.lease_duration_s / 2.0

    def _guard(self) -> None:
        """Called before every write: refuse it unless we lead, inside the deadline."""
        if self.stopping.is_set():
            raise SyncAborted("stopping")
        if time.monotonic() >= self.deadline:
            raise SyncAborted("sync deadline passed (half the lease after the renewal)")
        if self.elector is not None and not self.elector.is_leader():
            raise SyncAborted("no longer the leader")

    # reading
    def _nodes(self) -> list[dict]:
        kw = {"label_selector": self.opts.node_selector} if self.opts.node_selector else {}
        return read_json(self.core.list_node(_preload_content=False, **kw), MAX_API_BYTES)["items"]

    def _view(self, node: dict) -> NodeView:
        v = NodeView.from_k8s(node, self.opts.signals.gpu_resource_prefix)
        if self.opts.dry_run and v.name in self.shadow:
            rec = self.shadow[v.name]
            ann = dict(v.annotations)
            ann.update(rec.annotations())
            taints = tuple(t for t in v.taints if t.key != TAINT_KEY)
            if "taint" in rec.owned:   # the taint it would have added
                taints += (Taint(TAINT_KEY, TAINT_EFFECT, "true"),)
            v = replace(v, annotations=tuple(sorted(ann.items())), taints=taints)
        return v

    def sync(self) -> str:
        """List, decide, act: one pass over the fleet. Returns "ok", or "skipped" when a
        signal source could not be read (the nodes it speaks for keep their state)."""
        t0 = time.monotonic()
        raw = self._nodes()
        by_name = {n["metadata"]["name"]: n for n in raw}
        views = [self._view(n) for n in raw]
        gpu_names = [v.name for v in views if v.gpu_node]
        faults: dict[str, list] = {}
        evidence: dict[str, bool] | None = None
        result_kind = "ok"
        if self.prom is not None:
            try:
                # at most half the sync's budget, so a slow Prometheus leaves time to act on the rest
                results = self.prom.collect(self.opts.signals, min(self.deadline, t0 + self.sync_budget_s / 2))
                faults = faults_from_results(results, self.opts.signals, gpu_names)
                evidence = evidence_from_results(results, self.opts.signals, gpu_names)
                up = 1
            except PrometheusError as e:
                # No data is not health: the Prometheus signals are unknown this sync; every
                # node keeps the state those signals would change (node signals still act).
                log.warning("Prometheus signals unknown this sync (no node is released on them): %s", e)
                evidence = {n: False for n in gpu_names}
                result_kind, up = "skipped", 0
            with self.metrics.lock:
                self.metrics.source_up["prometheus"] = up
            if not up:
                self._report_source("prometheus", "SignalSourceUnavailable",
                                    "Prometheus could not be queried; nodes keep their state until it answers")
        for v in views:
            if v.gpu_node:
                faults.setdefault(v.name, []).extend(node_faults(by_name[v.name], self.opts.signals))
        self.drainer.forget_policies()
        pods_left = {}
        for v in views:
            if v.record.state is State.DRAINING and not v.record_error:
                go, leaving, _ = self.drainer.pods_to_drain(v.name)
                pods_left[v.name] = len(go) + len(leaving)
        latched = self.elector.latched() if self.elector is not None else self.latched
        now = time.time()
        result = step(views, faults, pods_left, now, self.opts.machine, evidence=evidence, latched=latched)
        if result.latched != latched:
            self._guard()
            newly = sorted(result.latched - latched)
            log.warning("circuit breaker latched open for pool(s) %s: reset with kubectl annotate lease -n %s %s %s-",
                        ", ".join(p or "(fleet)" for p in newly), self.opts.lease_namespace, self.opts.lease_name,
                        BREAKER_ANNOTATION)
            if self.elector is not None and not self.opts.dry_run:
                self.elector.set_latched(result.latched)
            self.latched = result.latched
        for d in result.decisions:
            if d.actions:
                self._apply(by_name[d.node], d)
        with self.metrics.lock:
            self.metrics.nodes = result.counts()
            self.metrics.breaker_trips += len(result.breaker_tripped)
            self.metrics.breaker_open = int(bool(result.latched) or bool(result.breaker_tripped))
            self.metrics.last_sync_s = time.monotonic() - t0
            self.metrics.no_evidence = len(result.no_evidence)
            self.metrics.invalid_records = len(result.invalid)
        if result.breaker_tripped:
            log.warning("circuit breaker: %d nodes held (limit %d); not quarantining %s",
                        result.held, result.breaker_limit, ", ".join(result.breaker_tripped))
        if result.no_evidence:
            log.warning("no evidence of health for %d node(s), their state is kept: %s", len(result.no_evidence),
                        ", ".join(result.no_evidence[:20]))
        return result_kind

    def _report_source(self, source: str, reason: str, message: str) -> None:
        """An Event on our Lease (the controller's own object) for a signal source that is
        down, at most once per REPEAT_S."""
        if self._repeated(f"source:{source}", reason, False) or self.opts.dry_run:
            return
        self._guard()
        self.event("Lease", self.opts.lease_name, self.opts.lease_namespace, "", reason, message, True,
                   api_version="coordination.k8s.io/v1")

    # acting
    def _apply(self, node: dict, d) -> None:
        from kubernetes.client.exceptions import ApiException

        name = node["metadata"]["name"]
        kinds = [a.kind for a in d.actions]
        after = d.after
        for a in d.actions:
            if a.kind == "event" and (d.changed or (name, a.reason) not in self._said):
                log.info("%s: %s %s%s", name, a.reason, a.message, " (dry run)" if self.opts.dry_run else "")
        if self.opts.dry_run:
            self.shadow[name] = after
            for a in d.actions:
                if a.kind not in ("event",):
                    log.info("%s: would %s", name, a.kind)
            return
        try:
            if "drain" in kinds:
                after = self._drain(node, d)
            self._guard()
            if "add-taint" in kinds:
                drainlib.add_taint(self.core, name, TAINT_KEY, TAINT_EFFECT, OWNER, value="true",
                                   extra_annotations=after.annotations())
            elif "remove-taint" in kinds:
                drainlib.remove_taint(self.core, name, TAINT_KEY, OWNER, extra_annotations=after.annotations())
            elif "write-record" in kinds or after != d.before:
                self._patch_node(node, {"metadata": {"annotations": after.annotations()}}, expect=d.before)
            if "add-label" in kinds:
                self._guard()
                self._patch_node(None, {"metadata": {"labels": {RESET_LABEL: "true"}}}, name)
            if "remove-label" in kinds:
                self._guard()
                self._patch_node(None, {"metadata": {"labels": {RESET_LABEL: None}}}, name)
            if "set-condition" in kinds:
                self._guard()
                self._condition(name, True, next(a for a in d.actions if a.kind == "set-condition").message)
            if "clear-condition" in kinds:
                self._guard()
                self._condition(name, False, "")
        except ApiException as e:
            # 409: the node changed since we listed it; the next sync sees the new state.
            log.warning("%s: %s failed: %s %s", name, ",".join(kinds), e.status, e.reason)
            return
        for a in d.actions:
            if a.kind == "event" and not self._repeated(name, a.reason, d.changed):
                self._guard()
                self.event("Node", name, "", node["metadata"].get("uid", ""), a.reason, a.message, a.warning)

    # Reports that recur every sync while nothing changes (a warn-only signal, a node held
    # by someone else, an open breaker) become one Event per REPEAT_S, not one per sync.
    REPEAT_S = 600.0

    def _repeated(self, node: str, reason: str, changed: bool) -> bool:
        if changed:
            return False
        now = time.monotonic()
        last = self._said.get((node, reason))
        if last is not None and now - last < self.REPEAT_S:
            return True
        self._said[(node, reason)] = now
        return False

    def _patch_node(self, node: dict | None, body: dict, name: str | None = None,
                    expect: Record | None = None) -> None:
        """Merge-patch a node. With `expect`, the patch carries a freshly read
        resourceVersion and is sent only while the node's record still equals `expect`
        (a conflict from unrelated status updates is retried; a changed record is not)."""
        from kubernetes.client.exceptions import ApiException

        name = name or node["metadata"]["name"]
        if expect is None:
            self.core.patch_node(name, body, _content_type="application/merge-patch+json")
            return
        for attempt in range(3):
            self._guard()
            fresh = read_json(self.core.read_node(name, _preload_content=False), MAX_API_BYTES)
            if Record.from_annotations(fresh["metadata"].get("annotations")) != expect:
                log.info("%s: record changed since this sync read it; re-read next sync", name)
                return
            b = json.loads(json.dumps(body))
            b["metadata"]["resourceVersion"] = fresh["metadata"]["resourceVersion"]
            try:
                self.core.patch_node(name, b, _content_type="application/merge-patch+json")
                return
            except ApiException as e:
                if e.status != 409 or attempt == 2:
                    raise

    def _condition(self, name: str, on: bool, message: str) -> None:
        """Set or remove our Node condition (strategic merge on the `type` key, so the
        kubelet's and others' conditions are kept)."""
        if on:
            now = _now_micro().split(".")[0] + "Z"
            cond = {"type": CONDITION_TYPE, "status": "True", "reason": "GpuFault", "message": clip(message, MAX_REASON),
                    "lastHeartbeatTime": now, "lastTransitionTime": now}
        else:
            cond = {"type": CONDITION_TYPE, "$patch": "delete"}
        self.core.patch_node_status(name, {"status": {"conditions": [cond]}},
                                    _content_type="application/strategic-merge-patch+json")

    def _drain(self, node: dict, d) -> Record:
        name = node["metadata"]["name"]
        budget = self.bucket.take_up_to(self.drainer.max_per_step)
        prog = self.drainer.step(name, since=d.before.since, budget=budget, already=d.before.evicted)
        used = len(prog.results)
        self.bucket.give_back(max(0, budget - used))
        evicted = list(d.after.evicted)
        for r in prog.results:
            with self.metrics.lock:
                self.metrics.evictions[r.outcome] = self.metrics.evictions.get(r.outcome, 0) + 1
            if r.outcome in ("evicted", "deleted"):
                evicted.append(r.uid)
                self._guard()
                self.event("Pod", r.name, r.namespace, r.uid, "GpuRemediationEvicted" if r.outcome == "evicted"
                           else "GpuRemediationDeleted", f"{r.outcome} from GPU node {name} (quarantined)", True)
                log.info("%s: %s %s/%s", name, r.outcome, r.namespace, r.name)
            elif r.outcome == "blocked":
                log.info("%s: eviction of %s/%s blocked: %s", name, r.namespace, r.name, r.message)
            elif r.outcome == "error":
                log.warning("%s: eviction of %s/%s failed: %s", name, r.namespace, r.name, r.message)
        return replace(d.after, evicted=tuple(evicted[-200:]))

    def event(self, kind: str, name: str, namespace: str, uid: str, reason: str, message: str, warning: bool,
              api_version: str = "v1") -> None:
        """A core/v1 Event on the object (Nodes' events go to `default`, as the kubelet's do)."""
        from kubernetes.client.exceptions import ApiException

        ns = namespace or "default"
        now = _now_micro().split(".")[0] + "Z"
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{name}.", "namespace": ns},
                "involvedObject": {"kind": kind, "name": name, "uid": uid, "apiVersion": api_version,
                                   **({"namespace": namespace} if namespace else {})},
                "reason": reason, "message": clip(message, MAX_REASON), "type": "Warning" if warning else "Normal",
                "source": {"component": OWNER, "host": socket.gethostname()},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": OWNER, "reportingInstance": self.opts.identity or socket.gethostname()}
        try:
            from kubernetes import client
            self.core.create_namespaced_event(ns, client.CoreV1Event.from_dict(body))
        except ApiException as e:
            log.warning("event %s on %s/%s: %s", reason, kind, name, e.reason)

    # the loop
    def _loop(self, elector: LeaseElector | None) -> None:
        """The worker: renew, sync while leader, wait; until stopped."""
        while not self.stopping.is_set():
            t0 = time.monotonic()
            self.metrics.beat()
            try:
                leader = elector.try_acquire_or_renew() if elector else True
                up = 1
            except Exception as e:
                log.warning("lease: %s", e)
                leader, up = (elector.is_leader() if elector else False), 0
            with self.metrics.lock:
                self.metrics.leader = int(leader)
                self.metrics.source_up["apiserver"] = up
            if leader and not self.stopping.is_set():
                start = elector.renewed_at if elector and elector.renewed_at is not None else t0
                self.deadline = start + self.sync_budget_s
                try:
                    kind = self.sync()
                except SyncAborted as e:
                    log.warning("sync stopped before its end: %s", e)
                    kind = "deadline"
                except Exception:
                    log.exception("sync failed")
                    kind = "error"
                finally:
                    self.deadline = float("-inf")
                with self.metrics.lock:
                    self.metrics.syncs[kind] = self.metrics.syncs.get(kind, 0) + 1
            self.metrics.beat()
            if self.opts.once:
                break
            self.stopping.wait(max(0.0, self.opts.sync_period_s - (time.monotonic() - t0)))

    def run(self, elector: LeaseElector | None) -> int:
        """Loop in a worker thread until SIGTERM/SIGINT (`stopping`); returns the exit code.
        The main thread only waits, so a stop is honoured within a second even while the
        worker is blocked on a slow server (its writes are refused once `stopping` is set)."""
        self.elector = elector
        with self.metrics.lock:
            self.metrics.stale_after = self.opts.sync_period_s + self.opts.lease_duration_s
        worker = threading.Thread(target=self._loop, args=(elector,), daemon=True, name="sync")
        worker.start()
        while worker.is_alive() and not self.stopping.wait(0.1):
            pass
        self.stopping.set()
        worker.join(0.3)
        self.worker_stuck = worker.is_alive()
        if elector and not worker.is_alive():
            elector.release()
        elif elector:   # the worker is stuck in a call: release the Lease without waiting for it
            t = threading.Thread(target=elector.release, daemon=True)
            t.start()
            t.join(0.3)
        return 0


def _with_deadlines(api, timeout_s: float):
    """Give every request of `api` a connect and read timeout (the client has none by default)."""
    rest = api.rest_client
    orig = rest.request

    def request(*args, **kw):
        if kw.get("_request_timeout") is None:
            kw["_request_timeout"] = (min(5.0, timeout_s), timeout_s)
        return orig(*args, **kw)

    rest.request = request
    return api


def api_client_for(kubeconfig: str | None, context: str | None, timeout_s: float = 10.0):
    """An ApiClient from a kubeconfig (or $KUBECONFIG, ~/.kube/config), else in-cluster.
    The kubeconfig is read through the project's reader (a regular file, bounded: a FIFO
    is refused, never waited on); every request gets a timeout."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    from gpuvalues.yamlio.inputs import decode, read_input
    from gpuvalues.yamlio.loader import parse_yaml

    try:
        path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
        if path is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            path = os.path.expanduser("~/.kube/config")
        if path is None:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return _with_deadlines(client.ApiClient(cfg), timeout_s)
        data, source = read_input(path, error=RemediateError, expected="a kubeconfig file",
                                         max_bytes=4 * 2**20)
        doc = parse_yaml(decode(data, source), source=source, error=RemediateError)
        if not isinstance(doc, dict):
            raise RemediateError("not a kubeconfig (a YAML mapping)", source=source)
        from kubernetes.config.kube_config import KubeConfigLoader

        # relative certificate paths are relative to the kubeconfig, as load_kube_config reads them
        cfg = client.Configuration()
        KubeConfigLoader(config_dict=doc, active_context=context,
                         config_base_path=os.path.abspath(os.path.dirname(path))).load_and_set(cfg)
        return _with_deadlines(client.ApiClient(configuration=cfg), timeout_s)
    except RemediateError:
        raise
    except (ConfigException, OSError, TypeError, ValueError, KeyError) as e:
        raise RemediateError(f"kubeconfig{' ' + kubeconfig if kubeconfig else ''}: {e}") from None


def main(opts: Options) -> int:
    """Run the controller until SIGTERM; returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    identity = opts.identity or f"{socket.gethostname()}-{os.getpid()}"
    opts = dataclasses.replace(opts, identity=identity)
    api = api_client_for(opts.kubeconfig, opts.context, opts.api_timeout_s)
    prom = Prometheus(opts.prometheus_url, timeout=opts.prometheus_timeout_s) if opts.prometheus_url else None
    metrics = Metrics()
    srv = serve_metrics(metrics, opts.metrics_address) if opts.metrics_address else None
    ctl = Controller(opts, api, prom, metrics)
    elector = None if opts.once else LeaseElector(api, opts.lease_namespace, opts.lease_name, identity,
                                                  opts.lease_duration_s)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: ctl.stopping.set())
    log.info("remediation controller %s: sync every %gs, dry run %s, Prometheus %s", identity,
             opts.sync_period_s, opts.dry_run, opts.prometheus_url or "off")
    try:
        rc = ctl.run(elector)
    finally:
        if srv:
            srv.shutdown()
    if getattr(ctl, "worker_stuck", False):
        # The worker is blocked in a call to a slow server; the interpreter's teardown would
        # wait on it for seconds. Nothing is left to flush but the logs: exit now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


__all__ = ["Options", "Controller", "LeaseElector", "Metrics", "main", "options_from_args"]


# --- options ----------------------------------------------------------------------------

_SIGNAL_KEYS = {"xid": "xid", "dbe": "dbe", "rowRemap": "row-remap", "nvlink": "nvlink",
                "allocatable": "allocatable", "conditions": "conditions", "exporterMissing": "exporter"}


def config_schema() -> dict:
    """The config file's schema: `$defs/remediationConfig` of the values schema (the one
    definition of the keys; the chart's platform.remediation refers to it)."""
    from gpuvalues.schemas import VALUES_SCHEMA, load_schema

    values = load_schema(VALUES_SCHEMA)
    return {"$schema": values.get("$schema"), "$defs": values["$defs"], "$ref": "#/$defs/remediationConfig"}


def load_config(path: str) -> dict:
    """Read the YAML config through the project's reader (a regular file, bounded) and
    check it against the schema; the first error is one line naming file:line:col and field."""
    from gpuvalues.yamlio.loader import load_mapping
    from gpuvalues.checks.rules import schema_findings

    loaded = load_mapping(path, allow_empty=True, what="remediation config")
    data = loaded.data if loaded.data is not None else {}
    if not data:
        return {}
    findings = schema_findings(dataclasses.replace(loaded, data=data), config_schema())
    if findings:
        f = findings[0]
        raise RemediateError(f.message, source=f.source or path, line=f.line, column=f.column, field=f.path or None,
                             code=f.code)
    return data


def options_from_args(args) -> Options:
    """Options from the `gpuvalues remediate` arguments and its --config file (flags win);
    checked, so bad values fail before anything runs."""
    cfg = load_config(args.config) if getattr(args, "config", None) else {}
    src = args.config or "--config"

    def pick(flag, key, default):
        v = getattr(args, flag, None)
        return v if v is not None else cfg.get(key, default)

    sig = cfg.get("signals") or {}
    enabled = {name for key, name in _SIGNAL_KEYS.items() if key != "exporterMissing" and sig.get(key, True)}
    exporter = sig.get("exporterMissing", "warn")
    if exporter != "ignore":
        enabled.add("exporter")
    defaults_s, defaults_m = SignalConfig(), Config()
    try:
        scfg = SignalConfig(enabled=frozenset(enabled),
                            critical_xids=tuple(cfg.get("criticalXids", defaults_s.critical_xids)),
                            window=cfg.get("window", defaults_s.window),
                            node_label=cfg.get("nodeLabel", defaults_s.node_label),
                            conditions=tuple(cfg.get("conditions", defaults_s.conditions)),
                            exporter_missing_acts=exporter == "act",
                            gpu_resource_prefix=cfg.get("gpuResourcePrefix", defaults_s.gpu_resource_prefix),
                            exporter_job=cfg.get("exporterJob", ""), exporter_namespace=cfg.get("exporterNamespace", ""))
    except ValueError as e:
        raise RemediateError(str(e), source=src) from None
    m = defaults_m
    mcfg = Config(suspect_for_s=float(cfg.get("suspectForSeconds", m.suspect_for_s)),
                  hold_down_s=float(cfg.get("holdDownSeconds", m.hold_down_s)),
                  drain=cfg.get("drain", m.drain), drain_timeout_s=float(cfg.get("drainTimeoutSeconds", m.drain_timeout_s)),
                  reset_label=cfg.get("resetLabel", m.reset_label),
                  breaker_max_nodes=cfg.get("breakerMaxNodes", m.breaker_max_nodes),
                  breaker_max_percent=float(cfg.get("breakerMaxPercent", m.breaker_max_percent)),
                  breaker_pool_label=cfg.get("breakerPoolLabel", m.breaker_pool_label),
                  max_new_quarantines_per_sync=cfg.get("maxNewQuarantinesPerSync", m.max_new_quarantines_per_sync),
                  flap_window_s=float(cfg.get("flapWindowSeconds", m.flap_window_s)),
                  flap_max_quarantines=cfg.get("flapMaxQuarantines", m.flap_max_quarantines),
                  ignored_taints=tuple(cfg.get("ignoredTaints", m.ignored_taints)))
    sync = float(pick("sync_period", "syncPeriodSeconds", 30.0))
    opts = Options(kubeconfig=args.kubeconfig, context=args.context,
                   prometheus_url=pick("prometheus_url", "prometheusUrl", None) or None,
                   sync_period_s=sync,
                   dry_run=bool(pick("dry_run", "dryRun", False)), once=bool(args.once),
                   metrics_address=pick("metrics_address", "metricsAddress", "0.0.0.0:8080"),
                   lease_namespace=pick("lease_namespace", "leaseNamespace", "default"),
                   lease_name=pick("lease_name", "leaseName", "gpu-inference-remediation"),
                   identity=args.identity or "", node_selector=cfg.get("nodeSelector", ""),
                   lease_duration_s=float(cfg.get("leaseDurationSeconds", max(15.0, 3 * sync))),
                   evictions_per_minute=float(cfg.get("evictionsPerMinute", 30.0)),
                   prometheus_timeout_s=float(cfg.get("prometheusTimeoutSeconds", 10.0)), machine=mcfg, signals=scfg)
    checks = [(math.isfinite(opts.sync_period_s) and opts.sync_period_s > 0, "syncPeriodSeconds", "must be > 0"),
              (opts.lease_duration_s >= 2 * opts.sync_period_s or opts.once, "leaseDurationSeconds",
               "must be at least twice the sync period (the leader renews once per sync)"),
              (0 <= mcfg.breaker_max_percent <= 100, "breakerMaxPercent", "must be between 0 and 100"),
              (mcfg.breaker_max_nodes >= 0, "breakerMaxNodes", "must be >= 0"),
              (mcfg.max_new_quarantines_per_sync >= 0, "maxNewQuarantinesPerSync", "must be >= 0"),
              (opts.evictions_per_minute > 0, "evictionsPerMinute", "must be > 0"),
              (mcfg.suspect_for_s >= 0 and mcfg.hold_down_s >= 0, "suspectForSeconds/holdDownSeconds", "must be >= 0"),
              (not opts.prometheus_url or opts.prometheus_url.startswith(("http://", "https://")),
               "prometheusUrl", "must start with http:// or https://")]
    for ok, key, msg in checks:
        if not ok:
            raise RemediateError(msg, source=src, field=key)
    return opts
