"""Reading a cluster: inventory files, nvidia-smi output per node, a live cluster."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from gpuvalues.errors import InventoryError
from gpuvalues.planners.inventory import API_VERSION, KIND, Inventory, from_kubectl_json, node_from_nvidia_smi
from gpuvalues.yamlio import parse_yaml


# -- live cluster --------------------------------------------------------------------------------
def from_kubernetes(kubeconfig: str | None = None, context: str | None = None,
                    label_selector: str | None = None) -> Inventory:
    """Inventory of a live cluster's nodes, read with the official kubernetes client."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    where = kubeconfig or "~/.kube/config"
    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (ConfigException, OSError) as exc:
        raise InventoryError(f"cannot load kubeconfig: {exc}", source=where) from None
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
    """A text file's contents, or an InventoryError naming the file."""
    try:
        return path.read_text()
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror}", source=str(path)) from None
    except UnicodeDecodeError:
        raise InventoryError(f"not a UTF-8 text file; expected {expected}", source=str(path)) from None


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
