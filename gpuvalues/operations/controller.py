"""The remediation controller loop (`gpuvalues remediate`).

A worker thread loops: renew the leader Lease (lease.py), then, while leader, sync: list
the nodes, read the signals (signals.py), advance each node's state machine
(remediation.py) and apply the decisions: its taint, its Node condition, its annotations
(written with the node's resourceVersion, so a stale view fails and is re-read), Events
(events.py), and evictions (drain.py).

Every sync has a deadline, half the lease after the renewal it started from; before every
write the controller checks it still leads and is inside that deadline (`_guard`), so a
slow sync never acts after another replica could have taken over. Every call to
Prometheus and the API server has a deadline and a size cap (kubeapi.py, signals.py). The
main thread only waits: SIGTERM ends the process within a second, whatever the worker is
blocked on. `/healthz` (metrics.py) answers 500 when the loop has made no progress for a
sync period plus a lease (a wedged loop is restarted by the kubelet). Options and the
config file: config.py.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import replace

from gpuvalues.errors import GpuValuesError, TransientError
from gpuvalues.operations import drain as drainlib
from gpuvalues.operations import events as eventlib
from gpuvalues.operations.config import Options, RemediateError
from gpuvalues.operations.kubeapi import MAX_LIST_BYTES, MAX_OBJECT_BYTES, answered, api_client_for, read_json
from gpuvalues.operations.lease import BREAKER_ANNOTATION, LeaseElector
from gpuvalues.operations.metrics import Metrics, serve_metrics
from gpuvalues.operations.remediation import (CONDITION_TYPE, MAX_REASON, RESET_LABEL, TAINT_EFFECT, TAINT_KEY,
                                              NodeView, Record, State, clip, step)
from gpuvalues.planners.scheduling.inventory import Taint
from gpuvalues.operations.signals import (PrometheusError, Prometheus, evidence_from_results, faults_from_results,
                                          node_faults)

OWNER = "gpu-inference-remediation"
log = logging.getLogger("gpuvalues.remediate")


class SyncAborted(Exception):
    """A write refused: no longer leader, past the sync's deadline, or stopping."""


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
                                        dry_run=opts.dry_run, max_per_step=50, guard=self._guard,
                                        read_timeout=self._read_budget)
        self.bucket = drainlib.TokenBucket(opts.evictions_per_minute)
        self.shadow: dict[str, Record] = {}   # --dry-run: the records we would have written
        self._said: dict[tuple[str, str], float] = {}  # (node, reason) -> when last reported
        self.stopping = threading.Event()
        self.deadline = float("inf")          # monotonic: no write after it (this sync's budget)
        self.latched: frozenset[str] = frozenset()   # without a Lease (--once): in memory
        self.failure: BaseException | None = None   # why the last sync failed (--once raises it)

    @property
    def sync_budget_s(self) -> float:
        """How long a sync may write after the renewal it started from: half the lease,
        so a standby (which waits a whole lease from when it saw our renewal) never acts
        while we still might."""
        return self.opts.lease_duration_s / 2.0

    def _read_budget(self) -> float:
        """Seconds an answer may take to read: what is left of the sync's budget (at most
        30 s; outside a sync, 30 s)."""
        left = self.deadline - time.monotonic()
        return max(0.1, min(30.0, left)) if left != float("inf") and left > float("-inf") else 30.0

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
        return read_json(self.core.list_node(_preload_content=False, **kw), MAX_LIST_BYTES, timeout_s=self._read_budget(),
                         what="the node list")["items"]

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
        """List, decide, act: one pass over the fleet. Returns "ok", or "source-down" when
        Prometheus could not be read or its answer was stale (the nodes it speaks for keep
        their state; `failure` says why, and `--once` exits 3 on it)."""
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
                result_kind, up = "source-down", 0
                self.failure = TransientError(f"Prometheus signals unknown: {e.message}; no node was released or "
                                              "quarantined on them (retry)")
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
            answered(self.core.patch_node(name, body, _content_type="application/merge-patch+json",
                                          _preload_content=False), f"node {name}")
            return
        for attempt in range(3):
            self._guard()
            fresh = read_json(self.core.read_node(name, _preload_content=False), MAX_OBJECT_BYTES,
                              timeout_s=self._read_budget(), what=f"node {name}")
            if Record.from_annotations(fresh["metadata"].get("annotations")) != expect:
                log.info("%s: record changed since this sync read it; re-read next sync", name)
                return
            b = json.loads(json.dumps(body))
            b["metadata"]["resourceVersion"] = fresh["metadata"]["resourceVersion"]
            try:
                answered(self.core.patch_node(name, b, _content_type="application/merge-patch+json",
                                              _preload_content=False), f"node {name}")
                return
            except ApiException as e:
                if e.status != 409 or attempt == 2:
                    raise

    def _condition(self, name: str, on: bool, message: str) -> None:
        """Set or remove our Node condition (strategic merge on the `type` key, so the
        kubelet's and others' conditions are kept)."""
        if on:
            now = eventlib.now_seconds()
            cond = {"type": CONDITION_TYPE, "status": "True", "reason": "GpuFault", "message": clip(message, MAX_REASON),
                    "lastHeartbeatTime": now, "lastTransitionTime": now}
        else:
            cond = {"type": CONDITION_TYPE, "$patch": "delete"}
        answered(self.core.patch_node_status(name, {"status": {"conditions": [cond]}},
                                             _content_type="application/strategic-merge-patch+json",
                                             _preload_content=False), f"node {name}")

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
        """A core/v1 Event on the object (events.py; Nodes' events go to `default`)."""
        body = eventlib.event_body(kind=kind, name=name, namespace=namespace, uid=uid, reason=reason,
                                   message=message, warning=warning, component=OWNER,
                                   instance=self.opts.identity or socket.gethostname(), api_version=api_version)
        refused = eventlib.post(self.core, body)
        if refused:
            log.warning("event %s on %s/%s: %s", reason, kind, name, refused)

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
                except Exception as e:
                    self.failure = _as_error(e) or e
                    if isinstance(self.failure, GpuValuesError):
                        log.warning("sync failed: %s", e)
                    else:
                        log.exception("sync failed")
                    kind = "error"
                finally:
                    self.deadline = float("-inf")
                if kind == "ok":
                    self.failure = None
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
        if elector:
            # Give the Lease up so a standby takes over at once, but never wait on a slow
            # API server for it: the exit stays within a second of SIGTERM.
            t = threading.Thread(target=elector.release, daemon=True, name="release")
            t.start()
            t.join(0.4)
            self.worker_stuck = self.worker_stuck or t.is_alive()
        if self.opts.once and self.failure is not None:
            raise self.failure       # `--once`: the one sync's failure is the exit status (3: retry)
        return 0


def _as_error(exc: BaseException) -> GpuValuesError | None:
    """A failed sync as the CLI's error: an API server that is unreachable, times out or
    answers 429/5xx is a TransientError (exit 3), another refusal (RBAC: 403) a
    RemediateError (exit 2); anything else is a bug (None: re-raised with its traceback)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, GpuValuesError):
        return exc
    if isinstance(exc, ApiException):
        what = f"the API server answered {exc.status} {exc.reason}"
        if exc.status == 429 or (exc.status or 0) >= 500:
            return TransientError(f"{what} (retry)")
        return RemediateError(what)
    if isinstance(exc, (HTTPError, OSError)):
        return TransientError(f"the API server cannot be reached: {exc.__class__.__name__} (retry)")
    return None


def main(opts: Options) -> int:
    """Run the controller until SIGTERM; returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    identity = opts.identity or f"{socket.gethostname()}-{os.getpid()}"
    opts = dataclasses.replace(opts, identity=identity)
    api = api_client_for(opts.kubeconfig, opts.context, opts.api_timeout_s, error=RemediateError)
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
    if getattr(ctl, "worker_stuck", False) or not opts.once:
        # A stopped controller (SIGTERM) has nothing left to flush but the logs; the
        # interpreter's teardown would wait seconds on a worker blocked in a call to a slow
        # server and on the API client's thread pool. Exit now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


__all__ = ["Controller", "SyncAborted", "main"]
