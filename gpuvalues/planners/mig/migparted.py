"""nvidia-mig-parted config (`version: v1`, `mig-configs`) and the node labels that select it.

Rules follow NVIDIA/mig-parted api/spec/v1/spec.go (`Spec`/`MigConfigSpec` UnmarshalJSON),
pkg/types/mig_config.go (`AssertValidFormat`) and go-nvlib's profile syntax. The GPU
Operator's mig-manager applies the config named by the node label `nvidia.com/mig.config`.

Public API:
- `build_mig_parted_config(node_configs, *, device_filters=None)` -> config dict. `node_configs`
  maps a config name to a list, one item per GPU index on the node, of `mig-devices`
  mappings (`{"3g.40gb": 1, ...}`; `{}` = MIG on, no instances; None = MIG off).
- `validate_mig_parted_config(cfg, *, source=None, gpu=None)` raises `MigPartedConfigError`
  naming the field (`mig-configs.<name>[<i>].mig-devices`); with `gpu` it also checks each
  entry's instances can be placed on that GPU (`gpuvalues.planners.mig.geometry.place`).
- `node_labels(config_name)` -> `{"nvidia.com/mig.config": name}`; `MIG_CONFIG_LABEL`.
- `all_balanced(gpu)` -> mig-devices of mig-parted's `all-balanced` for that GPU.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from gpuvalues.catalog import GpuModel, get_gpu, parse_profile_name
from gpuvalues.errors import CatalogError, MigLayoutError, MigPartedConfigError
from gpuvalues.kube import is_label_value

VERSION = "v1"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# pkg/mig/builder/balanced.go balancedFormula: slots -> {G: count}
BALANCED_FORMULA = {7: {1: 2, 2: 1, 3: 1}, 4: {1: 2, 2: 1}}


def _err(field: str, msg: str, source: str | None) -> MigPartedConfigError:
    return MigPartedConfigError(msg, source=source, field=field or None)


def check_label_value(value: str, field: str = "name", source: str | None = None) -> None:
    """A Kubernetes label value: <= 63 chars, alphanumeric at both ends, `-_.` inside."""
    if not is_label_value(value):
        raise _err(field, f"{value!r} cannot be a node label value (nvidia.com/mig.config): use at most 63 "
                          "letters, digits, '-', '_' or '.', starting and ending with a letter or digit", source)


def all_balanced(gpu: str | GpuModel) -> dict[str, int]:
    """mig-parted's generated `all-balanced` for this GPU (base profile with most instances per G)."""
    model = get_gpu(gpu)
    if model.mig is None:
        raise MigLayoutError(f"{model.name} has no MIG, so no all-balanced layout")
    formula = BALANCED_FORMULA.get(model.mig.compute_slices)
    if formula is None:
        raise MigLayoutError(f"{model.name} has {model.mig.compute_slices} compute slices: mig-parted's "
                             "all-balanced formula covers 7- and 4-slice GPUs only")
    out: dict[str, int] = {}
    for g, count in sorted(formula.items(), key=lambda kv: -kv[0]):
        cands = [p for p in model.profiles if p.is_base and p.compute_slices == g]
        best = max(cands, key=lambda p: p.max_instances)  # e.g. 1g.10gb (7) over 1g.20gb (4)
        out[best.name] = count
    return out


def validate_mig_parted_config(cfg: Any, *, source: str | None = None, gpu: str | GpuModel | None = None) -> None:
    """Validate like `nvidia-mig-parted` parses a config; raise `MigPartedConfigError` naming the field."""
    if not isinstance(cfg, Mapping):
        raise _err("", "mig-parted config must be a mapping with version and mig-configs", source)
    if "version" not in cfg and len(cfg) > 0:
        raise _err("version", "unable to parse with missing 'version' field", source)
    if cfg.get("version") != VERSION:
        raise _err("version", f"unknown version: {cfg.get('version')} (must be {VERSION})", source)
    for k in cfg:
        if k not in ("version", "mig-configs"):
            raise _err(str(k), f"unexpected field: {k}", source)
    configs = cfg.get("mig-configs")
    if configs is None:
        return
    if not isinstance(configs, Mapping) or len(configs) == 0:
        raise _err("mig-configs", "at least one entry in 'mig-configs' is required", source)
    model = get_gpu(gpu) if gpu is not None else None
    for name, entries in configs.items():
        field = f"mig-configs.{name}"
        if not isinstance(entries, list) or len(entries) == 0:
            raise _err(field, f"at least one entry in '{name}' is required", source)
        for i, e in enumerate(entries):
            _validate_entry(e, f"{field}[{i}]", source, model)


def _validate_entry(e: Any, field: str, source: str | None, model: GpuModel | None) -> None:
    if not isinstance(e, Mapping):
        raise _err(field, "must be a mapping with devices, mig-enabled and mig-devices", source)
    for r in ("devices", "mig-enabled"):
        if r not in e:
            raise _err(f"{field}.{r}", f"missing required field: {r}", source)
    for k in e:
        if k not in ("device-filter", "devices", "mig-enabled", "mig-devices"):
            raise _err(f"{field}.{k}", f"unexpected field: {k}", source)
    if "device-filter" in e:
        df = e["device-filter"]
        if not (isinstance(df, str) or (isinstance(df, list) and all(isinstance(x, str) for x in df))):
            raise _err(f"{field}.device-filter", "must be a string or a list of strings (e.g. 0x20B210DE)", source)
    devices = e["devices"]
    if isinstance(devices, str):
        if devices != "all":
            raise _err(f"{field}.devices", f"invalid string input for 'devices': {devices} (use all or a list "
                                           "of GPU indexes)", source)
    elif not (isinstance(devices, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in devices)):
        raise _err(f"{field}.devices", "must be 'all' or a list of GPU indexes", source)
    enabled = e["mig-enabled"]
    if not isinstance(enabled, bool):
        raise _err(f"{field}.mig-enabled", f"must be true or false, got {enabled!r}", source)
    md = e.get("mig-devices")
    if enabled and md is None:
        raise _err(f"{field}.mig-devices", "missing required field 'mig-devices' when 'mig-enabled' is true", source)
    if not enabled and md:
        raise _err(f"{field}.mig-devices", "MIG devices included when 'mig-enabled' is false", source)
    if md is None:
        return
    if not isinstance(md, Mapping):
        raise _err(f"{field}.mig-devices", "must be a mapping of profile -> count", source)
    if len(md) == 0:
        return
    for prof, count in md.items():
        try:
            parse_profile_name(str(prof))
        except CatalogError as exc:
            raise _err(f"{field}.mig-devices", f"invalid format for '{prof}': {exc}", source) from None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise _err(f"{field}.mig-devices", f"invalid count for '{prof}': {count!r}", source)
    if all(c == 0 for c in md.values()):
        raise _err(f"{field}.mig-devices", "all counts for all MigProfiles are 0", source)
    if model is not None:
        from gpuvalues.planners.mig import geometry as mig  # local: mig imports nothing from here, keeps import order simple
        try:
            mig.place(model, {k: v for k, v in md.items() if v})
        except MigLayoutError as exc:
            raise _err(f"{field}.mig-devices", str(exc), source) from None


def build_mig_parted_config(node_configs: Mapping[str, Sequence[Mapping[str, int] | None]], *,
                            device_filters: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """One named mig-config per node config; GPUs with the same mig-devices share an entry.

    `device_filters` optionally maps a config name to PCI IDs (`0x20B210DE`) so the config
    only touches that GPU model. The result is validated before it is returned.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for name, devices in node_configs.items():
        check_label_value(name, f"mig-configs.{name}")
        groups: dict[tuple[tuple[str, int], ...] | None, list[int]] = {}
        for idx, md in enumerate(devices):
            key = None if md is None else tuple(sorted((k, v) for k, v in md.items() if v))
            groups.setdefault(key, []).append(idx)
        entries = []
        for key, idxs in groups.items():
            entry: dict[str, Any] = {}
            if device_filters and device_filters.get(name):
                entry["device-filter"] = list(device_filters[name])
            entry["devices"] = "all" if len(groups) == 1 else idxs
            entry["mig-enabled"] = key is not None
            if key is not None:
                entry["mig-devices"] = dict(key)
            entries.append(entry)
        out[name] = entries
    cfg = {"version": VERSION, "mig-configs": out}
    validate_mig_parted_config(cfg)
    return cfg


def node_labels(config_name: str) -> dict[str, str]:
    """The label that makes the GPU Operator's mig-manager apply `config_name`."""
    check_label_value(config_name)
    return {MIG_CONFIG_LABEL: config_name}
