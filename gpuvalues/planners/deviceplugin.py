"""NVIDIA device-plugin config (`api/config/v1`): build it, and validate it with the plugin's rules.

Rules follow NVIDIA/k8s-device-plugin (api/config/v1/{config,flags,replicas,resources,imex}.go,
cmd/nvidia-device-plugin/main.go `validateFlags`, cmd/mps-control-daemon/mps/device.go).
We are stricter in one way: the plugin silently ignores unknown keys (non-strict
sigs.k8s.io/yaml), which hides typos such as `timeslicing`; we reject them.

Public API:
- `validate_device_plugin_config(cfg, *, source=None, mig_enabled=None, gpu=None,
  mps_root_provided=True)` -> list of warnings (settings the plugin accepts but ignores);
  raises `DevicePluginConfigError` whose `field` is the dotted path (`sharing.mps.resources[0].replicas`).
- `build_device_plugin_config(...)` -> a validated config dict.
- `sharing_strategy(cfg)` -> "none" | "time-slicing" | "mps" (as the plugin decides).
- `mps_max_clients(gpu)`, `mps_client_limits(gpu, replicas)`, `resource_pattern_matches(p, s)`,
  `normalize_resource_name(name)`, `mig_resource_name(profile)`.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from gpuvalues.catalog import GpuModel, get_gpu, gfd_product_label, mig_resource_name  # noqa: F401 (public re-export)
from gpuvalues.errors import DevicePluginConfigError
from gpuvalues.kube import is_dns_subdomain

VERSION = "v1"
RESOURCE_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME_LENGTH = 63
# The node label by which the device plugin's config-manager picks a named config.
CONFIG_LABEL = "nvidia.com/device-plugin.config"
# A node labelled DEPLOY_LABEL=false runs no device plugin: the GPU Operator's per-node
# operand label (gpu-operator: nvidia.com/gpu.deploy.device-plugin), which the chart's
# DaemonSet honours too (platform.devicePlugin.nodeOptOutLabel). DRA node pools carry it:
# NVIDIA's DRA driver and the device plugin must not run on one node, both would hand out
# the same GPUs (the GPU Operator refuses enabling both).
DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
# What every container that gets a GPU from the plugin is started with. Since v0.19 the
# plugin's own defaults are true (cmd/nvidia-device-plugin/main.go --gds-enabled,
# --mofed-enabled, --gdrcopy-enabled), so each Allocate response sets NVIDIA_GDS,
# NVIDIA_MOFED and NVIDIA_GDRCOPY=enabled (internal/plugin/server.go getAllocateResponse)
# and the container toolkit then injects GPUDirect Storage, MOFED and GDRCopy from the
# host. Every pool gpuvalues plans serves models on one node: the weights come through
# the page cache (no GPUDirect Storage) and tensor parallelism stays on NVLink (no
# RDMA, so neither MOFED nor GDRCopy); most GPU nodes do not even have those host parts.
# So every config says false, explicitly (a config's flag wins over the plugin's default:
# api/config/v1/flags.go updateFromCLIFlag). A pool with GPUDirect hardware and
# multi-node workloads would set them true in its own named config.
CONTAINER_FEATURES = {"gdsEnabled": False, "mofedEnabled": False, "gdrcopyEnabled": False}
# A node pool's `containerFeatures` (spec: gds, mofed, gdrcopy) -> these config flags.
CONTAINER_FEATURE_FLAGS = {"gds": "gdsEnabled", "mofed": "mofedEnabled", "gdrcopy": "gdrcopyEnabled"}


def with_container_features(config: Mapping[str, Any], features: Mapping[str, bool]) -> dict[str, Any]:
    """`config` with the pool's container features as its explicit flags (the rest off)."""
    flags = {**dict(config.get("flags") or {}), **CONTAINER_FEATURES,
             **{CONTAINER_FEATURE_FLAGS[k]: bool(v) for k, v in features.items()}}
    return {**dict(config), "flags": flags}
# What DRA pods claim instead: whole GPUs of the DRA driver's DeviceClass (NVIDIA
# k8s-dra-driver-gpu; the chart's gpu.dra.deviceClassName default). fit counts them.
DRA_GPU_CLASS = "gpu.nvidia.com"
# The driver name its ResourceSlices carry (spec.driver), for whole GPUs and MIG devices alike:
# k8s-dra-driver-gpu templates/deviceclass-gpu.yaml and deviceclass-mig.yaml select
# device.driver == 'gpu.nvidia.com'.
DRA_DRIVER = "gpu.nvidia.com"
MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
ALLOCATION_POLICIES = ("distributed", "packed")
DEVICE_DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra")

_TOP = ("version", "flags", "resources", "sharing", "imex")
_FLAGS = {"migStrategy": "str", "failOnInitError": "bool", "mpsRoot": "str", "nvidiaDriverRoot": "str",
          "nvidiaDevRoot": "str", "gdrcopyEnabled": "bool", "gdsEnabled": "bool", "mofedEnabled": "bool",
          "useNodeFeatureAPI": "bool", "deviceDiscoveryStrategy": "str", "plugin": "map", "gfd": "map"}
_PLUGIN = {"passDeviceSpecs": "bool", "deviceListStrategy": "strlist", "deviceIDStrategy": "str",
           "cdiAnnotationPrefix": "str", "nvidiaCTKPath": "str", "containerDriverRoot": "str",
           "sharedDevicesAllocationPolicy": "str"}
_GFD = {"oneshot": "bool", "noTimestamp": "bool", "sleepInterval": "duration", "outputFile": "str",
        "machineTypeFile": "str"}
_REPLICATED = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_RESOURCE = ("name", "rename", "devices", "replicas")
_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$")


def _err(field: str, msg: str, source: str | None) -> DevicePluginConfigError:
    return DevicePluginConfigError(msg, source=source, field=field or None)


def normalize_resource_name(name: Any, field: str = "name", source: str | None = None) -> str:
    """`NewResourceName`: prefix `nvidia.com/` if missing; <= 63 chars; DNS subdomain after `/`."""
    if not isinstance(name, str):
        raise _err(field, f"resource name must be a string, got {name!r}", source)
    full = name if name.startswith(RESOURCE_PREFIX + "/") else f"{RESOURCE_PREFIX}/{name}"
    if len(full) > MAX_RESOURCE_NAME_LENGTH:
        raise _err(field, f"fully-qualified resource name must be {MAX_RESOURCE_NAME_LENGTH} characters or "
                          f"less: {full} ({len(full)})", source)
    after = full.split("/", 1)[1]
    if not is_dns_subdomain(after):
        raise _err(field, f"incorrect format for resource name {full!r}: the part after 'nvidia.com/' must be "
                          "a DNS subdomain (lowercase letters, digits, '-' and '.'; start and end alphanumeric)",
                   source)
    return full


def resource_pattern_matches(pattern: str, value: str) -> bool:
    """`ResourcePattern.Matches`: `*` is `.*`, everything else literal, anchored both ends."""
    regex = "^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$"
    return re.match(regex, value, flags=re.DOTALL) is not None


def _is_uint(s: str) -> bool:
    return s.isdigit() and s.isascii()


def _is_uuid(s: str) -> bool:
    import uuid          # only when a config lists device UUIDs (keeps CLI start-up light)
    try:
        uuid.UUID(s)
    except ValueError:
        return False
    return True


def device_ref_kind(ref: str) -> str | None:
    """Classify a `devices` list entry like `ReplicatedDeviceRef`: gpuIndex, migIndex, uuid or None."""
    if _is_uint(ref):
        return "gpuIndex"
    parts = ref.split(":", 1)
    if len(parts) == 2 and all(_is_uint(p) for p in parts):
        return "migIndex"
    if ref.startswith("GPU-") and _is_uuid(ref[4:]):
        return "uuid"
    if ref.startswith("MIG-"):
        rest = ref[4:]
        if _is_uuid(rest):
            return "uuid"
        split = rest.split("/", 2)
        if (len(split) == 3 and split[0].startswith("GPU-") and _is_uuid(split[0][4:])
                and all(_is_uint(x) for x in split[1:])):
            return "uuid"
    return None


def _check_keys(doc: Mapping[str, Any], allowed: Sequence[str], field: str, source: str | None) -> None:
    for k in doc:
        if k not in allowed:
            where = f"{field}.{k}" if field else str(k)
            raise _err(where, f"unknown key {k!r} (the device plugin would silently ignore it); "
                              f"allowed: {', '.join(allowed)}", source)


def _check_type(value: Any, kind: str, field: str, source: str | None) -> None:
    ok = {
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "map": isinstance(value, Mapping),
        "strlist": isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)),
        "duration": (isinstance(value, (int, float)) and not isinstance(value, bool))
                    or (isinstance(value, str) and (value == "infinite" or bool(_GO_DURATION.match(value)))),
    }[kind]
    if value is None:
        return  # a null pointer flag means "not set"
    if not ok:
        want = {"bool": "true or false", "str": "a string", "map": "a mapping",
                "strlist": "a string or a list of strings",
                "duration": "nanoseconds, a Go duration such as '60s', or 'infinite'"}[kind]
        raise _err(field, f"must be {want}, got {value!r}", source)


def _enum(value: Any, allowed: Sequence[str], field: str, what: str, source: str | None) -> None:
    if value is not None and value not in allowed:
        raise _err(field, f"{what} {value!r}; must be one of: {', '.join(allowed)}", source)


def _validate_flags(flags: Any, source: str | None) -> None:
    if not isinstance(flags, Mapping):
        raise _err("flags", "must be a mapping", source)
    _check_keys(flags, tuple(_FLAGS), "flags", source)
    for k, kind in _FLAGS.items():
        if k in flags:
            _check_type(flags[k], kind, f"flags.{k}", source)
    _enum(flags.get("migStrategy"), MIG_STRATEGIES, "flags.migStrategy", "unknown MIG strategy", source)
    _enum(flags.get("deviceDiscoveryStrategy"), DEVICE_DISCOVERY_STRATEGIES, "flags.deviceDiscoveryStrategy",
          "invalid device discovery strategy", source)
    for sub, spec in (("plugin", _PLUGIN), ("gfd", _GFD)):
        block = flags.get(sub)
        if block is None:
            continue
        _check_keys(block, tuple(spec), f"flags.{sub}", source)
        for k, kind in spec.items():
            if k in block:
                _check_type(block[k], kind, f"flags.{sub}.{k}", source)
    plugin = flags.get("plugin") or {}
    dls = plugin.get("deviceListStrategy")
    for i, s in enumerate([dls] if isinstance(dls, str) else (dls or [])):
        _enum(s, DEVICE_LIST_STRATEGIES, "flags.plugin.deviceListStrategy" + ("" if isinstance(dls, str) else f"[{i}]"),
              "invalid device list strategy", source)
    _enum(plugin.get("deviceIDStrategy"), DEVICE_ID_STRATEGIES, "flags.plugin.deviceIDStrategy",
          "invalid device ID strategy", source)
    _enum(plugin.get("sharedDevicesAllocationPolicy"), ALLOCATION_POLICIES,
          "flags.plugin.sharedDevicesAllocationPolicy", "invalid shared devices allocation policy", source)


def _validate_devices(devices: Any, field: str, source: str | None) -> bool:
    """Returns True when devices means all devices."""
    if isinstance(devices, str):
        if devices != "all":
            raise _err(field, f"devices set as {devices!r} but the only valid string input is 'all'", source)
        return True
    if isinstance(devices, bool) or isinstance(devices, float):
        raise _err(field, f"unrecognized type for devices spec: {devices!r}", source)
    if isinstance(devices, int):
        if devices <= 0:
            raise _err(field, f"devices set as {devices} but a count of devices must be > 0", source)
        return False
    if isinstance(devices, list):
        for i, d in enumerate(devices):
            if isinstance(d, int) and not isinstance(d, bool) and d >= 0:
                continue
            if isinstance(d, str) and device_ref_kind(d):
                continue
            raise _err(f"{field}[{i}]", f"unsupported device {d!r}: use a GPU index (0), a MIG index (0:1), "
                                        "GPU-<uuid>, MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>", source)
        return False
    raise _err(field, f"unrecognized type for devices spec: {devices!r}", source)


def _validate_replicated(block: Any, field: str, source: str | None, warnings: list[str]) -> list[tuple[str, int]]:
    if not isinstance(block, Mapping):
        raise _err(field, "must be a mapping with a 'resources' list", source)
    _check_keys(block, _REPLICATED, field, source)
    for k in ("renameByDefault", "failRequestsGreaterThanOne"):
        if k in block:
            _check_type(block[k], "bool", f"{field}.{k}", source)
    resources = block.get("resources")
    if not resources:
        raise _err(f"{field}.resources", "no resources specified (list at least one, e.g. "
                                         "{name: nvidia.com/gpu, replicas: 2})", source)
    if not isinstance(resources, list):
        raise _err(f"{field}.resources", "must be a list", source)
    out = []
    for i, r in enumerate(resources):
        rf = f"{field}.resources[{i}]"
        if not isinstance(r, Mapping):
            raise _err(rf, "must be a mapping with name and replicas", source)
        _check_keys(r, _RESOURCE, rf, source)
        if "name" not in r:
            raise _err(f"{rf}.name", "no resource name specified", source)
        name = normalize_resource_name(r["name"], f"{rf}.name", source)
        all_devices = _validate_devices(r.get("devices", "all"), f"{rf}.devices", source)
        if "replicas" not in r:
            raise _err(f"{rf}.replicas", "no replicas specified", source)
        reps = r["replicas"]
        if isinstance(reps, bool) or not isinstance(reps, int):
            raise _err(f"{rf}.replicas", f"must be an integer, got {reps!r}", source)
        if reps < 2:
            raise _err(f"{rf}.replicas", f"number of replicas must be >= 2, got {reps} (to turn sharing off, "
                                         "use a config without a sharing section)", source)
        if "rename" in r:
            normalize_resource_name(r["rename"], f"{rf}.rename", source)
            warnings.append(f"{rf}.rename: ignored by the device plugin today (disableResoureRenaming)")
        if not all_devices:
            warnings.append(f"{rf}.devices: only 'all' is honoured by the device plugin today")
        out.append((name, reps))
    return out


def sharing_strategy(cfg: Mapping[str, Any]) -> str:
    """The plugin's `SharingStrategy()`: mps if any MPS resource has replicas > 1, else time-slicing, else none."""
    sharing = (cfg or {}).get("sharing") or {}
    for key, strategy in (("mps", "mps"), ("timeSlicing", "time-slicing")):
        block = sharing.get(key) or {}
        if any(isinstance(r, Mapping) and isinstance(r.get("replicas"), int) and r["replicas"] > 1
               for r in block.get("resources") or []):
            return strategy
    return "none"


def mps_max_clients(gpu: str | GpuModel) -> int:
    """MPS clients per device: 48 at compute capability >= 7.5, else 16 (mps/device.go)."""
    return 48 if get_gpu(gpu).compute_capability_tuple >= (7, 5) else 16


def gfd_products(gpu: str | GpuModel, config: Mapping[str, Any] | None = None) -> list[str]:
    """GFD's `nvidia.com/gpu.product` values for a GPU on a node running device-plugin
    `config` (None: no sharing): the product name, with `-SHARED` appended only when a
    time-slicing/MPS resource is shared and NOT renamed (k8s-device-plugin
    internal/lm/resource.go: `if rl.isShared() && !rl.isRenamed()`; its test "time-slicing
    renamed does not append suffix"). Every alias nvidia-smi may print is listed."""
    g = get_gpu(gpu)
    names = sorted({gfd_product_label(a) for a in (*g.aliases, g.name) if a.upper().startswith("NVIDIA")})
    sharing = (config or {}).get("sharing") or {}
    for block in (sharing.get("timeSlicing"), sharing.get("mps")):
        if not block:
            continue
        renamed = all(r.get("rename") or block.get("renameByDefault") for r in block.get("resources", []))
        if not renamed:
            return [f"{n}-SHARED" for n in names]
    return names


def replicas_per_gpu(gpu: str | GpuModel, need_gib: float, sharing: str) -> int:
    """Time-slicing/MPS replicas one GPU holds for a model needing `need_gib` GiB: as many
    as its usable memory holds (time-slicing has no memory isolation, so the sum must fit),
    and for MPS at most `mps_max_clients`. The one home of this rule (fleet and MILP)."""
    g = get_gpu(gpu)
    replicas = int(g.memory_gib // need_gib) if need_gib > 0 else 0
    return min(replicas, mps_max_clients(g)) if sharing == "mps" else replicas


def mps_client_limits(gpu: str | GpuModel, replicas: int) -> dict[str, int]:
    """What the MPS control daemon sets per client: pinned memory MiB and active thread %."""
    model = get_gpu(gpu)
    if replicas < 2 or replicas > mps_max_clients(model):
        raise DevicePluginConfigError(f"MPS replicas on {model.name} must be 2..{mps_max_clients(model)}, got {replicas}",
                                      field="replicas")
    total_mib = int(model.memory_gb * 1024)
    return {"memory_limit_mib": total_mib // replicas, "active_thread_percentage": 100 // replicas}


def validate_device_plugin_config(cfg: Any, *, source: str | None = None, mig_enabled: bool | None = None,
                                  gpu: str | GpuModel | None = None, mps_root_provided: bool = True) -> list[str]:
    """Check a device-plugin config (parsed YAML) the way the plugin would; return warnings.

    `mig_enabled=True` says the nodes using this config have MIG enabled (MPS then fails);
    `gpu` lets us check MPS replicas against the GPU's client limit; `mps_root_provided`
    is True when the deployment sets MPS_ROOT (the official chart always does).
    Raises `DevicePluginConfigError` naming the field.
    """
    warnings: list[str] = []
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, Mapping):
        raise _err("", f"device-plugin config must be a mapping, got {type(cfg).__name__}", source)
    _check_keys(cfg, _TOP, "", source)
    version = cfg.get("version")
    if version not in (None, "", VERSION):
        raise _err("version", f"unknown version: {version} (only {VERSION} exists)", source)
    flags = cfg.get("flags")
    if flags is not None:
        _validate_flags(flags, source)
    flags = flags or {}
    res = cfg.get("resources")
    if res is not None:
        if not isinstance(res, Mapping):
            raise _err("resources", "must be a mapping with gpus and mig lists", source)
        _check_keys(res, ("gpus", "mig"), "resources", source)
        for kind in ("gpus", "mig"):
            for i, r in enumerate(res.get(kind) or []):
                f = f"resources.{kind}[{i}]"
                if not isinstance(r, Mapping) or "pattern" not in r:
                    raise _err(f, "resources must have a 'pattern' field set", source)
                if "name" not in r:
                    raise _err(f, "resources must have a 'name' field set", source)
                if not isinstance(r["pattern"], str):
                    raise _err(f"{f}.pattern", "must be a string", source)
                normalize_resource_name(r["name"], f"{f}.name", source)
        if res.get("gpus") or res.get("mig"):
            warnings.append("resources: ignored by the device plugin today (DisableResourceNamingInConfig)")
    sharing = cfg.get("sharing")
    mps_resources: list[tuple[str, int]] = []
    if sharing is not None:
        if not isinstance(sharing, Mapping):
            raise _err("sharing", "must be a mapping with timeSlicing or mps", source)
        _check_keys(sharing, ("timeSlicing", "mps"), "sharing", source)
        if "timeSlicing" in sharing:
            _validate_replicated(sharing["timeSlicing"], "sharing.timeSlicing", source, warnings)
        if "mps" in sharing:
            mps_resources = _validate_replicated(sharing["mps"], "sharing.mps", source, warnings)
        if "timeSlicing" in sharing and "mps" in sharing:
            raise _err("sharing", "timeSlicing and mps are mutually exclusive; keep one (the plugin would "
                                  "silently use mps)", source)
    if mps_resources:
        if flags.get("migStrategy") == "mixed":
            raise _err("flags.migStrategy", "using migStrategy=mixed is not supported with MPS", source)
        if mig_enabled:
            raise _err("sharing.mps", "MPS sharing is not supported for MIG devices; disable MIG on these "
                                      "nodes or use time-slicing", source)
        for i, (name, reps) in enumerate(mps_resources):
            if name != f"{RESOURCE_PREFIX}/gpu":
                raise _err(f"sharing.mps.resources[{i}].name", f"MPS shares only full GPUs (nvidia.com/gpu), "
                                                               f"not {name}", source)
            if gpu is not None and reps > mps_max_clients(gpu):
                raise _err(f"sharing.mps.resources[{i}].replicas",
                           f"maximum allowed replicas exceeded: {reps} > {mps_max_clients(gpu)} MPS clients on "
                           f"{get_gpu(gpu).name} (compute capability {get_gpu(gpu).compute_capability})", source)
        if not mps_root_provided and not flags.get("mpsRoot"):
            raise _err("flags.mpsRoot", "using MPS requires mpsRoot (or MPS_ROOT) to be specified", source)
    imex = cfg.get("imex")
    if imex is not None:
        if not isinstance(imex, Mapping):
            raise _err("imex", "must be a mapping", source)
        _check_keys(imex, ("channelIDs", "required"), "imex", source)
        ids = imex.get("channelIDs")
        if ids not in (None, [], [0]):
            raise _err("imex.channelIDs", f"channelIDs must be [] or [0]; found {ids}", source)
        if "required" in imex:
            _check_type(imex["required"], "bool", "imex.required", source)
    return warnings


def effective_fail_requests_greater_than_one(cfg: Mapping[str, Any]) -> bool:
    """As `NewConfig` resolves it: MPS defaults nil to true; time-slicing treats nil as false."""
    sharing = (cfg or {}).get("sharing") or {}
    if sharing.get("mps") is not None:
        v = sharing["mps"].get("failRequestsGreaterThanOne")
        return True if v is None else bool(v)
    return bool((sharing.get("timeSlicing") or {}).get("failRequestsGreaterThanOne", False))


def build_device_plugin_config(*, mig_strategy: str = "none", sharing: str | None = None, replicas: int | None = None,
                               resources: Sequence[str] = ("nvidia.com/gpu",), rename_by_default: bool = False,
                               fail_requests_greater_than_one: bool | None = None, gpu: str | GpuModel | None = None,
                               mig_enabled: bool | None = None) -> dict[str, Any]:
    """Build a device-plugin config dict and validate it before returning it.

    `sharing` is None, "time-slicing" or "mps"; `replicas` (>= 2) applies to every name in
    `resources`. For time-slicing we set `failRequestsGreaterThanOne: true` unless told
    otherwise, so a pod asking for 2 replicas fails fast instead of getting two slices
    of one GPU (NVIDIA/k8s-device-plugin#491).
    """
    cfg: dict[str, Any] = {"version": VERSION, "flags": {"migStrategy": mig_strategy, **CONTAINER_FEATURES}}
    if sharing is not None:
        if sharing not in ("time-slicing", "mps"):
            raise DevicePluginConfigError(f"sharing must be time-slicing or mps, got {sharing!r}", field="sharing")
        block: dict[str, Any] = {}
        if rename_by_default:
            block["renameByDefault"] = True
        frgto = fail_requests_greater_than_one
        if frgto is None:
            frgto = True
        block["failRequestsGreaterThanOne"] = frgto
        block["resources"] = [{"name": r, "replicas": replicas} for r in resources]
        cfg["sharing"] = {"timeSlicing" if sharing == "time-slicing" else "mps": block}
    validate_device_plugin_config(cfg, gpu=gpu, mig_enabled=mig_enabled)
    return cfg
