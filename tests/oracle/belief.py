"""The project's own belief about what the device plugin and GFD do, behind a tiny
JSON-in/JSON-out entry so tests/oracle stay decoupled from the library's layout.

Each function names the library function it wraps; when the library moves, only this
file is re-pointed (its signatures stay stable)."""
from __future__ import annotations


def gfd_products(gpu: str, config: dict | None) -> list[str]:
    """`nvidia.com/gpu.product` values the project expects GFD to put on a node of `gpu`
    running device-plugin `config` (None: the plugin's default, no sharing).
    Wraps gpuvalues.planners.deviceplugin.gfd_products."""
    from gpuvalues.planners import deviceplugin
    return deviceplugin.gfd_products(gpu, config)


def spec_nodes(spec: dict) -> list[dict]:
    """The nodes the project expects for a spec's fleet once its node side is applied, as
    [{"name", "labels", "allocatable"}] (GPU resources only).
    Wraps gpuvalues.fleet.expected_nodes over gpuvalues.fleet.build_fleet."""
    from gpuvalues.fleet import build_fleet, expected_nodes
    from gpuvalues.fleet.spec import from_data
    inv = expected_nodes(build_fleet(from_data(spec)))
    return [{"name": n.name, "labels": dict(n.labels),
             "allocatable": {k: int(v) for k, v in n.allocatable.items() if k.startswith("nvidia.com/")}}
            for n in inv.nodes]


def validate_device_plugin_config(cfg) -> dict:
    """The project's device-plugin config validator: {"ok", "error"}.
    Wraps gpuvalues.planners.deviceplugin.validate_device_plugin_config."""
    from gpuvalues.planners import deviceplugin
    try:
        deviceplugin.validate_device_plugin_config(cfg)
    except Exception as exc:  # the project's one-line error types
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "error": ""}


def validate_mig_parted_config(cfg) -> dict:
    """The project's mig-parted config validator: {"ok", "error"}.
    Wraps gpuvalues.planners.mig.migparted.validate_mig_parted_config."""
    from gpuvalues.planners.mig import migparted
    try:
        migparted.validate_mig_parted_config(cfg)
    except Exception as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "error": ""}
