"""Talking to the Kubernetes API server, for everything in operations/ (the remediation
controller, drains, MIG rollouts) and the read-only edges (io/cluster's live inventory,
io/snapshot's live read for doctor): a client from a kubeconfig read through the project's
safe reader, a deadline on every request, and a size cap plus a whole-read deadline on
every answer read (`read_json`), error answers (4xx/5xx) included.

The kubernetes client has no timeout by default (a request can wait forever) and reads an
answer whole, whatever its size. Here every request gets a connect and a per-read timeout
(`with_deadlines`), and answers are read unpreloaded (`_preload_content=False`) through
`read_json`, a bounded number of bytes, one socket read at a time, against a deadline for
the whole body: an API server (or a proxy in front of it) that sends one byte every few
seconds is cut off at the deadline, not at the end of the answer. An error answer (4xx/5xx)
is read by the client itself (`ApiException` takes the whole body); `with_deadlines` reads
it first, at most `MAX_ERROR_BYTES` within the request's read timeout, and hands the client
only that (the status line, hence `ApiException.status` and `.reason`, is kept whole).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from gpuvalues.errors import GpuValuesError, TransientError

# etcd refuses objects over 1.5 MiB by default (--max-request-bytes); 8 MiB leaves room
# for what the API server adds (managedFields) and still bounds a forged answer.
MAX_OBJECT_BYTES = 8 * 2**20
# A LIST: ~50,000 nodes or ~100,000 pods of the size kwok/real kubelets report.
MAX_LIST_BYTES = 256 * 2**20
READ_CHUNK = 256 * 2**10
# An error answer is a Status object (apimachinery metav1.Status: a message of a few hundred
# bytes; an admission webhook's denial a few KiB). Past this it is cut: what callers read
# from it (the Status message) is then unparsed and they fall back to the reason.
MAX_ERROR_BYTES = 64 * 2**10


class AnswerTooLarge(TransientError):
    """An API server answer past its size cap: refused before it is parsed,
    so memory stays bounded. Transient (exit 3): the cluster is not the caller's input."""

    code = "GV070"


def read_json(resp: Any, limit: int = MAX_OBJECT_BYTES, *, timeout_s: float = 30.0, what: str = "the API server") -> Any:
    """The JSON body of an unpreloaded response (urllib3's HTTPResponse), read one socket
    read at a time: AnswerTooLarge past `limit` bytes, TransientError past `timeout_s` for
    the whole body (each read is also bounded by the request's read timeout)."""
    from urllib3.exceptions import HTTPError

    end = time.monotonic() + timeout_s
    read: Callable[[int], bytes] = getattr(resp, "read1", None) or resp.read
    parts: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = read(READ_CHUNK)
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(f"{what}: answer larger than {limit / 2**20:g} MiB: refused")
            if time.monotonic() > end:
                raise TransientError(f"{what}: answer not read within {timeout_s:g} s (deadline): refused")
    except GpuValuesError:
        _close(resp)
        raise
    except (OSError, HTTPError) as exc:      # a read timeout, a reset, a truncated body
        _close(resp)
        raise TransientError(f"{what}: answer cut off: {exc.__class__.__name__}") from None
    release = getattr(resp, "release_conn", None)
    if release is not None:
        release()
    try:
        return json.loads(b"".join(parts))
    except (ValueError, RecursionError):
        raise TransientError(f"{what}: the answer is not JSON") from None


def answered(resp: Any, what: str = "the API server") -> None:
    """Read (and drop) the answer to a write made with `_preload_content=False`, bounded as
    `read_json` bounds it: the client would otherwise read and deserialize it whole."""
    read_json(resp, what=what)


def _close(resp: Any) -> None:
    close = getattr(resp, "close", None)
    if close is not None:
        close()


def _bounded_error_body(raw: Any, limit: int, timeout_s: float) -> bytes:
    """At most `limit` bytes of an error answer's body, read within `timeout_s`; the
    connection is closed when the body is cut (its rest is never read), released when whole.
    A body that is no usable JSON Status (cut, or nested past what `json` parses) is kept
    as text; one `json` cannot parse for depth is dropped (callers parse it)."""
    from urllib3.exceptions import HTTPError

    end = time.monotonic() + timeout_s
    read: Callable[[int], bytes] = getattr(raw, "read1", None) or raw.read
    parts: list[bytes] = []
    size, whole = 0, False
    try:
        while size < limit and time.monotonic() < end:
            chunk = read(min(READ_CHUNK, limit - size))
            if not chunk:
                whole = True
                break
            parts.append(chunk)
            size += len(chunk)
    except (OSError, HTTPError):       # cut off: what arrived is what there is
        pass
    if whole:
        release = getattr(raw, "release_conn", None)
        if release is not None:
            release()
    else:
        _close(raw)
    body = b"".join(parts)[:limit]
    try:
        json.loads(body)
    except RecursionError:
        return b""
    except ValueError:
        pass
    # a cut inside a UTF-8 sequence would make the client drop the body (it decodes strictly)
    return body.decode("utf-8", "ignore").encode()


def with_deadlines(api: Any, timeout_s: float, max_error_bytes: int | None = None) -> Any:
    """Give every request of `api` (an ApiClient) a connect and read timeout, and bound the
    body of every error answer (4xx/5xx) to `max_error_bytes` (default MAX_ERROR_BYTES)
    read within the read timeout, before the client reads it whole into its ApiException."""
    rest = api.rest_client
    orig = rest.request

    def request(*args: Any, **kw: Any) -> Any:
        if kw.get("_request_timeout") is None:
            kw["_request_timeout"] = (min(5.0, timeout_s), timeout_s)
        resp = orig(*args, **kw)
        status = getattr(resp, "status", None)
        raw = getattr(resp, "response", None)
        if isinstance(status, int) and not 200 <= status <= 299 and raw is not None \
                and getattr(resp, "data", b"") is None:
            t = kw["_request_timeout"]
            read_s = float(t[1] if isinstance(t, tuple) else t)
            # kubernetes.client.rest.RESTResponse.read() returns `data` once it is set
            resp.data = _bounded_error_body(raw, MAX_ERROR_BYTES if max_error_bytes is None else max_error_bytes,
                                            read_s)
        return resp

    rest.request = request
    return api


def api_client_for(kubeconfig: str | None, context: str | None, timeout_s: float = 10.0,
                   error: type[GpuValuesError] = GpuValuesError) -> Any:
    """An ApiClient from a kubeconfig (or $KUBECONFIG, ~/.kube/config), else in-cluster.
    The kubeconfig is read through the project's reader (a regular file, bounded: a FIFO
    is refused, never waited on); every request gets a timeout. Problems raise `error`."""
    from kubernetes import client
    from kubernetes import config as kconfig
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader

    config: Any = kconfig            # the client's loaders are untyped
    loader: Any = KubeConfigLoader

    from gpuvalues.yamlio.inputs import decode, read_input
    from gpuvalues.yamlio.loader import parse_yaml

    try:
        path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
        if path is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            path = os.path.expanduser("~/.kube/config")
        if path is None:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return with_deadlines(client.ApiClient(cfg), timeout_s)
        data, source = read_input(path, error=error, expected="a kubeconfig file", max_bytes=4 * 2**20)
        doc = parse_yaml(decode(data, source), source=source, error=error)
        if not isinstance(doc, dict):
            raise error("not a kubeconfig (a YAML mapping)", source=source)
        # relative certificate paths are relative to the kubeconfig, as load_kube_config reads them
        cfg = client.Configuration()
        loader(config_dict=doc, active_context=context,
               config_base_path=os.path.abspath(os.path.dirname(path))).load_and_set(cfg)
        return with_deadlines(client.ApiClient(configuration=cfg), timeout_s)
    except GpuValuesError:
        raise
    except (ConfigException, OSError, TypeError, ValueError, KeyError) as e:
        raise error(f"kubeconfig{' ' + kubeconfig if kubeconfig else ''}: {e}") from None
