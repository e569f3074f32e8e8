"""core/v1 Events, the one builder for operations/ (the remediation controller and the MIG
rollout both report their steps on the objects they act on).

An Event names its object (`involvedObject`), a reason (CamelCase, what `kubectl get
events` shows), a bounded message (the API server refuses an Event whose message is too
large; a fault's reason can come from anyone's condition message), and who reports it
(`source.component` and `reportingComponent`/`reportingInstance`, as client-go's
tools/events recorder fills them). Node Events go to `default`, where the kubelet puts
them. Posting one never fails the caller: a refusal is returned as text to log.
"""
from __future__ import annotations

import datetime as dt
import socket
from typing import Any

from gpuvalues.errors import GpuValuesError
from gpuvalues.operations.kubeapi import answered
from gpuvalues.operations.remediation import MAX_REASON, clip


def now_micro() -> str:
    """The current time as a Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_seconds() -> str:
    """The current time as a Kubernetes Time (RFC 3339, whole seconds, UTC)."""
    return now_micro().split(".")[0] + "Z"


def event_body(*, kind: str, name: str, namespace: str, uid: str, reason: str, message: str, warning: bool,
               component: str, instance: str, api_version: str = "v1") -> dict[str, Any]:
    """The Event for object `kind`/`name` (`namespace` "" for a cluster-scoped object: the
    Event then goes to `default`)."""
    now = now_seconds()
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace or "default"},
            "involvedObject": {"kind": kind, "name": name, "uid": uid, "apiVersion": api_version,
                               **({"namespace": namespace} if namespace else {})},
            "reason": reason, "message": clip(message, MAX_REASON), "type": "Warning" if warning else "Normal",
            "source": {"component": component, "host": socket.gethostname()},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": component, "reportingInstance": instance or socket.gethostname()}


def post(core: Any, body: dict[str, Any]) -> str | None:
    """Create the Event (`core`: a CoreV1Api); None, or why the API server refused it."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        answered(core.create_namespaced_event(body["metadata"]["namespace"], body, _preload_content=False),
                 "an Event")
    except (ApiException, HTTPError, GpuValuesError) as exc:
        return str(getattr(exc, "reason", None) or exc)
    return None
