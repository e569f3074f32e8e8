"""Reading a cluster snapshot for `gpuvalues doctor`: from a live cluster (list only) or a dump folder.

A dump folder holds `*.json` files, each `kubectl get ... -o json` output (a List, or one
object), in any grouping, e.g.

    kubectl get nodes,pods,daemonsets,configmaps,hpa,pdb,apiservices,events -A -o json > cluster.json
    kubectl get scaledobjects -A -o json > keda.json           # when KEDA is installed
    kubectl get deviceclasses,resourceslices -o json > dra.json   # for a DRA fleet (Kubernetes >= 1.34)
    kubectl get secrets -A -l owner=helm -o json > releases.json   # Helm's release records

and optionally `prometheus-series.json`: `{"<series name>": <the JSON body of Prometheus'
GET /api/v1/series?match[]=<series name>>, ...}`. `gpuvalues doctor --dump-to DIR` writes
exactly this from a live cluster (Helm release records reduced to what doctor reads), so a
dump attached to a bug report gives the same findings as the live run.

The live reader only lists (the verbs of docs/doctor.md's ClusterRole: get, list, watch).
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping

from gpuvalues.errors import GpuValuesError, InventoryError, TransientError
from gpuvalues.operations.doctor import HelmRelease, Snapshot, decode_release, paused_gc

SERIES_FILE = "prometheus-series.json"
#: kind -> the Snapshot field its objects go to
KINDS = {"Node": "nodes", "Pod": "pods", "DaemonSet": "daemonsets", "ConfigMap": "configmaps",
         "HorizontalPodAutoscaler": "hpas", "ScaledObject": "scaledobjects", "APIService": "apiservices",
         "Event": "events", "PodDisruptionBudget": "pdbs", "DeviceClass": "deviceclasses",
         "ResourceSlice": "resourceslices", "Secret": "releases"}
MAX_DUMP_BYTES = 1024 * 1024 * 1024     # a 5,000-node cluster's dump is a few hundred MB


class SnapshotError(GpuValuesError):
    """A dump folder or live read doctor cannot use (exit 2)."""

    code = "GV065"


def _release_of(obj: Mapping[str, Any], source: str, where: str) -> HelmRelease | None:
    try:
        return decode_release(obj)
    except (ValueError, TypeError, OSError, EOFError) as exc:
        raise SnapshotError(f"a Helm release Secret that does not decode ({exc.__class__.__name__})",
                            source=source, field=where, code="GV068") from None


def snapshot_from_objects(objects: list[Mapping[str, Any]], series: Mapping[str, Any] | None, source: str) -> Snapshot:
    """A Snapshot from API objects (any kinds; unknown kinds are ignored)."""
    groups: dict[str, list[Any]] = {v: [] for v in KINDS.values()}
    for i, o in enumerate(objects):
        kind = o.get("kind") if isinstance(o, dict) else None     # JSON objects are dicts
        if kind not in KINDS:
            continue
        if kind == "Secret":
            rel = _release_of(o, source, f"items[{i}]")
            if rel is not None:
                groups["releases"].append(rel)
            continue
        groups[KINDS[kind]].append(o)
    return Snapshot(**{k: tuple(v) for k, v in groups.items()}, series=series, source=source)


def _items(doc: Any, source: str) -> list[Mapping[str, Any]]:
    if not isinstance(doc, Mapping):
        raise SnapshotError("expected `kubectl get ... -o json` output (a JSON object)", source=source, line=1, column=1)
    if "items" in doc:
        items = doc["items"]
        # dict, not typing.Mapping: an ABC check is 10x slower (0.45 s on 25,000 items)
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            raise SnapshotError("items must be a list of objects", source=source, field="items")
        return items
    if "kind" in doc:
        return [doc]
    raise SnapshotError("expected a List (items) or one object (kind)", source=source, field="kind")


def _load_json(path: Path) -> Any:
    from gpuvalues.yamlio.inputs import read_input
    data, source = read_input(path, error=SnapshotError, expected="kubectl JSON", max_bytes=MAX_DUMP_BYTES)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SnapshotError("not UTF-8 text", source=source) from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"not JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise SnapshotError("JSON nested too deeply to read", source=source, code="GV019") from None


def _check_series(doc: Any, source: str) -> dict[str, tuple[Mapping[str, str], ...]]:
    if not isinstance(doc, Mapping):
        raise SnapshotError("expected {series name: /api/v1/series response}", source=source, line=1, column=1,
                            code="GV067")
    out = {}
    for name, body in doc.items():
        data = body.get("data") if isinstance(body, Mapping) else None
        if not isinstance(data, list) or not all(isinstance(s, Mapping) and all(
                isinstance(v, str) for v in s.values()) for s in data):
            raise SnapshotError("expected Prometheus' /api/v1/series response ({status, data: [label sets]})",
                                source=source, field=str(name), code="GV067")
        out[str(name)] = tuple(data)
    return out


def load_dump(folder: str | Path) -> Snapshot:
    """The Snapshot of a dump folder (module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SnapshotError("expected a folder of `kubectl get -o json` files", source=str(folder), code="GV066")
    objects: list[Mapping[str, Any]] = []
    series = None
    files = sorted(p for p in folder.iterdir() if p.suffix == ".json")
    if not files:
        raise SnapshotError("no *.json file in the dump folder", source=str(folder), code="GV066")
    with paused_gc():          # millions of containers made, none in a cycle (paused_gc)
        for path in files:
            doc = _load_json(path)
            if path.name == SERIES_FILE:
                series = _check_series(doc, str(path))
                continue
            objects.extend(_items(doc, str(path)))
        return snapshot_from_objects(objects, series, str(folder))


# -- live ---------------------------------------------------------------------------------------
#: what the live reader lists: (kind, API group as RBAC names it, resource, client API class,
#: its list method, extra arguments). Read-only: every call is a `list_*` (a GET of a collection).
LIVE_LISTS: tuple[tuple[str, str, str, str, str, tuple[str, ...]], ...] = (
    ("Node", "", "nodes", "CoreV1Api", "list_node", ()),
    ("Pod", "", "pods", "CoreV1Api", "list_pod_for_all_namespaces", ()),
    ("DaemonSet", "apps", "daemonsets", "AppsV1Api", "list_daemon_set_for_all_namespaces", ()),
    ("ConfigMap", "", "configmaps", "CoreV1Api", "list_config_map_for_all_namespaces", ()),
    ("HorizontalPodAutoscaler", "autoscaling", "horizontalpodautoscalers", "AutoscalingV2Api",
     "list_horizontal_pod_autoscaler_for_all_namespaces", ()),
    ("PodDisruptionBudget", "policy", "poddisruptionbudgets", "PolicyV1Api",
     "list_pod_disruption_budget_for_all_namespaces", ()),
    ("APIService", "apiregistration.k8s.io", "apiservices", "ApiregistrationV1Api", "list_api_service", ()),
    ("Event", "", "events", "CoreV1Api", "list_event_for_all_namespaces", ()),
    ("Secret", "", "secrets", "CoreV1Api", "list_secret_for_all_namespaces", ()),
    ("ScaledObject", "keda.sh", "scaledobjects", "CustomObjectsApi", "list_cluster_custom_object",
     ("keda.sh", "v1alpha1", "scaledobjects")),
    ("DeviceClass", "resource.k8s.io", "deviceclasses", "CustomObjectsApi", "list_cluster_custom_object",
     ("resource.k8s.io", "v1", "deviceclasses")),
    ("ResourceSlice", "resource.k8s.io", "resourceslices", "CustomObjectsApi", "list_cluster_custom_object",
     ("resource.k8s.io", "v1", "resourceslices")),
)
#: lists a cluster may not serve: KEDA not installed; resource.k8s.io/v1 before Kubernetes 1.34
OPTIONAL_KINDS = frozenset({"ScaledObject", "DeviceClass", "ResourceSlice"})


def _series_names(snap_objects: list[Mapping[str, Any]]) -> list[str]:
    """The series the adapter rules of the cluster read (what to ask Prometheus for)."""
    import re

    import yaml
    names: set[str] = set()
    for cm in snap_objects:
        if cm.get("kind") != "ConfigMap":
            continue
        text = (cm.get("data") or {}).get("config.yaml")
        if not text or "seriesQuery" not in text:
            continue
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            continue
        for rule in (doc.get("rules") or []) if isinstance(doc, Mapping) else []:
            m = re.search(r'__name__\s*=\s*"([^"]+)"', str((rule or {}).get("seriesQuery", "")))
            if m:
                names.add(m.group(1))
    return sorted(names)


#: a /api/v1/series answer lists label sets: 64 MiB is ~300,000 series of one name, far past any
#: GPU fleet's; past it the answer is refused, not read whole (a wrong URL, a forged answer).
MAX_SERIES_BYTES = 64 * 2**20


def query_series(url: str, names: list[str], *, get: Callable[[str], bytes] | None = None) -> dict[str, Any]:
    """{series name: /api/v1/series response} from the Prometheus at `url` (read-only GETs)."""
    def fetch(u: str) -> bytes:
        with urllib.request.urlopen(u, timeout=30) as resp:
            data = bytes(resp.read(MAX_SERIES_BYTES + 1))
        if len(data) > MAX_SERIES_BYTES:
            raise TransientError(f"Prometheus {url}: a series answer larger than {MAX_SERIES_BYTES // 2**20} MiB: "
                                 "refused", source=url)
        return data
    get = get or fetch
    out = {}
    for name in names:
        q = urllib.parse.urlencode({"match[]": f'{{__name__="{name}"}}'})
        try:
            body = json.loads(get(f"{url.rstrip('/')}/api/v1/series?{q}"))
        except urllib.error.HTTPError as exc:
            if exc.code in (408, 429) or exc.code >= 500:
                raise TransientError(f"Prometheus {url}: {exc.code} {exc.reason}", source=url) from None
            raise SnapshotError(f"Prometheus {url}: {exc.code} {exc.reason}", source=url, code="GV067") from None
        except (OSError, ValueError) as exc:
            raise TransientError(f"cannot query Prometheus {url}: {exc.__class__.__name__}: {exc}", source=url) from None
        out[name] = body
    return out


def read_live(kubeconfig: str | None, context: str | None, prometheus: str | None = None) -> tuple[list[Mapping[str, Any]], dict[str, Any] | None]:
    """Every object doctor reads from the live cluster (GETs of collections only), and the
    Prometheus series bodies (None without `prometheus`)."""
    from kubernetes import client
    from kubernetes import config as kube_config
    from kubernetes.client.exceptions import ApiException

    from gpuvalues.io.cluster import api_error
    from gpuvalues.operations.kubeapi import MAX_LIST_BYTES, read_json, with_deadlines

    where = kubeconfig or "~/.kube/config"
    cfg = client.Configuration()
    loader: Any = kube_config          # the client's loaders carry no annotations
    try:
        loader.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except Exception as exc:
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        raise InventoryError(f"cannot load kubeconfig: {message}", source=where) from None
    cfg.retries = 1
    # answers bounded as operations/ reads them (kubeapi): error bodies cut at MAX_ERROR_BYTES,
    # each list read unpreloaded up to MAX_LIST_BYTES within the request's 60 s
    api: Any = with_deadlines(client.ApiClient(cfg), 60.0)
    objects: list[Mapping[str, Any]] = []
    try:
        for kind, _group, _resource, cls, method, extra in LIVE_LISTS:
            kw: dict[str, Any] = {"label_selector": "owner=helm"} if kind == "Secret" else {}
            try:
                resp = getattr(getattr(client, cls)(api), method)(*extra, _preload_content=False,
                                                                   _request_timeout=60, **kw)
                body = read_json(resp, MAX_LIST_BYTES, timeout_s=60.0, what=f"the API server ({where}), listing {kind}s")
            except ApiException as exc:
                if exc.status == 404 and kind in OPTIONAL_KINDS:
                    continue               # the API is not served: none of these objects
                raise api_error(exc, f"listing {kind}s", source=where) from None
            except GpuValuesError:
                raise
            except Exception as exc:
                raise TransientError(f"cannot reach the API server: {exc.__class__.__name__}: {exc}",
                                     source=where) from None
            if not isinstance(body, Mapping):
                raise TransientError(f"the API server ({where}), listing {kind}s: the answer is not a JSON object",
                                     source=where)
            for item in body.get("items") or ():
                item.setdefault("kind", kind)
                objects.append(item)
    finally:
        api.close()
    series = query_series(prometheus, _series_names(objects)) if prometheus else None
    return objects, series


def live_snapshot(kubeconfig: str | None, context: str | None,
                  prometheus: str | None = None) -> tuple[Snapshot, dict[str, str]]:
    """The live cluster's Snapshot and the dump files that reproduce it (`--dump-to`)."""
    with paused_gc():          # the same millions of decoded containers as a dump's (load_dump)
        objects, bodies = read_live(kubeconfig, context, prometheus)
        files = dump_files(objects, bodies)
        series = _check_series(bodies, prometheus or "prometheus") if bodies is not None else None
        return snapshot_from_objects(objects, series, kubeconfig or "~/.kube/config"), files


def reduce_release_secret(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Helm release Secret with its release record cut to what doctor reads (name,
    namespace, version, info.status, config, manifest): no chart files in a dump."""
    import base64
    import gzip
    rel = decode_release(obj)
    if rel is None:
        return obj
    record = {"name": rel.name, "namespace": rel.namespace, "version": rel.version,
              "info": {"status": rel.status}, "config": rel.config, "manifest": rel.manifest}
    inner = base64.b64encode(gzip.compress(json.dumps(record).encode(), mtime=0))
    meta = obj.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Secret", "type": obj.get("type"),
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels") if k in meta},
            "data": {"release": base64.b64encode(inner).decode()}}


def dump_files(objects: list[Mapping[str, Any]], series: Mapping[str, Any] | None) -> dict[str, str]:
    """The dump folder's files for what `read_live` read (managedFields dropped)."""
    items = []
    for o in objects:
        if o.get("kind") == "Secret":
            o = reduce_release_secret(o)
        else:
            meta = dict(o.get("metadata") or {})
            meta.pop("managedFields", None)
            o = {**o, "metadata": meta}
        items.append(o)
    out = {"cluster.json": json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1) + "\n"}
    if series is not None:
        out[SERIES_FILE] = json.dumps(series, indent=1, sort_keys=True) + "\n"
    return out
