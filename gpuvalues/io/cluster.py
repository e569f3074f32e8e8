"""Reading a cluster: inventory files, nvidia-smi output per node, a live cluster."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from gpuvalues.errors import InventoryError
from gpuvalues.planners.inventory import API_VERSION, KIND, Inventory, from_kubectl_json, node_from_nvidia_smi
from gpuvalues.yamlio import parse_yaml, read_input


# -- live cluster --------------------------------------------------------------------------------
def from_kubernetes(kubeconfig: str | None = None, context: str | None = None,
                    label_selector: str | None = None) -> Inventory:
    """Inventory of a live cluster's nodes, read with the official kubernetes client."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

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
    except Exception as exc:  # noqa: BLE001 - the client raises anything from a bad file
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        raise InventoryError(f"cannot load kubeconfig: {message}", source=where) from None
    cfg.retries = 1  # fail fast on an unreachable server; the CLI is interactive
    api = client.ApiClient(cfg)
    try:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        nodes = client.CoreV1Api(api).list_node(**kwargs, _request_timeout=30)
    except ApiException as exc:
        raise InventoryError(f"listing nodes failed: {exc.status} {exc.reason}", source=where) from None
    except Exception as exc:  # urllib3 connection errors and the like
        raise InventoryError(f"cannot reach the API server: {exc.__class__.__name__}: {exc}", source=where) from None
    finally:
        api.close()
    return from_kubectl_json(api.sanitize_for_serialization(nodes), source=where)


# -- files ----------------------------------------------------------------------------------------
def _read(path: Path, expected: str) -> str:
    """A text file's contents, or an InventoryError naming the file (refused before
    reading: FIFOs, devices, directories, files over yamlio.MAX_INPUT_BYTES)."""
    data, source = read_input(path, error=InventoryError, expected=expected)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InventoryError(f"not a UTF-8 text file; expected {expected}", source=source) from None


def load_inventory(path: str | Path) -> Inventory:
    """Read an inventory file: our format (YAML/JSON) or `kubectl get nodes -o json` output."""
    path = Path(path)
    text = _read(path, "inventory YAML/JSON")
    data = parse_yaml(text, source=str(path), error=InventoryError)
    if isinstance(data, Mapping) and data.get("kind") == KIND:
        return Inventory.from_dict(data, source=str(path))
    if isinstance(data, Mapping) and (data.get("kind") == "Node" or "items" in data):
        return from_kubectl_json(data, source=str(path))
    raise InventoryError(f"expected kind: {KIND} (apiVersion {API_VERSION}) or `kubectl get nodes -o json` output",
                         source=str(path), field="kind")


def parse_smi_arg(arg: str) -> tuple[str, Path, Path | None]:
    """`NODE=QUERY.csv[:TOPO.txt]` (the `--nvidia-smi` option) -> (node, csv path, topo path)."""
    name, sep, files = arg.partition("=")
    if not sep or not name or not files:
        raise InventoryError(f"--nvidia-smi {arg!r}: expected NODE=QUERY.csv[:TOPO.txt]")
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
        nodes.append(node_from_nvidia_smi(name, csv_text, topo_text, source=str(csv_path)))
    return Inventory(tuple(nodes), source="nvidia-smi")
