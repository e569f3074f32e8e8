"""The remediation controller loop (`gpuvalues remediate`).

Every sync period the leader (a coordination.k8s.io/v1 Lease, as client-go's
tools/leaderelection does it: holderIdentity, leaseDurationSeconds, renewTime, and
expiry judged on the local clock from when the record last changed) lists the nodes,
reads the signals (signals.py), advances each node's state machine (remediation.py) and
applies the decisions: its taint, its Node condition, its annotations (written with the
node's resourceVersion, so a stale view fails and is re-read), Events, and evictions
(drain.py). Non-leaders only renew their view of the Lease.

`/metrics` serves the Prometheus text exposition format (written by hand: a handful of
series does not justify a client library), `/healthz` answers 200.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from gpuvalues.errors import GpuValuesError
from gpuvalues.operations import drain as drainlib
from gpuvalues.operations.remediation import (CONDITION_TYPE, HELD, RESET_LABEL, TAINT_EFFECT, TAINT_KEY, Config,
                                              NodeView, Record, State, Taint, step)
from gpuvalues.operations.signals import PrometheusError, Prometheus, SignalConfig, faults_from_results, node_faults

OWNER = "gpu-inference-remediation"
log = logging.getLogger("gpuvalues.remediate")


class RemediateError(GpuValuesError):
    """Bad options or an unreachable cluster at start-up."""


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
    machine: Config = field(default_factory=Config)
    signals: SignalConfig = field(default_factory=SignalConfig)


# --- metrics -------------------------------------------------------------------------------

class Metrics:
    """The controller's series, rendered in the text exposition format (version 0.0.4)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.nodes: dict[str, int] = {s.value: 0 for s in State}
        self.evictions: dict[str, int] = {}
        self.breaker_trips = 0
        self.breaker_open = 0
        self.leader = 0
        self.syncs: dict[str, int] = {"ok": 0, "error": 0, "skipped": 0}
        self.last_sync_s = 0.0

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
                    f"gpu_remediation_sync_duration_seconds {self.last_sync_s:.6f}"]
        return "\n".join(out) + "\n"


def serve_metrics(metrics: Metrics, address: str) -> ThreadingHTTPServer:
    """Serve /metrics and /healthz on host:port in a daemon thread."""
    host, _, port = address.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server API)
            if self.path.split("?")[0] == "/metrics":
                body, ctype = metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8"
            elif self.path == "/healthz":
                body, ctype = b"ok\n", "text/plain"
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
    threading.Thread(target=srv.serve_forever, daemon=True, name="metrics").start()
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


class Controller:
    """One remediation controller replica. `sync()` is one pass; `run()` loops."""

    def __init__(self, opts: Options, api_client, prometheus: Prometheus | None, metrics: Metrics | None = None):
        from kubernetes import client

        self.opts = opts
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.prom = prometheus
        self.metrics = metrics or Metrics()
        self.drainer = drainlib.Drainer(self.core, resource_prefixes=(opts.signals.gpu_resource_prefix,),
                                        dry_run=opts.dry_run, max_per_step=50)
        self.bucket = TokenBucket(opts.evictions_per_minute)
        self.shadow: dict[str, Record] = {}   # --dry-run: the records we would have written
        self._said: dict[tuple[str, str], float] = {}  # (node, reason) -> when last reported
        self.stopping = threading.Event()

    # reading
    def _nodes(self) -> list[dict]:
        kw = {"label_selector": self.opts.node_selector} if self.opts.node_selector else {}
        return json.loads(self.core.list_node(_preload_content=False, **kw).data)["items"]

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

    def sync(self) -> None:
        """List, decide, act: one pass over the fleet."""
        t0 = time.monotonic()
        raw = self._nodes()
        by_name = {n["metadata"]["name"]: n for n in raw}
        views = [self._view(n) for n in raw]
        gpu_names = [v.name for v in views if v.gpu_node]
        faults: dict[str, list] = {}
        if self.prom is not None:
            results = self.prom.collect(self.opts.signals)   # PrometheusError: skip this sync
            faults = faults_from_results(results, self.opts.signals, gpu_names)
        for v in views:
            if v.gpu_node:
                faults.setdefault(v.name, []).extend(node_faults(by_name[v.name], self.opts.signals))
        self.drainer.forget_policies()
        pods_left = {}
        for v in views:
            if v.record.state is State.DRAINING:
                go, leaving, _ = self.drainer.pods_to_drain(v.name)
                pods_left[v.name] = len(go) + len(leaving)
        now = time.time()
        result = step(views, faults, pods_left, now, self.opts.machine)
        for d in result.decisions:
            if d.actions:
                self._apply(by_name[d.node], d)
        with self.metrics.lock:
            self.metrics.nodes = result.counts()
            self.metrics.breaker_trips += len(result.breaker_tripped)
            self.metrics.breaker_open = int(bool(result.breaker_tripped) or result.held >= result.breaker_limit)
            self.metrics.last_sync_s = time.monotonic() - t0
        if result.breaker_tripped:
            log.warning("circuit breaker: %d nodes held (limit %d); not quarantining %s",
                        result.held, result.breaker_limit, ", ".join(result.breaker_tripped))

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
            if "add-taint" in kinds:
                drainlib.add_taint(self.core, name, TAINT_KEY, TAINT_EFFECT, OWNER, value="true",
                                   extra_annotations=after.annotations())
            elif "remove-taint" in kinds:
                drainlib.remove_taint(self.core, name, TAINT_KEY, OWNER, extra_annotations=after.annotations())
            elif "write-record" in kinds or after != d.before:
                self._patch_node(node, {"metadata": {"annotations": after.annotations()}}, expect=d.before)
            if "add-label" in kinds:
                self._patch_node(None, {"metadata": {"labels": {RESET_LABEL: "true"}}}, name)
            if "remove-label" in kinds:
                self._patch_node(None, {"metadata": {"labels": {RESET_LABEL: None}}}, name)
            if "set-condition" in kinds:
                self._condition(name, True, next(a for a in d.actions if a.kind == "set-condition").message)
            if "clear-condition" in kinds:
                self._condition(name, False, "")
        except ApiException as e:
            # 409: the node changed since we listed it; the next sync sees the new state.
            log.warning("%s: %s failed: %s %s", name, ",".join(kinds), e.status, e.reason)
            return
        for a in d.actions:
            if a.kind == "event" and not self._repeated(name, a.reason, d.changed):
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
            fresh = json.loads(self.core.read_node(name, _preload_content=False).data)
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
            cond = {"type": CONDITION_TYPE, "status": "True", "reason": "GpuFault", "message": message[:1000],
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
                self.event("Pod", r.name, r.namespace, r.uid, "GpuRemediationEvicted" if r.outcome == "evicted"
                           else "GpuRemediationDeleted", f"{r.outcome} from GPU node {name} (quarantined)", True)
                log.info("%s: %s %s/%s", name, r.outcome, r.namespace, r.name)
            elif r.outcome == "blocked":
                log.info("%s: eviction of %s/%s blocked: %s", name, r.namespace, r.name, r.message)
            elif r.outcome == "error":
                log.warning("%s: eviction of %s/%s failed: %s", name, r.namespace, r.name, r.message)
        return replace(d.after, evicted=tuple(evicted[-200:]))

    def event(self, kind: str, name: str, namespace: str, uid: str, reason: str, message: str, warning: bool) -> None:
        """A core/v1 Event on the object (Nodes' events go to `default`, as the kubelet's do)."""
        from kubernetes.client.exceptions import ApiException

        ns = namespace or "default"
        now = _now_micro().split(".")[0] + "Z"
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{name}.", "namespace": ns},
                "involvedObject": {"kind": kind, "name": name, "uid": uid, "apiVersion": "v1",
                                   **({"namespace": namespace} if namespace else {})},
                "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
                "source": {"component": OWNER, "host": socket.gethostname()},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": OWNER, "reportingInstance": self.opts.identity or socket.gethostname()}
        try:
            from kubernetes import client
            self.core.create_namespaced_event(ns, client.CoreV1Event.from_dict(body))
        except ApiException as e:
            log.warning("event %s on %s/%s: %s", reason, kind, name, e.reason)

    # the loop
    def run(self, elector: LeaseElector | None) -> int:
        """Sync every period while leader; returns the exit code on SIGTERM/SIGINT."""
        while not self.stopping.is_set():
            t0 = time.monotonic()
            leader = elector.try_acquire_or_renew() if elector else True
            with self.metrics.lock:
                self.metrics.leader = int(leader)
            if leader:
                try:
                    self.sync()
                    with self.metrics.lock:
                        self.metrics.syncs["ok"] += 1
                except PrometheusError as e:
                    log.warning("sync skipped: %s", e)
                    with self.metrics.lock:
                        self.metrics.syncs["skipped"] += 1
                except Exception:  # noqa: BLE001 - a failed sync must not stop the controller
                    log.exception("sync failed")
                    with self.metrics.lock:
                        self.metrics.syncs["error"] += 1
            if self.opts.once:
                break
            self.stopping.wait(max(0.0, self.opts.sync_period_s - (time.monotonic() - t0)))
        if elector:
            elector.release()
        return 0


def api_client_for(kubeconfig: str | None, context: str | None):
    """An ApiClient from a kubeconfig (or $KUBECONFIG, ~/.kube/config), else in-cluster."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        if kubeconfig or os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return config.new_client_from_config(config_file=kubeconfig, context=context)
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except (ConfigException, OSError, TypeError) as e:
        raise RemediateError(f"kubeconfig{' ' + kubeconfig if kubeconfig else ''}: {e}") from None


def main(opts: Options) -> int:
    """Run the controller until SIGTERM; returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    identity = opts.identity or f"{socket.gethostname()}-{os.getpid()}"
    opts = dataclasses.replace(opts, identity=identity)
    api = api_client_for(opts.kubeconfig, opts.context)
    prom = Prometheus(opts.prometheus_url) if opts.prometheus_url else None
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
        return ctl.run(elector)
    finally:
        if srv:
            srv.shutdown()


__all__ = ["Options", "Controller", "LeaseElector", "Metrics", "main", "HELD"]


# --- options ----------------------------------------------------------------------------

# Config file keys (the chart's platform.remediation values, camelCase) -> (type, check).
_KEYS: dict[str, tuple] = {
    "prometheusUrl": (str,), "syncPeriodSeconds": ((int, float),), "dryRun": (bool,),
    "metricsAddress": (str,), "leaseNamespace": (str,), "leaseName": (str,),
    "leaseDurationSeconds": ((int, float),), "evictionsPerMinute": ((int, float),),
    "suspectForSeconds": ((int, float),), "holdDownSeconds": ((int, float),), "drain": (bool,),
    "resetLabel": (bool,), "breakerMaxNodes": (int,), "breakerMaxPercent": ((int, float),),
    "maxNewQuarantinesPerSync": (int,), "ignoredTaints": (list,), "signals": (dict,),
    "criticalXids": (list,), "window": (str,), "nodeLabel": (str,), "conditions": (list,),
    "gpuResourcePrefix": (str,), "nodeSelector": (str,),
}
_SIGNAL_KEYS = {"xid": "xid", "dbe": "dbe", "rowRemap": "row-remap", "nvlink": "nvlink",
                "allocatable": "allocatable", "conditions": "conditions", "exporterMissing": "exporter"}


def load_config(path: str) -> dict:
    """Read the YAML config; a bad key or type is one error naming file:line:col and field."""
    import yaml

    try:
        text = open(path, encoding="utf-8").read()
        root = yaml.compose(text)
        data = yaml.safe_load(text) or {}
    except OSError as e:
        raise RemediateError(f"{path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise RemediateError(str(getattr(e, "problem", e)), source=path,
                             line=mark.line + 1 if mark else None, column=mark.column + 1 if mark else None) from None
    marks = {}
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if hasattr(k, "value"):
                marks[k.value] = (k.start_mark.line + 1, k.start_mark.column + 1)

    def bad(key: str, msg: str):
        line, col = marks.get(key.split(".")[0], (None, None))
        return RemediateError(msg, source=path, line=line, column=col, field=key)

    if not isinstance(data, dict):
        raise RemediateError("the config must be a mapping", source=path, line=1, column=1)
    for k, v in data.items():
        if k not in _KEYS:
            raise bad(k, f"unknown key (known: {', '.join(sorted(_KEYS))})")
        if not isinstance(v, _KEYS[k][0]) or (isinstance(v, bool) and _KEYS[k][0] in ((int, float), int)):
            raise bad(k, f"must be {_type_name(_KEYS[k][0])}, got {type(v).__name__}")
    for k, v in (data.get("signals") or {}).items():
        if k not in _SIGNAL_KEYS:
            raise bad(f"signals.{k}", f"unknown signal (known: {', '.join(_SIGNAL_KEYS)})")
        if k == "exporterMissing":
            if v not in ("ignore", "warn", "act"):
                raise bad(f"signals.{k}", "must be ignore, warn or act (a bare off would be YAML 1.1 false)")
        elif not isinstance(v, bool):
            raise bad(f"signals.{k}", "must be true or false")
    for k in ("criticalXids",):
        if any(not isinstance(x, int) or isinstance(x, bool) or x <= 0 for x in data.get(k, [])):
            raise bad(k, "must be a list of positive integers")
    for k in ("ignoredTaints", "conditions"):
        if any(not isinstance(x, str) or not x for x in data.get(k, [])):
            raise bad(k, "must be a list of non-empty strings")
    return data


def _type_name(t) -> str:
    names = {str: "a string", bool: "true or false", int: "an integer", list: "a list", dict: "a mapping"}
    return "a number" if isinstance(t, tuple) else names.get(t, t.__name__)


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
    scfg = SignalConfig(enabled=frozenset(enabled),
                        critical_xids=tuple(cfg.get("criticalXids", defaults_s.critical_xids)),
                        window=cfg.get("window", defaults_s.window), node_label=cfg.get("nodeLabel", defaults_s.node_label),
                        conditions=tuple(cfg.get("conditions", defaults_s.conditions)),
                        exporter_missing_acts=exporter == "act",
                        gpu_resource_prefix=cfg.get("gpuResourcePrefix", defaults_s.gpu_resource_prefix))
    mcfg = Config(suspect_for_s=float(cfg.get("suspectForSeconds", defaults_m.suspect_for_s)),
                  hold_down_s=float(cfg.get("holdDownSeconds", defaults_m.hold_down_s)),
                  drain=cfg.get("drain", defaults_m.drain), reset_label=cfg.get("resetLabel", defaults_m.reset_label),
                  breaker_max_nodes=cfg.get("breakerMaxNodes", defaults_m.breaker_max_nodes),
                  breaker_max_percent=float(cfg.get("breakerMaxPercent", defaults_m.breaker_max_percent)),
                  max_new_quarantines_per_sync=cfg.get("maxNewQuarantinesPerSync", defaults_m.max_new_quarantines_per_sync),
                  ignored_taints=tuple(cfg.get("ignoredTaints", defaults_m.ignored_taints)))
    opts = Options(kubeconfig=args.kubeconfig, context=args.context,
                   prometheus_url=pick("prometheus_url", "prometheusUrl", None) or None,
                   sync_period_s=float(pick("sync_period", "syncPeriodSeconds", 30.0)),
                   dry_run=bool(pick("dry_run", "dryRun", False)), once=bool(args.once),
                   metrics_address=pick("metrics_address", "metricsAddress", "0.0.0.0:8080"),
                   lease_namespace=pick("lease_namespace", "leaseNamespace", "default"),
                   lease_name=pick("lease_name", "leaseName", "gpu-inference-remediation"),
                   identity=args.identity or "", node_selector=cfg.get("nodeSelector", ""),
                   lease_duration_s=float(cfg.get("leaseDurationSeconds", max(15.0, 3 * float(pick("sync_period", "syncPeriodSeconds", 30.0))))),
                   evictions_per_minute=float(cfg.get("evictionsPerMinute", 30.0)), machine=mcfg, signals=scfg)
    checks = [(opts.sync_period_s > 0, "syncPeriodSeconds", "must be > 0"),
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
