"""The project's own belief about what the device plugin and GFD do, behind a tiny
JSON-in/JSON-out entry so tests/oracle stay decoupled from the library's layout.

Each function names the library function it wraps today; when the library moves, only
this file is re-pointed (the lead keeps these signatures stable)."""
from __future__ import annotations

from types import SimpleNamespace


def gfd_products(gpu: str, mode: str) -> list[str]:
    """`nvidia.com/gpu.product` values the project expects GFD to put on a node of `gpu`
    under chart gpu.mode `mode` (whole | mig | shared).
    Wraps gpuvalues.values._gfd_products (it reads only placement.mode)."""
    from gpuvalues import catalog, values
    return values._gfd_products(catalog.get_gpu(gpu), SimpleNamespace(mode=mode))


def spec_nodes(spec: dict) -> list[dict]:
    """The nodes the project expects for a spec once its values are applied, as
    [{"pool", "labels", "allocatable"}] (GPU resources only).
    Wraps gpuvalues.values.spec_inventory over gpuvalues.values.build_all."""
    from gpuvalues import spec as spec_mod, values
    s = spec_mod.from_data(spec)
    built = values.build_all(s)[0]
    inv = values.spec_inventory(s, built)
    return [{"name": n.name, "labels": dict(n.labels),
             "allocatable": {k: int(v) for k, v in n.allocatable.items() if k.startswith("nvidia.com/")}}
            for n in inv.nodes]


def validate_device_plugin_config(cfg) -> dict:
    """The project's device-plugin config validator: {"ok", "error"}.
    Wraps gpuvalues.sharing.validate_device_plugin_config."""
    from gpuvalues import sharing
    try:
        sharing.validate_device_plugin_config(cfg)
    except Exception as exc:  # the project's one-line error types
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "error": ""}


def validate_mig_parted_config(cfg) -> dict:
    """The project's mig-parted config validator: {"ok", "error"}.
    Wraps gpuvalues.migparted.validate_mig_parted_config."""
    from gpuvalues import migparted
    try:
        migparted.validate_mig_parted_config(cfg)
    except Exception as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "error": ""}
