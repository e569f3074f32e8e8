"""A fault-injecting HTTP proxy for the Prometheus API, owned by the tests (the one thing
between the remediation controller and the real Prometheus: it forwards every request to
Prometheus and, by mode, damages the answer the way real networks and servers do). It is
a test fixture, not a fake Prometheus: in `pass` mode the answer is Prometheus' own bytes.

Modes (set `proxy.mode`, thread-safe):
* `pass`: forward unchanged.
* `empty`: HTTP 200 with Prometheus' envelope and an empty result vector.
* `drop`: remove the series of the nodes in `proxy.drop_nodes` (either Hostname spelling).
* `slow`: send the real answer one byte every `proxy.slow_s` seconds.
* `huge`: answer 200 with `proxy.huge_series` synthetic series (250,000 by default).
* `error`: HTTP 503 with Prometheus' error envelope.
* `hang`: accept, read the request, never answer (until the proxy stops).
* `values`: replace every sample value by `proxy.value` (e.g. "NaN", "0").
* `age`: Prometheus' answer with every sample's evaluation time moved `proxy.age_s`
  seconds into the past (a cached or replayed answer, a Prometheus whose clock is off).
"""
from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request


class FaultProxy(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/")
        self.lock = threading.Lock()
        self.mode = "pass"
        self.drop_nodes: set[str] = set()
        self.slow_s = 5.0
        self.huge_series = 250_000
        self.value = "NaN"
        self.age_s = 3600.0
        self.requests = 0
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def set(self, mode: str, **kw) -> None:
        with self.lock:
            self.mode = mode
            for k, v in kw.items():
                setattr(self, k, v)

    def start(self) -> "FaultProxy":
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


def _huge(n: int) -> bytes:
    row = '{"metric":{"Hostname":"node-%d","gpu":"0"},"value":[1,"1"]}'
    return ('{"status":"success","data":{"resultType":"vector","result":['
            + ",".join(row % i for i in range(n)) + "]}}").encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        px: FaultProxy = self.server
        with px.lock:
            mode, drop, slow, huge, value, age = px.mode, set(px.drop_nodes), px.slow_s, px.huge_series, px.value, px.age_s
            px.requests += 1
        if mode == "hang":
            px.stopping.wait()
            return
        if mode == "error":
            return self._send(503, b'{"status":"error","errorType":"unavailable","error":"injected by the test proxy"}')
        if mode == "huge":
            return self._send(200, _huge(huge))
        try:
            with urllib.request.urlopen(px.upstream + self.path, timeout=10) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
        if mode in ("empty", "drop", "values", "age") and status == 200:
            doc = json.loads(body)
            res = doc.get("data", {}).get("result", [])
            if mode == "empty":
                res = []
            elif mode == "age":
                for s in res:
                    s["value"] = [s["value"][0] - age, s["value"][1]]
            elif mode == "drop":
                res = [s for s in res if not ({s["metric"].get("Hostname"), s["metric"].get("hostname")} & drop)]
            else:
                for s in res:
                    s["value"] = [s["value"][0], value]
            doc["data"]["result"] = res
            body = json.dumps(doc).encode()
        if mode == "slow":
            return self._send(status, body, drip=slow)
        self._send(status, body)

    def _send(self, status: int, body: bytes, drip: float = 0.0):
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not drip:
                self.wfile.write(body)
                return
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                if self.server.stopping.wait(drip):
                    return
        except OSError:
            pass      # the client gave up (its deadline): expected in slow mode

    def log_message(self, *args):
        pass

