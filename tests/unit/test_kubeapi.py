"""The API client's error answers are bounded like its successful ones (issue 24 leftover):
the kubernetes client reads a 4xx/5xx body whole into its ApiException; `with_deadlines`
hands it at most `MAX_ERROR_BYTES`, read within the request's read timeout, and the
error still says its status and reason.

The API server is a loopback HTTP server (the one stand-in: no real API server runs in
unit tests) that answers every GET with an error status, a stated Content-Length and a
body streamed until the client goes away, so nothing large is ever built in memory."""
from __future__ import annotations

import http.server
import json
import threading
import time
import tracemalloc

import pytest

from gpuvalues.operations import drain, kubeapi
from tests.conftest import write_kubeconfig

HUGE = 1 << 30          # what the server says it sends (1 GiB)


class ErrorServer:
    """Answers every GET with `status reason` and `body_len` bytes of `piece` repeated,
    written `chunk` bytes at a time every `drip` seconds; `sent` counts what got out."""

    def __init__(self, status: int, reason: str, body_len: int, piece: bytes = b'{"message":"x', *,
                 chunk: int = 1 << 16, drip: float = 0.0, body: bytes | None = None):
        outer = self
        self.sent = 0
        self.stop = threading.Event()

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status, reason)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) if body is not None else body_len))
                self.end_headers()
                try:
                    if body is not None:
                        self.wfile.write(body)
                        outer.sent += len(body)
                        return
                    block = (piece * (chunk // len(piece) + 1))[:chunk]
                    left = body_len
                    while left > 0 and not outer.stop.is_set():
                        n = min(chunk, left)
                        self.wfile.write(block[:n])
                        self.wfile.flush()
                        outer.sent += n
                        left -= n
                        if drip and outer.stop.wait(drip):
                            return
                except OSError:            # the client closed the connection: stop sending
                    pass

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def core(self, bounded: bool = True, timeout_s: float = 5.0):
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{self.srv.server_address[1]}"
        api = client.ApiClient(cfg)
        return client.CoreV1Api(kubeapi.with_deadlines(api, timeout_s) if bounded else api)

    def close(self):
        self.stop.set()
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def server():
    made = []

    def make(*a, **kw):
        s = ErrorServer(*a, **kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


@pytest.mark.parametrize("preload", [False, True], ids=["unpreloaded", "preloaded"])
def test_a_huge_error_body_is_cut_and_the_error_keeps_status_and_reason(server, preload):
    from kubernetes.client.exceptions import ApiException

    srv = server(500, "Everything Is On Fire", HUGE)
    core = srv.core()
    import urllib3.response  # noqa: F401  (imported before tracing starts)
    tracemalloc.start()
    try:
        with pytest.raises(ApiException) as e:
            core.read_node("n", _preload_content=preload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.status == 500 and e.value.reason == "Everything Is On Fire"
    assert "500" in str(e.value) and "Everything Is On Fire" in str(e.value)
    assert 0 < len(e.value.body) <= kubeapi.MAX_ERROR_BYTES
    assert peak < 8 * 2**20, f"{peak} bytes allocated while reading the error"
    time.sleep(0.2)
    # the client hung up after the cap: the server got out at most the cap plus the socket
    # buffers (a few MiB on loopback), never the 1 GiB it announced
    assert srv.sent < 64 * 2**20, srv.sent


def test_a_dripping_error_body_is_cut_at_the_read_timeout(server):
    from kubernetes.client.exceptions import ApiException

    srv = server(503, "Service Unavailable", HUGE, chunk=64, drip=0.2)
    t0 = time.monotonic()
    with pytest.raises(ApiException) as e:
        srv.core(timeout_s=1.0).read_node("n", _preload_content=False)
    assert time.monotonic() - t0 < 3.0
    assert e.value.status == 503 and e.value.reason == "Service Unavailable"
    assert len(e.value.body) < 64 * 12


def test_a_normal_status_is_read_whole_and_its_message_parsed(server):
    """Control: an ordinary Status answer (a PDB's 429) reaches its callers unchanged."""
    from kubernetes.client.exceptions import ApiException

    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests",
              "message": "Cannot evict pod as it would violate the pod's disruption budget.", "code": 429}
    body = json.dumps(status).encode()
    srv = server(429, "Too Many Requests", 0, body=body)
    with pytest.raises(ApiException) as e:
        srv.core().read_node("n", _preload_content=False)
    assert e.value.status == 429 and e.value.body == body.decode()
    assert drain._message(e.value) == status["message"]


def test_a_body_nested_past_the_parser_is_dropped(server):
    """A cut body nested deeper than `json` parses: dropped, so the callers that parse the
    Status message (drain, rollout) fall back to the reason instead of a RecursionError."""
    from kubernetes.client.exceptions import ApiException

    srv = server(422, "Unprocessable Entity", HUGE, piece=b"[")
    with pytest.raises(ApiException) as e:
        srv.core().read_node("n", _preload_content=False)
    assert e.value.status == 422 and e.value.body == ""
    assert drain._message(e.value) == "Unprocessable Entity"


def test_negative_control_the_plain_client_reads_the_error_body_whole(server):
    """Without with_deadlines the kubernetes client takes the whole error body (2 MiB here):
    the bound above is ours, not the client's."""
    from kubernetes.client.exceptions import ApiException

    srv = server(500, "Internal Server Error", 2 * 2**20)
    with pytest.raises(ApiException) as e:
        srv.core(bounded=False).read_node("n", _preload_content=False)
    assert len(e.value.body) == 2 * 2**20


# -- the read-only edges (inventory from a live cluster, doctor's live read) read the same way --
def _kubeconfig(tmp_path, srv) -> str:
    return str(write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{srv.srv.server_address[1]}"))


def _read_nodes(kubeconfig):
    from gpuvalues.io.cluster import from_kubernetes
    return from_kubernetes(kubeconfig)


def _read_doctor(kubeconfig):
    from gpuvalues.io.snapshot import read_live
    return read_live(kubeconfig, None)


READERS = [pytest.param(_read_nodes, id="inventory"), pytest.param(_read_doctor, id="doctor")]


@pytest.mark.parametrize("read", READERS)
def test_a_huge_list_answer_is_refused_at_the_cap_not_read_whole(server, tmp_path, monkeypatch, read):
    from gpuvalues.io import cluster
    from gpuvalues.operations import kubeapi as k

    monkeypatch.setattr(cluster, "MAX_LIST_BYTES", 2 * 2**20)
    monkeypatch.setattr(k, "MAX_LIST_BYTES", 2 * 2**20)   # read_live imports it at call time
    srv = server(200, "OK", HUGE, piece=b'{"items":[')
    kubeconfig = _kubeconfig(tmp_path, srv)
    tracemalloc.start()
    try:
        with pytest.raises(k.AnswerTooLarge, match="larger than 2 MiB"):
            read(kubeconfig)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak} bytes allocated while refusing the answer"
    time.sleep(0.2)
    assert srv.sent < 64 * 2**20, srv.sent


@pytest.mark.parametrize("read", READERS)
def test_a_huge_error_answer_is_cut_and_said_as_its_status(server, tmp_path, read):
    from gpuvalues.errors import TransientError

    srv = server(503, "Service Unavailable", HUGE)
    kubeconfig = _kubeconfig(tmp_path, srv)
    with pytest.raises(TransientError, match="503") as e:      # retry later (exit 3), not bad input
        read(kubeconfig)
    assert len(str(e.value)) < 2 * kubeapi.MAX_ERROR_BYTES
    time.sleep(0.2)
    assert srv.sent < 64 * 2**20, srv.sent


def test_a_non_object_list_answer_is_refused_by_doctor(server, tmp_path):
    from gpuvalues.errors import TransientError

    srv = server(200, "OK", 0, body=b'[1, 2, 3]')
    with pytest.raises(TransientError, match="not a JSON object"):
        _read_doctor(_kubeconfig(tmp_path, srv))


def test_a_huge_prometheus_series_answer_is_refused(server, monkeypatch):
    from gpuvalues.errors import TransientError
    from gpuvalues.io import snapshot

    monkeypatch.setattr(snapshot, "MAX_SERIES_BYTES", 2**20)
    srv = server(200, "OK", HUGE, piece=b'{"data":[')
    url = f"http://127.0.0.1:{srv.srv.server_address[1]}"
    with pytest.raises(TransientError, match="larger than 1 MiB"):
        snapshot.query_series(url, ["DCGM_FI_DEV_GPU_UTIL"])
    # control: an answer under the cap is read and parsed
    ok = server(200, "OK", 0, body=b'{"status":"success","data":[]}')
    got = snapshot.query_series(f"http://127.0.0.1:{ok.srv.server_address[1]}", ["DCGM_FI_DEV_GPU_UTIL"])
    assert got == {"DCGM_FI_DEV_GPU_UTIL": {"status": "success", "data": []}}
