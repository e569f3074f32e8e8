"""Benchmark: one whole `Controller.sync()` over 1,000 GPU nodes (8 GPUs each) with the
Prometheus signals read from a real Prometheus through the tests' fault-injecting proxy
(pass mode), target < 3 s (half the chart's 90 s lease is the hard bound; a sync period
is 30 s).

Real: Prometheus (.tools/bin/prometheus on loopback, scraping a generated DCGM exposition
of 8,000 GPUs, 1% with a critical Xid), the PromQL the controller sends (job selection,
the `up` guard, evidence), the proxy, the controller's parsing, decisions and write path.
Stand-in: the API server (an in-memory CoreV1Api answering the node list and accepting
patches and Events; a real one adds its round trips, one list and about one patch per
changed node). Prints a Markdown table (median of --runs).

    .venv/bin/python bench/bench_remediation_sync.py [--nodes 1000] [--runs 5]
"""
from __future__ import annotations

import argparse
import http.server
import io
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuvalues.operations import config as configlib  # noqa: E402
from gpuvalues.operations import controller as ctl  # noqa: E402
from gpuvalues.operations import metrics as metricslib  # noqa: E402
from gpuvalues.operations.remediation import Config  # noqa: E402
from gpuvalues.operations.signals import Prometheus, SignalConfig  # noqa: E402
from tests.faultproxy import FaultProxy  # noqa: E402

TARGET_S = 3.0
JOB = "dcgm-exporter"


class Exporter(http.server.ThreadingHTTPServer):
    def __init__(self, nodes: int, gpus: int):
        super().__init__(("127.0.0.1", 0), _H)
        out = []
        for i in range(nodes):
            for g in range(gpus):
                lab = f'gpu="{g}",UUID="GPU-{i}-{g}",Hostname="gpu-{i:05d}"'
                out.append(f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} 41")
                if i % 100 == 3 and g == 0:
                    out.append(f'DCGM_EXP_XID_ERRORS_COUNT{{{lab},xid="79"}} 1')
        self.body = ("\n".join(out) + "\n").encode()


class _H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *a):
        pass


class Resp(io.BytesIO):
    """An unpreloaded answer: read as a stream (kubeapi.read_json reads it in bounded chunks)."""


class Core:
    """In-memory stand-in for the API server's CoreV1Api (the calls the controller makes)."""

    def __init__(self, nodes: list[dict]):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.patches = 0

    def list_node(self, _preload_content=False, **kw):
        return Resp(json.dumps({"items": list(self.nodes.values())}).encode())

    def read_node(self, name, _preload_content=False):
        return Resp(json.dumps(self.nodes[name]).encode())

    def patch_node(self, name, body, **kw):
        self.patches += 1
        self._patched(name, body)
        return Resp(b"{}")

    def _patched(self, name, body):
        meta = self.nodes[name]["metadata"]
        for k, v in (body.get("metadata") or {}).get("annotations", {}).items():
            meta.setdefault("annotations", {})[k] = v
        if "spec" in body:
            self.nodes[name]["spec"].update(body["spec"])

    def patch_node_status(self, name, body, **kw):
        self.patches += 1
        return Resp(b"{}")

    def create_namespaced_event(self, ns, body, **kw):
        return Resp(b"{}")

    def list_pod_for_all_namespaces(self, **kw):
        return Resp(b'{"items": []}')

    def read_namespace(self, name, _preload_content=False):
        return Resp(b"{}")


def nodes_json(n: int, gpus: int) -> list[dict]:
    return [{"metadata": {"name": f"gpu-{i:05d}", "uid": f"u{i}", "resourceVersion": "1",
                          "labels": {"nvidia.com/gpu.present": "true"}, "annotations": {}},
             "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
             "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)},
                        "conditions": [{"type": "Ready", "status": "True"}]}} for i in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args(argv)
    exp = Exporter(a.nodes, a.gpus)
    threading.Thread(target=exp.serve_forever, daemon=True).start()
    work = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    port = free_port()
    (work / "p.yml").write_text(json.dumps({"global": {"scrape_interval": "2s"}, "scrape_configs": [
        {"job_name": JOB, "honor_labels": True, "static_configs": [
            {"targets": [f"127.0.0.1:{exp.server_address[1]}"], "labels": {"namespace": "gpu-ops"}}]}]}))
    prom = subprocess.Popen([str(ROOT / ".tools" / "bin" / "prometheus"), f"--config.file={work / 'p.yml'}",
                             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = None
    try:
        url = f"http://127.0.0.1:{port}"
        scfg = SignalConfig(exporter_job=JOB, exporter_namespace="gpu-ops", window="1m")
        direct = Prometheus(url, timeout=10)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2)
                if len(direct.query(scfg.queries()["presence"])) == a.nodes:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("Prometheus never scraped the exporter")
            time.sleep(0.5)
        proxy = FaultProxy(url).start()
        opts = configlib.Options(prometheus_url=proxy.url, once=True, lease_duration_s=90, signals=scfg,
                           machine=Config(breaker_max_nodes=500, breaker_max_percent=50, max_new_quarantines_per_sync=50),
                           evictions_per_minute=6000)
        times, prom_times = [], []
        core = Core(nodes_json(a.nodes, a.gpus))
        for _ in range(a.runs):
            c = ctl.Controller.__new__(ctl.Controller)
            c.opts, c.core, c.prom, c.metrics, c.elector = opts, core, Prometheus(proxy.url, timeout=10), metricslib.Metrics(), None
            from gpuvalues.operations import drain as drainlib
            c.drainer = drainlib.Drainer(core, max_per_step=50, guard=c._guard)
            c.bucket, c.shadow, c._said, c.stopping = drainlib.TokenBucket(6000), {}, {}, threading.Event()
            c.latched = frozenset()
            t0 = time.perf_counter()
            c.prom.collect(scfg)
            prom_times.append(time.perf_counter() - t0)
            c.deadline = time.monotonic() + c.sync_budget_s
            t0 = time.perf_counter()
            kind = c.sync()
            times.append(time.perf_counter() - t0)
            assert kind == "ok", kind
        med = statistics.median(times)
        print("| nodes | GPU series | sync (median) | min | max | of which Prometheus (5 queries, median) | "
              "node patches | target |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {a.nodes:,} | {a.nodes * a.gpus:,} | {med * 1000:.0f} ms | {min(times) * 1000:.0f} ms | "
              f"{max(times) * 1000:.0f} ms | {statistics.median(prom_times) * 1000:.0f} ms | {core.patches} | "
              f"< {TARGET_S:g} s |")
        return 0 if med < TARGET_S else 1
    finally:
        if proxy:
            proxy.stop()
        prom.terminate()
        prom.wait(10)
        exp.shutdown()


if __name__ == "__main__":
    sys.exit(main())
