"""The e2e nodes from node hardware: each node's GPU labels and GPU resources are what
the upstream device plugin and GFD produce for its hardware and device-plugin config
(ci/oracle/deviceplugin, via tests/oracle/oraclelib), with the chart's DaemonSet env;
only CPU/memory capacity, the GPU taint and the labels set by other components are
taken from the description. Two descriptions:

- tests/e2e/hardware.yaml (the scenario tests): nodes, their GPUs and config names;
- a fleet (`fleet_gpu_nodes`, the fleet tests): each node group's GPUs and MIG layout,
  with the config the device plugin's config-manager selects from the platform
  release's rendered ConfigMap by the group's label.

    .venv/bin/python -m tests.e2e.fleet tests/e2e/hardware.yaml -o inventory.yaml
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
from functools import lru_cache
from pathlib import Path

import yaml

from gpuvalues.planners import deviceplugin

HARDWARE = Path(__file__).with_name("hardware.yaml")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: nvidia.com/ labels a node group may carry that no GPU-stack component derives from the
#: hardware: the config selectors and opt-outs a user (gpuvalues node-labels) sets and
#: the NVLink topology label gpuvalues' topology labeler sets. Any other nvidia.com/ label of a
#: group would be a hand-written GPU label: fleet_gpu_nodes refuses it.
#: The GPU Operator's per-node opt-out of the device plugin (gpuvalues sets it on DRA pools).
DEPLOY_OPT_OUT = deviceplugin.DEPLOY_LABEL
NOT_FROM_GFD = frozenset({DEVICE_PLUGIN_CONFIG_LABEL, "nvidia.com/mig.config", "nvidia.com/gpu.topology",
                          "nvidia.com/gpu.present", DEPLOY_OPT_OUT})


def _plugin_env() -> tuple[dict, dict]:
    """The chart's device-plugin and GFD container env (e.g. MPS_ROOT), as rendered."""
    from tests.oracle import oraclelib as ol
    objs = ol.rendered("platform-on")
    plugin = ol.container_env_args(objs, "-device-plugin", "nvidia-device-plugin")
    gfd = ol.container_env_args(objs, "-gpu-feature-discovery", "gpu-feature-discovery")
    return plugin[0], gfd[0] if gfd else {}


def gpu_node(name: str, hardware: dict, config: dict, *, extra_labels: dict, resources: dict) -> dict:
    """One inventory node with GFD's labels and the device plugin's resources."""
    from tests.oracle import oraclelib as ol
    plugin_env, gfd_env = _plugin_env()
    v = ol.device_plugin(yaml.safe_dump(config), hardware, plugin_env=plugin_env, gfd_env=gfd_env)
    assert v.ok, f"e2e fleet node {name}: {v.component} rejects its config: {v.error}"
    alloc = {**resources, **v.resources}
    return {"name": name, "labels": {**v.labels, **extra_labels}, "taints": [GPU_TAINT],
            "capacity": alloc, "allocatable": alloc}


def inventory(path: Path = HARDWARE) -> dict:
    """The gpuvalues Inventory document for a hardware description file."""
    doc = yaml.safe_load(path.read_text())
    nodes = []
    for n in doc["nodes"]:
        if "hardware" not in n:
            nodes.append({"name": n["name"], "capacity": n["resources"], "allocatable": n["resources"]})
            continue
        extra = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.topology": n["topology"],
                 "nvidia.com/device-plugin.config": n["config"]}
        nodes.append(gpu_node(n["name"], n["hardware"], doc["configs"][n["config"]],
                              extra_labels=extra, resources=n["resources"]))
    return {"apiVersion": "gpuvalues/v1", "kind": "Inventory", "nodes": nodes}


def select_config(label: str, files: set[str], default: str, fallbacks: list[str]) -> str:
    """The config name the device plugin's config-manager links for a node whose
    nvidia.com/device-plugin.config label is `label` ("": unset); "" is the empty config.
    Restated from k8s-device-plugin cmd/config-manager/main.go updateConfigName (package
    main upstream, so not importable) at the pinned version."""
    if not files:
        raise AssertionError("config-manager: no configuration files available")
    if label:
        assert label in files, f"config-manager: specified config {label} does not exist"
        return label
    if default:
        assert default in files, f"config-manager: default config {default} does not exist"
        return default
    for fallback in fallbacks:
        if fallback == "named" and "default" in files:
            return "default"
        if fallback == "single" and len(files) == 1:
            return next(iter(files))
        if fallback == "empty":
            return ""
    raise AssertionError("config-manager: no config was set, no default was provided, and all fallbacks failed")


@lru_cache(maxsize=None)
def _platform_objects(name: str, namespace: str, values_yaml: str) -> tuple:
    """`helm template` (helm 4) of a fleet's platform release."""
    from tests.oracle import oraclelib as ol
    proc = subprocess.run([str(ol.HELM), "template", name, str(ol.CHART), "--namespace", namespace,
                           "--kube-version", "1.34.0", "--values", "-"],
                          input=values_yaml, capture_output=True, text=True)
    assert proc.returncode == 0, f"platform release {name}: {proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def _config_manager_env(objs) -> dict:
    for o in objs:
        if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-device-plugin"):
            for c in o["spec"]["template"]["spec"].get("initContainers", []):
                if c["name"] == "config-manager-init":
                    return {e["name"]: str(e["value"]) for e in c.get("env", []) if "value" in e}
    raise AssertionError("the platform release renders no device-plugin config-manager")


def fleet_gpu_nodes(fleet) -> list[tuple[str, object, dict, dict]]:
    """(node name, node group, labels, GPU resources) of every node of the fleet, from the
    upstream device plugin and GFD: per node group, its pool's GPU model and count and
    its MIG layout as hardware, the config the config-manager selects (select_config)
    from the platform release's rendered ConfigMap and env, and the chart's device-plugin
    env (GFD's from the platform-on scenario when the fleet does not deploy GFD). Labels
    are GFD's plus the group's NOT_FROM_GFD and non-nvidia.com ones (e.g. the topology
    labeler's). Nodes are named `<group>-<i>` as gpuvalues.expected_nodes names them;
    nothing here is taken from expected_nodes (the oracle tests compare the two,
    tests/oracle/test_e2e_fleet.py)."""
    from tests.oracle import oraclelib as ol
    objs = _platform_objects(fleet.platform.name, fleet.platform.namespace,
                             yaml.safe_dump(dict(fleet.platform.values)))
    configs = ol.device_plugin_configs(objs)
    plugin = ol.container_env_args(objs, "-device-plugin", "nvidia-device-plugin")
    # No device plugin in the release (every node opts out, e.g. a DRA-only fleet): the
    # oracle still runs it, with the chart's env, for GFD's view; its resources are dropped.
    cm = _config_manager_env(objs) if plugin else {}
    plugin_env, plugin_args = plugin or (_plugin_env()[0], [])
    gfd = ol.container_env_args(objs, "-gpu-feature-discovery", "gpu-feature-discovery")
    gfd_env = gfd[0] if gfd else _plugin_env()[1]
    out = []
    for pool in fleet.spec.node_pools:
        index = 0
        for g in fleet.layout.groups_of(pool.name):
            hand = [k for k in g.labels if k.startswith("nvidia.com/") and k not in NOT_FROM_GFD]
            assert not hand, f"node group {g.name}: GPU labels not derived by GFD: {hand}"
            opted_out = g.labels.get(DEPLOY_OPT_OUT) == "false"
            assert plugin or opted_out, f"node group {g.name}: the platform release deploys no device plugin"
            name = select_config(g.labels.get(DEVICE_PLUGIN_CONFIG_LABEL, ""), set(configs),
                                 cm.get("DEFAULT_CONFIG", ""), cm.get("FALLBACK_STRATEGIES", "").split(",")) \
                if plugin else ""
            mig = {str(i): [p for p, n in sorted(d.items()) for _ in range(n)]
                   for i, d in enumerate(g.mig_devices or ()) if d}
            hardware = ol.hardware_for_gpu(pool.gpu.name, pool.gpus_per_node, mig or None)
            # "" (config-manager's empty config, or no plugin): upstream's defaults
            v = ol.device_plugin(configs[name] if name else "version: v1\n", hardware, plugin_env=plugin_env,
                                 plugin_args=plugin_args, gfd_env=gfd_env)
            assert v.ok, f"node group {g.name}: {v.component} rejects config {name!r}: {v.error}"
            labels = {**v.labels, **g.labels}
            # A node opted out of the device plugin (a DRA pool's) has no plugin running,
            # so no extended resources; GFD still labels it.
            resources = {} if opted_out else dict(v.resources)
            for _ in range(g.nodes):
                index += 1
                out.append((f"{g.name}-{index:03d}", g, labels, resources))
    return out


def write_inventory(out_dir: Path, path: Path = HARDWARE) -> Path:
    """Generate the inventory into out_dir (named by the description's hash)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    out = out_dir / f"e2e-inventory-{digest}.yaml"
    header = (f"# Generated by tests/e2e/fleet.py from {path.name} (GPU labels and resources from the\n"
              "# upstream device plugin and GFD); do not edit.\n")
    out.write_text(header + yaml.safe_dump(inventory(path), sort_keys=False))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hardware", type=Path, nargs="?", default=HARDWARE)
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args()
    args.output.write_text(yaml.safe_dump(inventory(args.hardware), sort_keys=False))


if __name__ == "__main__":
    main()
