"""Every device-plugin config the project emits, fed to the real device plugin and GFD
(ci/oracle/deviceplugin at the chart's pinned version) over a mock node of the right
hardware: upstream must accept it, advertise what the workloads request, and label the
node so the workloads' GPU-product affinity matches."""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.oracle import oraclelib as ol

# MIG devices that fill one GPU with a profile (instance counts of NVIDIA's MIG user
# guide for the 80 GB A100/H100; go-nvml's mock tables carry the same InstanceCount).
_FILL = {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2,
         "4g.40gb": 1, "7g.80gb": 1}


def _hardware_for_config(cfg: dict) -> dict:
    """A node on which the config's MIG strategy and sharing resources make sense."""
    strategy = (cfg.get("flags") or {}).get("migStrategy", "none")
    named = [r["name"] for kind in ("timeSlicing", "mps")
             for r in ((cfg.get("sharing") or {}).get(kind) or {}).get("resources", [])]
    profiles = [n[len("nvidia.com/mig-"):] for n in named if n.startswith("nvidia.com/mig-")]
    if strategy == "none":
        return ol.hardware_for_gpu("A100-80GB", 8)
    if strategy == "single":
        p = profiles[0] if profiles else "1g.10gb"
        return ol.hardware_for_gpu("A100-80GB", 8, {str(i): [p] * _FILL[p] for i in range(8)})
    layout = {str(i): [p] * _FILL[p] for i, p in enumerate(profiles)}
    layout[str(len(layout))] = ["3g.40gb", "3g.40gb"]
    return ol.hardware_for_gpu("A100-80GB", 8, layout)


def _advertised_name(cfg: dict, resource: dict, kind: str) -> str:
    """The resource name a replicated resource is served as (api/config/v1/replicas.go:
    rename, else <name>.shared when renameByDefault)."""
    if resource.get("rename"):
        return resource["rename"]
    if (((cfg.get("sharing") or {}).get(kind)) or {}).get("renameByDefault"):
        return resource["name"] + ".shared"
    return resource["name"]


def _chart_cases():
    cases = []
    for scenario in ol.chart_scenarios():
        for name in sorted(ol.device_plugin_configs(ol.rendered(scenario))):
            cases.append(pytest.param(scenario, name, id=f"{scenario}:{name}"))
    return cases


@pytest.mark.parametrize(("scenario", "name"), _chart_cases())
def test_chart_scenario_config_accepted_by_device_plugin(scenario, name):
    objs = ol.rendered(scenario)
    text = ol.device_plugin_configs(objs)[name]
    plugin = ol.container_env_args(objs, "-device-plugin", "nvidia-device-plugin")
    gfd = ol.container_env_args(objs, "-gpu-feature-discovery", "gpu-feature-discovery")
    assert plugin, f"{scenario}: no nvidia-device-plugin container next to config {name}"
    cfg = yaml.safe_load(text)
    v = ol.device_plugin(text, _hardware_for_config(cfg), plugin_env=plugin[0], plugin_args=plugin[1],
                         gfd_env=gfd[0] if gfd else None, gfd_args=gfd[1] if gfd else None)
    assert v.ok, f"chart scenario {scenario}, device-plugin config {name!r}: {v.component} rejects it: {v.error}"
    for kind in ("timeSlicing", "mps"):
        for r in (((cfg.get("sharing") or {}).get(kind)) or {}).get("resources", []):
            want = _advertised_name(cfg, r, kind)
            assert want in v.resources, (
                f"chart scenario {scenario}, config {name!r}: sharing.{kind} names {r['name']} but the "
                f"device plugin advertises {sorted(v.resources)} (a shared resource nothing serves)")


# --- the examples: gpuvalues values --artifacts / plan, pool by pool ----------------------

def _values_files(out: Path, spec: dict) -> dict[str, Path]:
    """Workload -> values file (`values -o` writes one file for a one-workload spec)."""
    if out.is_file():
        return {spec["workloads"][0]["name"]: out}
    return {f.name[: -len(".values.yaml")]: f for f in sorted(out.glob("*.values.yaml"))}


def _platform_values(files: dict[str, Path]) -> Path:
    """The values file that enables the device plugin, else the platform release's (a
    fleet whose every node opts out of the plugin, e.g. DRA-only)."""
    docs = {name: yaml.safe_load(f.read_text()) for name, f in files.items()}
    for name, d in docs.items():
        if ((d.get("platform") or {}).get("devicePlugin") or {}).get("enabled"):
            return files[name]
    for name, d in docs.items():
        if (d.get("workload") or {}).get("enabled") is False:
            return files[name]
    raise AssertionError(f"no values file of {sorted(files)} enables the device plugin")


def _render(values_file: Path) -> list:
    proc = subprocess.run([str(ol.HELM), "template", "gi", str(ol.CHART), "--namespace", "gpu",
                           "--kube-version", "1.34.0", "--values", str(values_file)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{values_file.name}: {proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _example_pools(example: str):
    """(pool, node-labels, config text, hardware, [(workload, requested resources, gpuProducts)])
    for every pool of the example, from the CLI's own outputs."""
    spec = ol.spec(example)
    with tempfile.TemporaryDirectory() as tmp:
        vals, art = Path(tmp) / "values", Path(tmp) / "art"
        proc = subprocess.run([str(ol.GPUVALUES), "-q", "values", str(ol.EXAMPLES / example), "-o", str(vals),
                               "--artifacts", str(art)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{example}: {proc.stderr}"
        arts = {p.name: yaml.safe_load(p.read_text()) for p in art.glob("*.yaml")}
        files = _values_files(vals, spec)
        platform = _render(_platform_values(files))
        # no device plugin in the fleet: the oracle runs it with the chart's env for GFD's view
        env_args = ol.container_env_args(platform, "-device-plugin", "nvidia-device-plugin") \
            or ol.container_env_args(ol.rendered("platform-on"), "-device-plugin", "nvidia-device-plugin")
        gfd = ol.container_env_args(platform, "-gpu-feature-discovery", "gpu-feature-discovery")
        workloads = {}
        for wname, f in files.items():
            v = yaml.safe_load(f.read_text())
            objs = _render(f)
            limits = {}
            for o in objs:
                if o["kind"] == "Deployment":
                    for c in o["spec"]["template"]["spec"]["containers"]:
                        limits.update({k: v2 for k, v2 in ((c.get("resources") or {}).get("limits") or {}).items()
                                       if k.startswith("nvidia.com/")})
            workloads[wname] = (limits, v.get("gpuProducts") or [])
    dp_configs = arts.get("device-plugin-configs.yaml") or {}
    pools_by_name = {p["name"]: p for p in spec["cluster"]["nodePools"]}
    first = spec["cluster"]["nodePools"][0]["name"]
    groups = arts.get("node-groups.yaml")
    if groups:   # one kind of node per group: its pool, its labels, the workloads on it
        kinds = [(g["name"], g["pool"], g.get("labels") or {}, g.get("workloads") or []) for g in groups]
    else:
        labels = arts.get("node-labels.yaml") or {}
        kinds = [(p["name"], p["name"], labels.get(p["name"], {}),
                  [w["name"] for w in spec["workloads"] if w.get("nodePool", first) == p["name"]])
                 for p in spec["cluster"]["nodePools"]]
    out = []
    for group, pool_name, group_labels, names in kinds:
        pool = pools_by_name[pool_name]
        cfg_name = group_labels.get("nvidia.com/device-plugin.config", "default")
        cfg = dp_configs.get(cfg_name)
        if cfg is None:
            # The chart's default config (platform.devicePlugin.config.default).
            cfg = yaml.safe_load(ol.device_plugin_configs(platform).get("default", "version: v1"))
        mig = ol.mig_layout(arts.get("mig-parted-config.yaml"), group_labels.get("nvidia.com/mig.config", ""),
                            pool["gpusPerNode"])
        hw = ol.hardware_for_gpu(pool["gpu"], pool["gpusPerNode"], mig)
        mine = [(n, *workloads[n]) for n in names if n in workloads]
        out.append((f"{pool_name} (node group {group})", cfg_name, yaml.safe_dump(cfg), hw, mine, env_args, gfd))
    return out


def _examples():
    return sorted(p.name for p in ol.EXAMPLES.glob("*.yaml"))


def _product_cases():
    # (rtx4090-time-slicing was xfail here until issue 12's -SHARED rule was fixed.)
    return [pytest.param(ex, id=ex) for ex in _examples()]


def _oracle_pools(example: str):
    for pool, cfg_name, text, hw, workloads, (env, args), gfd in _example_pools(example):
        v = ol.device_plugin(text, hw, plugin_env=env, plugin_args=args,
                             gfd_env=gfd[0] if gfd else None, gfd_args=gfd[1] if gfd else None)
        where = f"example {example}, pool {pool}, device-plugin config {cfg_name!r}"
        assert v.ok, f"{where}: {v.component} rejects it: {v.error}"
        yield where, v, workloads


@pytest.mark.parametrize("example", _examples())
def test_example_pools_advertise_what_workloads_request(example):
    """`values --artifacts`: each pool's config on its MIG layout is accepted and the
    plugin advertises every GPU resource the pool's workloads request."""
    for where, v, workloads in _oracle_pools(example):
        for name, limits, _ in workloads:
            for res in limits:
                assert res in v.resources, (
                    f"{where}: workload {name} requests {res}; the device plugin advertises {v.resources}")


@pytest.mark.parametrize("example", _product_cases())
def test_example_gpu_product_affinity_matches_gfd(example):
    """Each workload's gpuProducts (its node affinity) holds the product label GFD puts
    on its pool's nodes."""
    for where, v, workloads in _oracle_pools(example):
        product = v.labels.get("nvidia.com/gpu.product")
        for name, _, products in workloads:
            if products:
                assert product in products, (
                    f"{where}: workload {name} needs nvidia.com/gpu.product in {products}; "
                    f"GFD labels the node {product!r}")


def test_plan_device_plugin_configs_accepted():
    """Every `gpuvalues plan` device-plugin config of every example, on its pool's MIG layout."""
    checked = 0
    # plan is for MIG and shared pools (the MIG/sharing planner); whole-GPU examples are
    # sized by values, and plan may refuse them (no model to plan, or a smaller pool).
    planned = [ex for ex in _examples()
               if ol.spec(ex).get("sharing", "whole") != "whole" or any(p.get("mig") for p in ol.spec(ex)["cluster"]["nodePools"])]
    assert planned, "no example has a MIG or shared pool"
    for ex in planned:
        out = ol.plan(ex)
        assert out is not None, f"gpuvalues plan {ex}: nothing to plan"
        pools = {p["name"]: p for p in ol.spec(ex)["cluster"]["nodePools"]}
        configs = out.get("device_plugin_configs") or {}
        for group in out.get("node_groups") or []:
            labels = group.get("labels") or {}
            name = labels.get("nvidia.com/device-plugin.config")
            if name is None:
                continue
            pool = pools[group["pool"]]
            mig = ol.mig_layout(out.get("mig_parted_config"), labels.get("nvidia.com/mig.config", ""),
                                pool["gpusPerNode"])
            hw = ol.hardware_for_gpu(pool["gpu"], pool["gpusPerNode"], mig)
            # With the chart's DaemonSet env (MPS_ROOT is required for MPS configs).
            env, args = ol.container_env_args(ol.rendered("platform-on"), "-device-plugin", "nvidia-device-plugin")
            v = ol.device_plugin(yaml.safe_dump(configs[name]), hw, plugin_env=env, plugin_args=args, gfd=False)
            assert v.ok, (f"gpuvalues plan {ex}: node group {group['name']}, device-plugin config {name!r}: "
                          f"{v.component}: {v.error}")
            checked += 1
    assert checked > 0, "no example's plan emitted a device-plugin config"


#: `nvidia-smi mig -lgip` of a real H200 141GB (NVIDIA/mig-parted#120), the names the
#: oracle's corrected H200 table (ci/oracle/deviceplugin/hardware.go h200) must give
H200_LGIP_NAMES = ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]


@pytest.mark.parametrize("profile", H200_LGIP_NAMES)
def test_h200_mig_names_are_a_real_h200s(profile):
    """go-nvlib names the oracle's H200 MIG profiles as a real H200 lists them (go-nvml's
    mock table alone named 1g.18gb `1g.35gb` and 3g.71gb `3g.88gb`), and the device
    plugin advertises the MIG device under that name."""
    hw = ol.hardware_for_gpu("H200-141GB", 1, {"0": [profile]})
    v = ol.device_plugin("version: v1\nflags:\n  migStrategy: mixed\n", hw, gfd=False)
    assert v.ok and v.resources == {f"nvidia.com/mig-{profile.split('+')[0]}": 1}, v.raw


def test_negative_control_h200_mock_names_are_gone():
    """The mock's own names for the same profiles are no H200 profile any more."""
    for name in ("3g.88gb", "4g.88gb"):
        hw = ol.hardware_for_gpu("H200-141GB", 1, {"0": [name]})
        v = ol.device_plugin("version: v1\nflags:\n  migStrategy: mixed\n", hw, gfd=False)
        assert not v.ok and f'unknown MIG profile "{name}"' in v.error, v.raw


# --- negative controls: configs upstream rejects make the check fail -----------------------

_WHOLE = {"gpu": "A100-SXM4-80GB", "count": 2}


@pytest.mark.parametrize(("text", "env", "upstream_message"), [
    ("version: v1\nflags:\n  migStrategy: bogus\n", {}, "unknown MIG strategy: bogus"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1\n",
     {}, "number of replicas must be >= 2"),
    ("version: v2\n", {}, "unknown version: v2"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: []\n", {}, "no resources specified"),
    ("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
     {}, "using MPS requires --mps-root to be specified"),
    ("version: v1\n", {"DEVICE_LIST_STRATEGY": "bogus"}, "invalid --device-list-strategy option"),
    ("version: v1\n", {"MIG_STRATEGY": "bogus"}, "unknown MIG strategy: bogus"),
], ids=["bad-mig-strategy", "replicas-1", "bad-version", "no-resources", "mps-without-root",
        "bad-device-list-strategy", "bad-mig-strategy-env"])
def test_negative_control_device_plugin_rejects(text, env, upstream_message):
    v = ol.device_plugin(text, _WHOLE, plugin_env=env, gfd=False)
    assert not v.ok and upstream_message in v.error, v.raw


def test_negative_control_unknown_field_is_ignored_upstream():
    """The plugin parses its config with sigs.k8s.io/yaml non-strictly (api/config/v1
    config.go parseConfigFrom): an unknown field is silently dropped, so the oracle cannot
    be the check for typos; the project's schema must be (recorded here so it is known)."""
    v = ol.device_plugin("version: v1\nflags:\n  migStrategy: none\nsharingg: {}\n", _WHOLE, gfd=False)
    assert v.ok and v.resources == {"nvidia.com/gpu": 2}


def test_negative_control_dead_shared_resource_detected():
    """A sharing resource that names a resource the node does not have is accepted by
    upstream and serves nothing; the chart check above must catch it."""
    cfg = {"version": "v1", "flags": {"migStrategy": "none"},
           "sharing": {"timeSlicing": {"renameByDefault": True,
                                       "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}}
    v = ol.device_plugin(yaml.safe_dump(cfg), _hardware_for_config(cfg), gfd=False)
    assert v.ok
    assert _advertised_name(cfg, cfg["sharing"]["timeSlicing"]["resources"][0], "timeSlicing") not in v.resources


def test_negative_control_mig_single_with_mixed_layout_fails():
    """mig-strategy single on a node with two MIG profiles: upstream refuses to start
    (internal/rm/device_map.go assertAllMigDevicesAreValid)."""
    hw = ol.hardware_for_gpu("A100-80GB", 2, {"0": ["1g.10gb"], "1": ["3g.40gb"]})
    v = ol.device_plugin("version: v1\nflags:\n  migStrategy: single\n", hw, gfd=False)
    assert not v.ok and "more than one MIG device type present on node" in v.error, v.raw


def test_oracle_output_is_json_with_upstream_config():
    """The oracle prints the finalized config as upstream marshals it (defaults applied)."""
    v = ol.device_plugin("version: v1\n", _WHOLE, gfd=False)
    assert v.plugin_config["flags"]["migStrategy"] == "none"
    assert v.plugin_config["flags"]["failOnInitError"] is True
    assert json.dumps(v.raw)


def test_the_oracle_leaves_no_mock_sysfs_behind(tmp_path):
    """Each run's mock sysfs tree (fakehost.go) lives in the call's own temporary
    directory and goes with it: the oracle once left 130 MB per run in /tmp."""
    import glob
    before = set(glob.glob("/tmp/oracle-sysfs-*"))
    v = ol.device_plugin(None, ol.hardware_for_gpu("A100-80GB", 2))
    assert v.ok, v.error
    assert set(glob.glob("/tmp/oracle-sysfs-*")) <= before


def test_oracle_reports_upstream_warnings():
    """Upstream logs config warnings through klog at v0.19.1 (api/config/v1 config.go
    DisableResourceNamingInConfig); the oracle hands them back, header stripped."""
    cfg = 'version: v1\nresources:\n  gpus:\n  - pattern: "*"\n    name: gpu\n'
    v = ol.device_plugin(cfg, ol.hardware_for_gpu("A100-80GB", 1))
    want = "Customizing the 'resources' field is not yet supported in the config. Ignoring..."
    assert v.ok and v.raw["plugin"]["warnings"] == [want] and v.raw["gfd"]["warnings"] == [want], v.raw
    assert ol.device_plugin("version: v1\n", ol.hardware_for_gpu("A100-80GB", 1)).raw["plugin"]["warnings"] is None
