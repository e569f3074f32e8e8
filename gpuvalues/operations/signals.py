"""Fault signals for the remediation controller, each switchable.

From Prometheus (DCGM exporter series, over the HTTP API `GET /api/v1/query`):

* `xid`: a critical Xid counted by the exporter in a window,
  `DCGM_EXP_XID_ERRORS_COUNT{xid=~"<critical>"}` (dcgm-exporter's `--xid-count-window-size`
  counter, labelled `xid`; `DCGM_FI_DEV_XID_ERRORS` holds only the last Xid, so it latches).
  `CRITICAL_XIDS` below says why each code is on the list.
* `dbe`: `increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[window]) > 0` (new volatile double-bit ECC).
* `row-remap`: `DCGM_FI_DEV_ROW_REMAP_FAILURE > 0` (the GPU could not remap a failing row).
* `nvlink`: `increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[window]) > 0` (link
  recoveries; CRC counters tick on healthy links too, so they are not used by default).
* evidence (`presence`): per node, how many `DCGM_FI_DEV_GPU_TEMP` series the exporter
  gives. A node is healthy only on evidence: its series present and its exporter's target
  scraped (`up == 1`); a node without evidence keeps its state (no data is not health).
  Without evidence a GPU node also gets an `exporter-missing` warning (act on it with
  `exporter_missing_acts`).

Every series is selected by the chart's own exporter job (`exporter_job`) and kept only if
it comes from a target of that job (`and on (instance) up{job, namespace} == 1`), so a
series from another job that claims a node's `Hostname` is never read. Values are read
with their metric's meaning: a sample must be finite and > 0, an Xid label a critical
code. Label values in PromQL are escaped (`promql_string`), label names and windows checked.

From the API server (the Node objects):

* `allocatable`: allocatable GPUs below capacity (the device plugin marked devices
  Unhealthy: k8s-device-plugin internal/rm/health.go reports XidCriticalError devices
  Unhealthy in ListAndWatch and cannot recover them without a restart).
* `conditions`: Node conditions set by others (Node Problem Detector, NVSentinel) with
  status True, names configurable.

The node a DCGM series belongs to is its `Hostname` label (the exporter sets it from the
node name, NODE_NAME in the chart's DaemonSet), or `hostname`: dcgm-exporter renamed the
label in NVIDIA/dcgm-exporter#655 (commit d5e5f51), so with the default both spellings
are read; another `node_label` is read alone.
"""
from __future__ import annotations

import http.client
import json
import math
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from gpuvalues.errors import GpuValuesError
from gpuvalues.operations.remediation import Fault

# Xids that mean the GPU (not the application) failed; sources: NVIDIA's Xid catalog
# (docs.nvidia.com/deploy/xid-errors, "Resolution Bucket" column), the dynamic page
# retirement / row remapping guide, and the chart's GpuCriticalXid alert (same list).
CRITICAL_XIDS: dict[int, str] = {
    46: "GPU stopped processing (catalog: reset GPU)",
    48: "double-bit ECC error (catalog: drain, reset GPU)",
    64: "row remapping / page retirement failure (row remapping guide: service the GPU)",
    74: "NVLink error (catalog: reset GPU; re-read topology afterwards)",
    79: "GPU has fallen off the bus (catalog: reboot the node)",
    95: "uncontained ECC error (catalog: reset GPU)",
    119: "GSP RPC timeout (catalog: reset GPU or reboot)",
    120: "GSP error (catalog: reset GPU or reboot)",
}
# Application Xids the device plugin ignores by default (k8s-device-plugin
# internal/rm/health.go): never on the critical list.
APPLICATION_XIDS = (13, 31, 43, 45, 68, 109)

SIGNALS = ("xid", "dbe", "row-remap", "nvlink", "exporter", "allocatable", "conditions")

# dcgm-exporter's node label before and after NVIDIA/dcgm-exporter#655 (d5e5f51).
HOSTNAME_LABELS = ("Hostname", "hostname")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")   # Prometheus data model: label names
DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")  # PromQL durations (promql/parser/lex.go)
MAX_RESPONSE_BYTES = 8 * 2**20   # a Prometheus answer larger than this is refused (chart limit 256Mi)
MAX_SERIES = 200_000
DEFAULT_MAX_SAMPLE_AGE_S = 60.0   # 4 x the chart's DCGM scrape interval (15 s)


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal for `value` (Go string escapes: backslash,
    double quote, control characters), so a label value cannot end the selector."""
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class PrometheusError(GpuValuesError):
    """Prometheus could not be queried. Internal to the loop (the Prometheus signals are
    unknown for the sync: no node is released on them); never a start-up error."""


@dataclass(frozen=True)
class SignalConfig:
    """Which signals run and how."""
    enabled: frozenset[str] = frozenset(SIGNALS)
    critical_xids: tuple[int, ...] = tuple(CRITICAL_XIDS)
    window: str = "10m"
    node_label: str = "Hostname"
    conditions: tuple[str, ...] = ("GpuUnhealthy", "GpuXidError", "NVLinkDown")
    exporter_missing_acts: bool = False
    gpu_resource_prefix: str = "nvidia.com/"
    exporter_job: str = ""          # the chart's DCGM exporter job; empty: any job (not advised)
    exporter_namespace: str = ""    # its namespace (a target label); empty: any
    # Evidence of health needs samples younger than this (seconds): 4 scrape intervals of
    # the chart's DCGM ServiceMonitor (15 s), so three missed scrapes still count as fresh.
    max_sample_age_s: float = DEFAULT_MAX_SAMPLE_AGE_S

    def __post_init__(self):
        if not LABEL_NAME.fullmatch(self.node_label):
            raise ValueError(f"nodeLabel {self.node_label!r} is not a Prometheus label name")
        if not DURATION.fullmatch(self.window):
            raise ValueError(f"window {self.window!r} is not a PromQL duration (e.g. 10m)")
        if not (math.isfinite(self.max_sample_age_s) and self.max_sample_age_s > 0):
            raise ValueError(f"maxSampleAgeSeconds {self.max_sample_age_s!r} must be a number of seconds > 0")

    def node_labels(self) -> tuple[str, ...]:
        """The labels that name the node, first match wins."""
        return HOSTNAME_LABELS if self.node_label in HOSTNAME_LABELS else (self.node_label,)

    def _sel(self, extra: str = "") -> str:
        parts = [f"job={promql_string(self.exporter_job)}"] if self.exporter_job else []
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}"

    def _guard(self) -> str:
        """Keep series of targets of our job (and namespace) whose last scrape succeeded
        (without a job, of any target with that instance whose last scrape succeeded)."""
        labels = [f"job={promql_string(self.exporter_job)}"] if self.exporter_job else []
        if self.exporter_namespace:
            labels.append(f"namespace={promql_string(self.exporter_namespace)}")
        return f" and on (instance) (up{{{','.join(labels)}}} == 1)" if labels else " and on (instance) (up == 1)"

    def queries(self) -> dict[str, str]:
        """PromQL per Prometheus signal, each aggregated to (node, gpu[, xid])."""
        by, w, g = ", ".join(self.node_labels()), self.window, self._guard()
        q = {}
        if "xid" in self.enabled and self.critical_xids:
            xids = "|".join(str(int(x)) for x in self.critical_xids)
            q["xid"] = (f"max by ({by}, gpu, xid) (max_over_time("
                        f"DCGM_EXP_XID_ERRORS_COUNT{self._sel(f'xid=~{promql_string(xids)}')}[{w}]){g}) > 0")
        if "dbe" in self.enabled:
            q["dbe"] = f"max by ({by}, gpu) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{self._sel()}[{w}]){g}) > 0"
        if "row-remap" in self.enabled:
            q["row-remap"] = f"max by ({by}, gpu) (DCGM_FI_DEV_ROW_REMAP_FAILURE{self._sel()}{g}) > 0"
        if "nvlink" in self.enabled:
            q["nvlink"] = (f"max by ({by}, gpu) (increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
                           f"{self._sel()}[{w}]){g}) > 0")
        # evidence of health, always queried: per node, the oldest sample time of its GPUs'
        # series (timestamp(): an instant vector's own time is the evaluation time, so a last
        # sample still inside the lookback window would look fresh without it)
        q["presence"] = f"min by ({by}) (timestamp(DCGM_FI_DEV_GPU_TEMP{self._sel()}){g})"
        return q

    def node_of(self, metric: Mapping) -> str | None:
        for lab in self.node_labels():
            v = metric.get(lab)
            if isinstance(v, str) and v and len(v) <= 253:
                return v
        return None


def _sample(s: Mapping) -> float | None:
    """The sample value of an instant-vector element if it is a finite number > 0."""
    try:
        v = float(s.get("value", (0, "0"))[1])
    except (TypeError, ValueError, IndexError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def evidence_from_results(results: Mapping[str, list[Mapping]] | None, cfg: SignalConfig,
                          gpu_nodes: Iterable[str]) -> dict[str, bool]:
    """Per GPU node, whether Prometheus gave evidence of health: its exporter's series are
    there (from a scraped target of the exporter job, `up == 1`) and fresh: every GPU's last
    sample at most `max_sample_age_s` older than the query's evaluation time. A node whose
    exporter stopped while Prometheus still returns its last sample (inside the lookback
    window, or with a timestamp far in the past) has none. None (Prometheus failed): none."""
    seen = set()
    for s in (results or {}).get("presence", ()):
        node = cfg.node_of(s.get("metric") or {})
        age = sample_age(s)
        if node and age is not None and age <= cfg.max_sample_age_s:
            seen.add(node)
    return {n: n in seen for n in gpu_nodes}


def sample_age(s: Mapping[str, Any]) -> float | None:
    """For a `timestamp()` result: evaluation time minus the sample's time (seconds), or
    None when either is not a finite time."""
    try:
        at, v = float(s["value"][0]), float(s["value"][1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    if not (math.isfinite(at) and math.isfinite(v) and v > 0):
        return None
    return max(0.0, at - v)


def check_fresh(results: Mapping[str, Sequence[Mapping[str, Any]]], max_age_s: float,
                now: float | None = None) -> None:
    """PrometheusError when an answer was evaluated more than `max_age_s` away from our
    clock (a cached or replayed answer, a Prometheus whose clock is off): no signal in it
    can be trusted, so the sync treats Prometheus as unavailable."""
    now = time.time() if now is None else now
    for sig, series in results.items():
        for s in series:
            try:
                at = float(s["value"][0])
            except (TypeError, ValueError, IndexError, KeyError):
                raise PrometheusError(f"the {sig} answer has a sample without a time") from None
            if not math.isfinite(at) or abs(now - at) > max_age_s:
                raise PrometheusError(f"the {sig} answer was evaluated {now - at:.0f} s from our clock "
                                      f"(more than {max_age_s:g} s): stale or replayed, not used")


def faults_from_results(results: Mapping[str, list[Mapping]], cfg: SignalConfig,
                        gpu_nodes: Iterable[str]) -> dict[str, list[Fault]]:
    """Prometheus instant-vector results (the `data.result` list per signal) -> faults per
    node. `gpu_nodes` are the GPU nodes the API server knows (for the exporter check)."""
    out: dict[str, list[Fault]] = {}
    critical = set(cfg.critical_xids)
    for sig in ("xid", "dbe", "row-remap", "nvlink"):
        for s in results.get(sig, ()):
            m = s.get("metric") or {}
            node, value = cfg.node_of(m), _sample(s)
            if not node or value is None:
                continue
            gpu = str(m.get("gpu", "?"))[:8]
            if sig == "xid":
                code = str(m.get("xid", ""))
                if not code.isdigit() or int(code) not in critical:   # Xids are positive integers
                    continue
                detail = f"Xid {int(code)} on GPU {gpu} ({value:g} in {cfg.window})"
            else:
                detail = f"GPU {gpu}: {value:g}"
            out.setdefault(node, []).append(Fault(sig, detail))
    if "presence" in results and "exporter" in cfg.enabled:
        ev = evidence_from_results(results, cfg, gpu_nodes)
        for node, ok in ev.items():
            if not ok:
                out.setdefault(node, []).append(
                    Fault("exporter-missing", "no DCGM exporter series for this GPU node", cfg.exporter_missing_acts))
    for faults in out.values():
        faults.sort(key=lambda f: (f.kind, f.detail))
    return out


def node_faults(node: Mapping, cfg: SignalConfig) -> list[Fault]:
    """Faults visible on the Node object itself: allocatable GPUs below capacity, and
    conditions set by others."""
    status = node.get("status") or {}
    out = []
    if "allocatable" in cfg.enabled:
        cap, alloc = status.get("capacity") or {}, status.get("allocatable") or {}
        for res, c in cap.items():
            if not res.startswith(cfg.gpu_resource_prefix):
                continue
            have, want = _int(alloc.get(res, 0)), _int(c)
            if have < want:
                out.append(Fault("allocatable", f"{res} allocatable {have} < capacity {want} (device plugin: unhealthy devices)"))
    if "conditions" in cfg.enabled and cfg.conditions:
        for c in status.get("conditions") or []:
            if c.get("type") in cfg.conditions and c.get("status") == "True":
                text = f"{c['type']}: {str(c.get('reason', ''))[:200]} {str(c.get('message', ''))[:400]}"
                out.append(Fault("condition", text.strip()))
    return out


def _int(v) -> int:
    try:
        return int(str(v))
    except ValueError:
        return 0


class Prometheus:
    """A minimal Prometheus HTTP API client (instant queries), standard library only.
    Every query has a deadline for the whole exchange (connect, headers, body: a server
    that sends one byte every few seconds is cut off at it) and a cap on the answer's size."""

    def __init__(self, url: str, timeout: float = 10.0, max_bytes: int = MAX_RESPONSE_BYTES):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes
        u = urllib.parse.urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{url}: not an http(s) URL")
        self._parts = u

    def query(self, promql: str, deadline: float | None = None) -> list[dict]:
        """`GET /api/v1/query`: the result vector; PrometheusError on any failure.
        `deadline` (time.monotonic()) bounds it further."""
        end = time.monotonic() + self.timeout
        if deadline is not None:
            end = min(end, deadline)
        u = self._parts
        path = f"{u.path}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise PrometheusError(f"{self.url}: no time left for the query (sync deadline)")
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname, u.port, timeout=remaining)
        # The socket timeout bounds each read; the timer bounds the whole exchange (it
        # shuts the socket down, which ends any read blocked on it).
        held: list = []
        timer = threading.Timer(remaining, _abort, (held,))
        timer.daemon = True
        timer.start()
        try:
            conn.connect()
            held.append(conn.sock)
            if time.monotonic() >= end:
                raise OSError("deadline")
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            data = resp.read(self.max_bytes + 1)
            if time.monotonic() >= end - 0.01:
                raise OSError("deadline")        # cut short by the timer
            if len(data) > self.max_bytes:
                raise PrometheusError(f"{self.url}: answer larger than {self.max_bytes // 2**20} MiB: refused")
            status = resp.status
        except PrometheusError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as e:
            late = time.monotonic() >= end - 0.01
            raise PrometheusError(f"{self.url}: query failed: "
                                  f"{'deadline exceeded' if late else e.__class__.__name__ + ': ' + str(e)}") from None
        finally:
            timer.cancel()
            conn.close()
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            raise PrometheusError(f"{self.url}: HTTP {status}, not JSON") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error") if isinstance(body, dict) else None
            etype = body.get("errorType") if isinstance(body, dict) else None
            raise PrometheusError(f"{self.url}: HTTP {status}: {etype}: {str(err)[:200]}")
        result = (body.get("data") or {}).get("result")
        if not isinstance(result, list) or len(result) > MAX_SERIES:
            raise PrometheusError(f"{self.url}: result is not a vector of at most {MAX_SERIES} series")
        return [s for s in result if isinstance(s, dict)]

    def collect(self, cfg: SignalConfig, deadline: float | None = None) -> dict[str, list[dict]]:
        """Every enabled Prometheus signal's result, each evaluated within
        `cfg.max_sample_age_s` of our clock (`check_fresh`)."""
        results = {sig: self.query(q, deadline) for sig, q in cfg.queries().items()}
        check_fresh(results, cfg.max_sample_age_s)
        return results


def _abort(held: list) -> None:
    for sock in held:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
