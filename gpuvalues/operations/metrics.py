"""The remediation controller's `/metrics` and `/healthz`.

`/metrics` serves the Prometheus text exposition format (version 0.0.4, written by hand: a
handful of series does not justify a client library). `/healthz` answers 500 when the loop
has made no progress for `stale_after` seconds (a sync period plus a lease), so the
kubelet restarts a wedged loop.
"""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from gpuvalues.operations.config import RemediateError
from gpuvalues.operations.remediation import State


class Metrics:
    """The controller's series, rendered in the text exposition format (version 0.0.4)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        self.nodes: dict[str, int] = {s.value: 0 for s in State}
        self.evictions: dict[str, int] = {}
        self.breaker_trips = 0
        self.breaker_open = 0
        self.leader = 0
        self.syncs: dict[str, int] = {"ok": 0, "error": 0, "source-down": 0, "deadline": 0}
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
        def do_GET(self) -> None:
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

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        srv = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    except (OSError, ValueError) as e:
        raise RemediateError(f"--metrics-address {address}: {e}") from None
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True, name="metrics").start()
    return srv
