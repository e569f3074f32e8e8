"""Reading a cluster: inventory files, nvidia-smi output per node, a live cluster."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Mapping

from gpuvalues.errors import GpuValuesError, InventoryError, TransientError
from gpuvalues.kube import node_name_problem
from gpuvalues.operations.kubeapi import MAX_LIST_BYTES, read_json, with_deadlines
from gpuvalues.planners.scheduling.inventory import (API_VERSION, KIND, MAX_NODES, Inventory, Node, from_kubectl_json,
                                          check_unique_names, node_from_kubectl_item, node_from_nvidia_smi,
                                          too_many_nodes)
from gpuvalues.yamlio.loader import format_path, parse_field, parse_yaml, position_in
from gpuvalues.yamlio.inputs import read_input


# -- live cluster --------------------------------------------------------------------------------
def from_kubernetes(kubeconfig: str | None = None, context: str | None = None,
                    label_selector: str | None = None) -> Inventory:
    """Inventory of a live cluster's nodes, read with the official kubernetes client."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    where = kubeconfig or "~/.kube/config"
    if kubeconfig:
        # Read and parse it ourselves first: a FIFO, a device or a broken file is one line
        # with its position, not a hang or the client's traceback.
        try:
            text = _read(Path(kubeconfig), "a kubeconfig YAML file")
            doc = parse_yaml(text, source=kubeconfig, error=InventoryError)
        except InventoryError as exc:
            raise InventoryError(f"cannot load kubeconfig: {exc.message}", source=exc.source,
                                 line=exc.line, column=exc.column) from None
        if not isinstance(doc, Mapping):
            raise InventoryError("cannot load kubeconfig: expected a YAML mapping with "
                                 "clusters, contexts and users", source=kubeconfig, line=1,
                                 column=1)
    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except Exception as exc:
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        raise InventoryError(f"cannot load kubeconfig: {message}", source=where) from None
    cfg.retries = 1  # fail fast on an unreachable server; the CLI is interactive
    # every answer bounded as operations/ reads them (kubeapi): an error body cut at
    # MAX_ERROR_BYTES, the node list read unpreloaded up to MAX_LIST_BYTES within 30 s
    api = with_deadlines(client.ApiClient(cfg), 30.0)
    try:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        resp = client.CoreV1Api(api).list_node(**kwargs, _preload_content=False, _request_timeout=30)
        nodes = read_json(resp, MAX_LIST_BYTES, timeout_s=30.0, what=f"the API server ({where})")
    except ApiException as exc:
        raise api_error(exc, "listing nodes", source=where) from None
    except GpuValuesError:
        raise
    except Exception as exc:  # urllib3 connection errors, timeouts and the like: retry later
        raise TransientError(f"cannot reach the API server: {exc.__class__.__name__}: {exc}", source=where) from None
    finally:
        api.close()
    return from_kubectl_json(nodes, source=where)


def api_error(exc, doing: str, *, source: str | None = None) -> InventoryError | TransientError:
    """An API server's refusal as the error it is: 429 and 5xx (the server busy, down or
    restarting: the statuses client-go's `rest/request.go` `checkWait` may retry), 408 (a
    timeout) and no status at all (no answer) are a TransientError (exit 3); any other
    status (401, 403, 404: fix the credentials or the request) an InventoryError (exit 2)."""
    status = getattr(exc, "status", None)
    message = f"{doing} failed: {status} {getattr(exc, 'reason', '') or ''}".strip()
    if status in (408, 429) or (isinstance(status, int) and status >= 500) or not status:
        return TransientError(message, source=source)
    return InventoryError(message, source=source)


# -- files ----------------------------------------------------------------------------------------
# `kubectl get nodes -o json` runs to about 10 KB a node: 5,000 nodes are ~50 MB.
MAX_INVENTORY_BYTES = 512 * 1024 * 1024
# YAML costs about 30x JSON to read (PyYAML builds every value in Python: 20 MB took 50-100 s
# and 1 GB), so YAML inventories stop here: about 8,000 nodes in the format `inventory -o`
# writes. Larger ones are JSON (`kubectl get nodes -o json`, `inventory -o FILE.json`).
MAX_YAML_INVENTORY_BYTES = 4 * 1024 * 1024

_WS = re.compile(r"[ \t\n\r]*")
_SKIP = json.JSONDecoder()                     # skips values while locating a path


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)


def _line_col(text: str, i: int) -> tuple[int, int]:
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


def _json_locate(text: str, i: int, path: tuple) -> int:
    """The offset of the value at `path` under the JSON value at offset `i` (the deepest
    ancestor found): values off the path are skipped by the C scanner, not built."""
    for step in path:
        i = _WS.match(text, i).end()
        if text.startswith("{", i) and isinstance(step, str):
            j = _WS.match(text, i + 1).end()
            while text.startswith('"', j):
                key, j = json.decoder.scanstring(text, j + 1)
                j = _WS.match(text, _WS.match(text, j).end() + 1).end()   # past the ':'
                if key == step:
                    i = j
                    break
                j = _WS.match(text, _SKIP.raw_decode(text, j)[1]).end()
                j = _WS.match(text, j + 1).end() if text.startswith(",", j) else j
            else:
                return i
        elif text.startswith("[", i) and isinstance(step, int):
            j = _WS.match(text, i + 1).end()
            for _ in range(step):
                if text.startswith("]", j):
                    return i
                j = _WS.match(text, _SKIP.raw_decode(text, j)[1]).end()
                j = _WS.match(text, j + 1).end() if text.startswith(",", j) else j
            if text.startswith("]", j):
                return i
            i = j
        else:
            return i
    return i


def _json_duplicate(text: str, i: int, path: tuple = ()) -> tuple[tuple, int] | None:
    """(path, offset) of the first key given twice under the JSON value at offset `i`."""
    i = _WS.match(text, i).end()
    if text.startswith("{", i):
        seen: set = set()
        j = _WS.match(text, i + 1).end()
        while text.startswith('"', j):
            at = j
            key, j = json.decoder.scanstring(text, j + 1)
            if key in seen:
                return path + (key,), at
            seen.add(key)
            j = _WS.match(text, _WS.match(text, j).end() + 1).end()
            found = _json_duplicate(text, j, path + (key,))
            if found:
                return found
            j = _WS.match(text, _SKIP.raw_decode(text, j)[1]).end()
            j = _WS.match(text, j + 1).end() if text.startswith(",", j) else j
    elif text.startswith("[", i):
        j, k = _WS.match(text, i + 1).end(), 0
        while j < len(text) and not text.startswith("]", j):
            found = _json_duplicate(text, j, path + (k,))
            if found:
                return found
            j = _WS.match(text, _SKIP.raw_decode(text, j)[1]).end()
            j = _WS.match(text, j + 1).end() if text.startswith(",", j) else j
            k += 1
    return None


def _json_error(text: str, source: str, exc: Exception, start: int = 0, prefix: tuple = ()) -> InventoryError:
    """A placed InventoryError for a JSON problem under the value at offset `start`."""
    if isinstance(exc, _Duplicate):
        found = _json_duplicate(text, start, prefix)
        path, at = found if found else (prefix, start)
        line, col = _line_col(text, at)
        return InventoryError(f"duplicate key {exc.key!r}", source=source, line=line, column=col,
                              field=format_path(path[:-1]) if len(path) > 1 else None, code="GV039")
    if isinstance(exc, json.JSONDecodeError):
        line, col = _line_col(text, exc.pos)
        return InventoryError(f"not JSON: {exc.msg}", source=source, line=line, column=col)
    return InventoryError("JSON nested too deeply to read", source=source, line=1, column=1, code="GV019")


def _placed(exc: InventoryError, text: str, data, *, json_text: bool) -> InventoryError:
    """`exc` with the line:col of its field in `text` (JSON or YAML), when it has none;
    `data` is the parsed text, or a function that parses it (called only when needed)."""
    if exc.line is not None or exc.source is None:
        return exc
    if not exc.field:
        return InventoryError(exc.message, source=exc.source, line=1, column=1, code=exc.code)
    path = parse_field(data() if callable(data) else data, exc.field)
    line, col = _line_col(text, _json_locate(text, 0, path)) if json_text else position_in(text, path)
    return InventoryError(exc.message, source=exc.source, line=line, column=col, field=exc.field, code=exc.code)


def _read_json(text: str, source: str):
    """Inventory from JSON text: `kubectl get nodes -o json` streamed item by item (each
    Node is reduced to its GPU view as soon as it is decoded, so a 50 MB list never exists as
    Python objects all at once), or our format. Keys given twice anywhere are refused. A
    text that is not a JSON object is returned as `None` for the YAML reader."""
    i = _WS.match(text).end()
    if not text.startswith("{", i):
        return None
    top: dict = {}
    nodes: list[Node] | None = None
    try:
        i = _WS.match(text, i + 1).end()
        while not text.startswith("}", i):
            if not text.startswith('"', i):
                return None                    # not JSON (YAML flow style?): the YAML reader says
            key_at = i
            key, i = json.decoder.scanstring(text, i + 1)
            if key in top or (key == "items" and nodes is not None):
                raise _Duplicate(key)
            i = _WS.match(text, i).end()
            if not text.startswith(":", i):
                return None
            i = _WS.match(text, i + 1).end()
            if key == "items" and text.startswith("[", i):
                nodes, i = _stream_items(text, source, i)
                top[key] = None
            else:
                try:
                    top[key], i = _DECODER.raw_decode(text, i)
                except _Duplicate as exc:
                    raise _json_error(text, source, exc, i, (key,)) from None
            i = _WS.match(text, i).end()
            if text.startswith(",", i):
                i = _WS.match(text, i + 1).end()
            elif not text.startswith("}", i):
                return None
        if text[_WS.match(text, i + 1).end():]:
            return None                        # trailing data: let the YAML reader place it
    except _Duplicate as exc:
        line, col = _line_col(text, key_at)
        raise InventoryError(f"duplicate key {exc.key!r}", source=source, line=line, column=col,
                             code="GV039") from None
    except GpuValuesError:
        raise
    except (json.JSONDecodeError, ValueError):
        return None
    except RecursionError as exc:
        raise _json_error(text, source, exc) from None
    if nodes is None:
        return _build(top, source)
    if top.get("kind") == KIND:
        raise InventoryError(f"kind {KIND} keeps its nodes under `nodes`, not `items`", source=source,
                             field="items")
    check_unique_names([n.name for n in nodes], source, "items[{}].metadata.name")
    return Inventory(tuple(nodes), source=source)


def _stream_items(text: str, source: str, i: int) -> tuple[list[Node], int]:
    nodes: list[Node] = []
    i = _WS.match(text, i + 1).end()
    while not text.startswith("]", i):
        if len(nodes) == MAX_NODES:
            line, col = _line_col(text, i)
            raise InventoryError(too_many_nodes(f"more than {MAX_NODES:,}"), source=source, line=line,
                                 column=col, field=f"items[{MAX_NODES}]", code="GV038")
        start, index = i, len(nodes)
        try:
            item, i = _DECODER.raw_decode(text, i)
        except (_Duplicate, RecursionError) as exc:
            raise _json_error(text, source, exc, start, ("items", index)) from None
        try:
            nodes.append(node_from_kubectl_item(item, source, index))
        except InventoryError as exc:
            if exc.line is None and exc.field:
                rest = parse_field(item, exc.field.removeprefix(f"items[{index}]").lstrip("."))
                line, col = _line_col(text, _json_locate(text, start, rest))
                raise InventoryError(exc.message, source=source, line=line, column=col, field=exc.field,
                                     code=exc.code) from None
            raise
        i = _WS.match(text, i).end()
        if text.startswith(",", i):
            i = _WS.match(text, i + 1).end()
        elif not text.startswith("]", i):
            raise json.JSONDecodeError("expected ',' or ']'", text, i)
    return nodes, i + 1


def _build(data, source: str) -> Inventory:
    if isinstance(data, Mapping) and data.get("kind") == KIND:
        return Inventory.from_dict(data, source=source)
    if isinstance(data, Mapping) and (data.get("kind") == "Node" or "items" in data):
        return from_kubectl_json(data, source=source)
    raise InventoryError(f"expected kind: {KIND} (apiVersion {API_VERSION}) or `kubectl get nodes -o json` output",
                         source=source, field="kind")


def _read(path: Path, expected: str, *, max_bytes: int | None = None) -> str:
    """A text file's contents, or an InventoryError naming the file (refused before
    reading: FIFOs, devices, directories, files over the size limit)."""
    data, source = read_input(path, error=InventoryError, expected=expected,
                              max_bytes=max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InventoryError(f"not a UTF-8 text file; expected {expected}", source=source) from None


def load_inventory(path: str | Path) -> Inventory:
    """Read an inventory file: our format (YAML/JSON) or `kubectl get nodes -o json` output.
    Every refusal names the file, the line:col and the field (JSON positions are found only
    for an error, by skipping to the field with the C scanner)."""
    path = Path(path)
    source = str(path)
    text = _read(path, "inventory YAML/JSON", max_bytes=MAX_INVENTORY_BYTES)
    is_json = text.lstrip()[:1] == "{"
    if is_json:
        try:
            inv = _read_json(text, source)
        except InventoryError as exc:
            raise _placed(exc, text, lambda: _whole_json(text), json_text=True) from None
        if inv is not None:
            return inv
    if len(text) > MAX_YAML_INVENTORY_BYTES:
        raise InventoryError(f"a YAML inventory of {len(text) / 2**20:.1f} MiB; gpuvalues reads YAML "
                             f"inventories up to {MAX_YAML_INVENTORY_BYTES // 2**20} MiB (YAML is slow to "
                             "read): give JSON (`kubectl get nodes -o json`, `gpuvalues inventory -o "
                             "FILE.json`)", source=source, code="GV019")
    data = parse_yaml(text, source=source, error=InventoryError, unique_keys=True)
    try:
        return _build(data, source)
    except InventoryError as exc:
        raise _placed(exc, text, data, json_text=False) from None


def _whole_json(text: str):
    """The JSON data, for mapping an error's field to a path (errors only)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def inventory_text(inv: Inventory, path: str | None) -> str:
    """The text `inventory -o PATH` writes: JSON for a `.json` name, else YAML, refused when
    the YAML would be larger than gpuvalues reads back (MAX_YAML_INVENTORY_BYTES)."""
    from gpuvalues.yamlio.writer import dump

    data = inv.to_dict()
    if path and str(path).endswith(".json"):
        return json.dumps(data, indent=1) + "\n"
    text = dump(data)
    if len(text) > MAX_YAML_INVENTORY_BYTES and path not in (None, "-"):
        raise InventoryError(f"the inventory is {len(text) / 2**20:.1f} MiB as YAML, more than gpuvalues "
                             f"reads back ({MAX_YAML_INVENTORY_BYTES // 2**20} MiB): write it as JSON "
                             "(-o FILE.json)", source=str(path), code="GV019")
    return text


def parse_smi_arg(arg: str) -> tuple[str, Path, Path | None]:
    """`NODE=QUERY.csv[:TOPO.txt]` (the `--nvidia-smi` option) -> (node, csv path, topo path)."""
    name, sep, files = arg.partition("=")
    if not sep or not name or not files:
        raise InventoryError(f"--nvidia-smi {arg!r}: expected NODE=QUERY.csv[:TOPO.txt]")
    problem = node_name_problem(name)
    if problem:
        raise InventoryError(problem, field="--nvidia-smi", code="GV037")
    csv_path, _, topo_path = files.partition(":")
    return name, Path(csv_path), Path(topo_path) if topo_path else None


def inventory_from_sources(*, inventory: str | None = None, kubeconfig: str | None = None,
                           context: str | None = None, nvidia_smi: Iterable[str] = (),
                           label_selector: str | None = None) -> Inventory:
    """Exactly one source: an inventory/kubectl file, a kubeconfig, or nvidia-smi files per node."""
    smi = list(nvidia_smi)
    given = [x for x in (inventory, kubeconfig or context, smi) if x]
    if len(given) != 1:
        raise InventoryError("give exactly one inventory source: --inventory FILE, --kubeconfig PATH, "
                             "or --nvidia-smi NODE=QUERY.csv[:TOPO.txt] (repeatable)")
    if inventory:
        return load_inventory(inventory)
    if kubeconfig or context:
        return from_kubernetes(kubeconfig, context, label_selector)
    nodes = []
    for arg in smi:
        name, csv_path, topo_path = parse_smi_arg(arg)
        csv_text = _read(csv_path, "nvidia-smi CSV")
        topo_text = _read(topo_path, "nvidia-smi topo -m output") if topo_path else None
        nodes.append(node_from_nvidia_smi(name, csv_text, topo_text, source=str(csv_path),
                                          topo_source=str(topo_path) if topo_path else None))
    return Inventory(tuple(nodes), source="nvidia-smi")
