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
* `exporter`: a GPU node with no `DCGM_FI_DEV_GPU_TEMP` series (the exporter is missing):
  warn only by default; absence of data must not quarantine a fleet.

From the API server (the Node objects):

* `allocatable`: allocatable GPUs below capacity (the device plugin marked devices
  Unhealthy: k8s-device-plugin internal/rm/health.go reports XidCriticalError devices
  Unhealthy in ListAndWatch and cannot recover them without a restart).
* `conditions`: Node conditions set by others (Node Problem Detector, NVSentinel) with
  status True, names configurable.

The node a DCGM series belongs to is its `Hostname` label (the exporter sets it from the
node name, NODE_NAME in the chart's DaemonSet); configurable (`node_label`).
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Iterable, Mapping

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


class PrometheusError(GpuValuesError):
    """Prometheus could not be queried (the sync is skipped: no signal is not health)."""


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

    def queries(self) -> dict[str, str]:
        """PromQL per Prometheus signal, each aggregated to (node, gpu[, xid])."""
        n, w = self.node_label, self.window
        q = {}
        if "xid" in self.enabled and self.critical_xids:
            xids = "|".join(str(x) for x in self.critical_xids)
            q["xid"] = f'max by ({n}, gpu, xid) (max_over_time(DCGM_EXP_XID_ERRORS_COUNT{{xid=~"{xids}"}}[{w}])) > 0'
        if "dbe" in self.enabled:
            q["dbe"] = f"max by ({n}, gpu) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{w}])) > 0"
        if "row-remap" in self.enabled:
            q["row-remap"] = f"max by ({n}, gpu) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0"
        if "nvlink" in self.enabled:
            q["nvlink"] = f"max by ({n}, gpu) (increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[{w}])) > 0"
        if "exporter" in self.enabled:
            q["exporter"] = f"count by ({n}) (DCGM_FI_DEV_GPU_TEMP)"
        return q


def faults_from_results(results: Mapping[str, list[Mapping]], cfg: SignalConfig,
                        gpu_nodes: Iterable[str]) -> dict[str, list[Fault]]:
    """Prometheus instant-vector results (the `data.result` list per signal) -> faults per
    node. `gpu_nodes` are the GPU nodes the API server knows (for the exporter check)."""
    out: dict[str, list[Fault]] = {}
    n = cfg.node_label
    for sig in ("xid", "dbe", "row-remap", "nvlink"):
        for s in results.get(sig, ()):
            m = s.get("metric", {})
            node = m.get(n)
            if not node:
                continue
            value = s.get("value", (0, "0"))[1]
            if sig == "xid":
                detail = f"Xid {m.get('xid', '?')} on GPU {m.get('gpu', '?')} ({value} in {cfg.window})"
            else:
                detail = f"GPU {m.get('gpu', '?')}: {value}"
            out.setdefault(node, []).append(Fault(sig, detail))
    if "exporter" in results:
        seen = {s.get("metric", {}).get(n) for s in results["exporter"]}
        for node in gpu_nodes:
            if node not in seen:
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
                out.append(Fault("condition", f"{c['type']}: {c.get('reason', '')} {c.get('message', '')}".strip()))
    return out


def _int(v) -> int:
    try:
        return int(str(v))
    except ValueError:
        return 0


class Prometheus:
    """A minimal Prometheus HTTP API client (instant queries), standard library only."""

    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, promql: str) -> list[dict]:
        """`GET /api/v1/query`: the result vector; PrometheusError on any failure."""
        u = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        try:
            with urllib.request.urlopen(u, timeout=self.timeout) as r:  # noqa: S310 (configured URL)
                body = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise PrometheusError(f"{self.url}: query failed: {e}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{self.url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def collect(self, cfg: SignalConfig) -> dict[str, list[dict]]:
        """Every enabled Prometheus signal's result."""
        return {sig: self.query(q) for sig, q in cfg.queries().items()}
