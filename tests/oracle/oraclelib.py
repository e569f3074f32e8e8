"""Run the upstream oracle programs (ci/oracle) on what the project emits.

The programs are built by ci/oracle/build.sh into .cache/oracle/<component>-<version>/;
`ensure_built` runs that script (a no-op when cached). The project is reached only
through its CLI (`.venv/bin/gpuvalues`) and rendered files, never its modules."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ORACLE_DIR = ROOT / "ci" / "oracle"
CACHE = ROOT / ".cache" / "oracle"
CHART = ROOT / "charts" / "gpu-inference"
SCENARIOS = CHART / "ci"
EXAMPLES = ROOT / "examples"
HELM = ROOT / ".tools" / "bin" / "helm"
GPUVALUES = ROOT / ".venv" / "bin" / "gpuvalues"


def versions() -> dict[str, str]:
    """ci/oracle/versions.env as a dict."""
    out = {}
    for line in (ORACLE_DIR / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


@lru_cache(maxsize=None)
def ensure_built() -> Path:
    """Build (or find cached) the device-plugin oracle; returns its runner script."""
    proc = subprocess.run(["bash", str(ORACLE_DIR / "build.sh"), "deviceplugin"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"ci/oracle/build.sh failed:\n{proc.stderr[-4000:]}"
    runner = CACHE / f"deviceplugin-{deviceplugin_version()}" / "bin" / "run-deviceplugin.sh"
    assert runner.exists(), runner
    return runner


def deviceplugin_version() -> str:
    """The oracle's cache key as ci/oracle/build.sh names it: the plugin pin and a hash of
    the oracle's sources (`cat deviceplugin/*.go go.mod.in run-deviceplugin.sh | sha256sum`)."""
    d = ORACLE_DIR / "deviceplugin"
    files = sorted(d.glob("*.go")) + [d / "go.mod.in", ORACLE_DIR / "run-deviceplugin.sh"]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]
    return f"{versions()['DEVICE_PLUGIN_VERSION']}-{digest}"


@dataclass(frozen=True)
class Verdict:
    """What the device plugin and GFD did with one config on one node."""
    ok: bool
    error: str
    component: str
    resources: dict
    labels: dict
    plugin_config: dict
    raw: dict


def device_plugin(config_text: str | None, hardware: dict, *, plugin_env: dict | None = None,
                  plugin_args: list | None = None, gfd_env: dict | None = None,
                  gfd_args: list | None = None, gfd: bool = True) -> Verdict:
    """Feed one device-plugin config file (text) plus the DaemonSets' env/args to the
    real plugin and GFD code over the mock node `hardware` (ci/oracle/deviceplugin/hardware.go)."""
    runner = ensure_built()
    with tempfile.TemporaryDirectory() as tmp:
        req: dict = {"hardware": hardware,
                     "plugin": {"args": plugin_args or [], "env": dict(plugin_env or {})}}
        if gfd:
            req["gfd"] = {"args": gfd_args or [], "env": dict(gfd_env or {})}
        if config_text is not None:
            path = Path(tmp) / "config.yaml"
            path.write_text(config_text)
            req["configFile"] = str(path)
            # The DaemonSets point CONFIG_FILE at the config-manager's output; here the
            # file is ours (the --config-file flag wins over the env var anyway).
            for side in ("plugin", "gfd"):
                if side in req:
                    req[side]["env"].pop("CONFIG_FILE", None)
        # TMPDIR: the oracle's mock sysfs tree (fakehost.go) is made under it, so it goes
        # with this temporary directory (tests clean up after themselves)
        proc = subprocess.run([str(runner)], input=json.dumps(req), capture_output=True,
                              text=True, timeout=60, env={**os.environ, "TMPDIR": tmp})
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"oracle printed no JSON (rc {proc.returncode}):\n{proc.stderr[-3000:]}") from None
    if proc.returncode != 0:
        assert out.get("component") != "oracle-mock", f"oracle limit, not a verdict: {out['error']}"
        return Verdict(False, out["error"], out.get("component", ""), {}, {}, {}, out)
    plugin = out.get("plugin", {})
    return Verdict(True, "", "", plugin.get("resources", {}),
                   out.get("gfd", {}).get("labels", {}), plugin.get("config", {}), out)


# --- what the project emits -------------------------------------------------------------

@lru_cache(maxsize=None)
def rendered(scenario: str) -> tuple:
    """`helm template` (helm 4) of a chart ci/ scenario, in a non-default namespace."""
    proc = subprocess.run([str(HELM), "template", "gi", str(CHART), "--namespace", "gpu",
                           "--kube-version", "1.34.0", "--values", str(SCENARIOS / f"{scenario}-values.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{scenario}: {proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def container_env_args(objs, daemonset_suffix: str, container: str) -> tuple[dict, list] | None:
    """Literal env (valueFrom entries are per-pod facts: left out) and args of a container."""
    for o in objs:
        if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith(daemonset_suffix):
            for c in o["spec"]["template"]["spec"]["containers"]:
                if c["name"] == container:
                    env = {e["name"]: str(e["value"]) for e in c.get("env", []) if "value" in e}
                    return env, [str(a) for a in c.get("args", [])]
    return None


def device_plugin_configs(objs) -> dict[str, str]:
    """The named configs of the chart's device-plugin ConfigMap (name -> file text)."""
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-device-plugin-configs"):
            return dict(o.get("data") or {})
    return {}


def chart_scenarios() -> list[str]:
    return sorted(p.name[: -len("-values.yaml")] for p in SCENARIOS.glob("*-values.yaml"))


@lru_cache(maxsize=None)
def artifacts(example: str) -> dict:
    """`gpuvalues values EXAMPLE --artifacts DIR` outputs, parsed (name -> object)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([str(GPUVALUES), "-q", "values", str(EXAMPLES / example), "-o",
                               str(Path(tmp) / "values"), "--artifacts", str(Path(tmp) / "art")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{example}: {proc.stderr}"
        return {p.name: yaml.safe_load(p.read_text()) for p in (Path(tmp) / "art").glob("*.yaml")}


@lru_cache(maxsize=None)
def plan(example: str) -> dict | None:
    """`gpuvalues plan EXAMPLE --output json` (without the baselines); None when the
    spec has nothing to plan (the CLI's one-line refusal, exit 2). The node-side files
    (`node_side`: mig-parted config, device-plugin configs, node labels, node groups) are
    also given under mig_parted_config / device_plugin_configs / node_labels / node_groups."""
    proc = subprocess.run([str(GPUVALUES), "-q", "plan", str(EXAMPLES / example), "--output", "json",
                           "--no-baselines"], capture_output=True, text=True)
    if proc.returncode == 2 and "no models to plan for" in proc.stderr:
        return None
    assert proc.returncode == 0, f"{example}: {proc.stderr}"
    out = json.loads(proc.stdout)
    side = out.get("node_side") or {}
    for key, name in (("mig_parted_config", "mig-parted-config.yaml"),
                      ("device_plugin_configs", "device-plugin-configs.yaml"),
                      ("node_labels", "node-labels.yaml"), ("node_groups", "node-groups.yaml")):
        if name in side:
            out.setdefault(key, side[name])
    return out


def spec(example: str) -> dict:
    return yaml.safe_load((EXAMPLES / example).read_text())


# --- hardware descriptions ---------------------------------------------------------------

# The spec's GPU names (as users write them) -> the mock table of the same board.
# Non-MIG boards have no go-nvml table: name, memory and compute capability are the
# board's published values (NVIDIA product pages; CUDA compute capability list).
_NO_MIG = {
    "4090": {"gpu": "no-mig", "name": "NVIDIA GeForce RTX 4090", "memoryMiB": 24564,
             "cudaMajor": 8, "cudaMinor": 9},
    "L40S": {"gpu": "no-mig", "name": "NVIDIA L40S", "memoryMiB": 46068, "cudaMajor": 8, "cudaMinor": 9},
    "L4": {"gpu": "no-mig", "name": "NVIDIA L4", "memoryMiB": 23034, "cudaMajor": 8, "cudaMinor": 9},
}


def hardware_for_gpu(gpu: str, count: int, mig: dict | None = None) -> dict:
    """A hardware description for `count` GPUs of the spec's `gpu` model."""
    g = gpu.upper().replace("_", "-")
    if "4090" in g:
        hw = dict(_NO_MIG["4090"])
    elif "L40S" in g:
        hw = dict(_NO_MIG["L40S"])
    elif re.search(r"(^|[^A-Z0-9])L4($|[^0-9])", g):
        hw = dict(_NO_MIG["L4"])
    elif "H200" in g:
        # go-nvml's table calls it "NVIDIA H200 141GB HBM3e"; a real H200 SXM reports
        # "NVIDIA H200" (`nvidia-smi -q` Product Name, NVIDIA/mig-parted#120, the same node
        # whose `mig -lgip` corrects the table's MIG memory: ci/oracle/deviceplugin h200)
        hw = {"gpu": "H200-SXM5-141GB", "name": "NVIDIA H200"}
    elif "H100" in g:
        hw = {"gpu": "H100-SXM5-80GB"}
    elif "A100" in g and "40" in g:
        hw = {"gpu": "A100-SXM4-40GB"}
    elif "A100" in g:
        hw = {"gpu": "A100-SXM4-80GB"}
    else:
        raise AssertionError(f"no hardware description for GPU {gpu!r}: add one to oraclelib")
    hw["count"] = count
    if mig:
        hw["mig"] = mig
    return hw


def mig_layout(mig_parted_config: dict, config_name: str, count: int) -> dict | None:
    """Per-GPU MIG devices of one named mig-parted config (None: MIG off on every GPU)."""
    entries = (mig_parted_config or {}).get("mig-configs", {}).get(config_name)
    if not entries:
        return None
    out: dict[str, list[str]] = {}
    for e in entries:
        devices = range(count) if e.get("devices") == "all" else e.get("devices", [])
        if not e.get("mig-enabled"):
            continue
        for d in devices:
            out[str(d)] = [p for p, n in sorted((e.get("mig-devices") or {}).items()) for _ in range(n)]
    return out or None


# --- mig-parted ----------------------------------------------------------------------------

@lru_cache(maxsize=None)
def migparted_bin() -> Path:
    """The real nvidia-mig-parted CLI at MIG_PARTED_VERSION (built by ci/oracle/build.sh)."""
    proc = subprocess.run(["bash", str(ORACLE_DIR / "build.sh"), "migparted"], capture_output=True, text=True)
    assert proc.returncode == 0, f"ci/oracle/build.sh migparted failed:\n{proc.stderr[-4000:]}"
    return CACHE / f"migparted-{versions()['MIG_PARTED_VERSION']}" / "bin" / "migparted"


def migparted_assert_valid(config_text: str, selected: str) -> tuple[bool, str]:
    """`nvidia-mig-parted assert --valid-config -f FILE -c SELECTED`: (ok, upstream's message)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(config_text)
        proc = subprocess.run([str(migparted_bin()), "assert", "--valid-config", "-f", str(path),
                               "-c", selected], capture_output=True, text=True, timeout=30)
    msg = (proc.stdout + proc.stderr).strip()
    if 'msg="' in msg:     # logrus: level=fatal msg="..."
        msg = msg.split('msg="', 1)[1].rsplit('"', 1)[0]
    return proc.returncode == 0, msg


# --- prometheus-adapter ----------------------------------------------------------------------

@lru_cache(maxsize=None)
def adapter_bin() -> Path:
    """prometheus-adapter's discovery at ADAPTER_VERSION (ci/oracle/adapter)."""
    proc = subprocess.run(["bash", str(ORACLE_DIR / "build.sh"), "adapter"], capture_output=True, text=True)
    assert proc.returncode == 0, f"ci/oracle/build.sh adapter failed:\n{proc.stderr[-4000:]}"
    return CACHE / f"adapter-{versions()['ADAPTER_VERSION']}" / "bin" / "adapter"


def adapter_served(config_text: str, prometheus_url: str) -> dict:
    """The metrics prometheus-adapter serves for this config over this Prometheus:
    {"custom": [{"metric", "resource", "namespaced"}], "external": [...]} or {"error": ...}."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(config_text)
        proc = subprocess.run([str(adapter_bin()), "--config", str(path), "--prometheus-url", prometheus_url],
                              capture_output=True, text=True, timeout=60)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"adapter oracle printed no JSON (rc {proc.returncode}): {proc.stderr[-2000:]}") from None
    assert (proc.returncode == 0) == ("error" not in out), out
    return out


# --- KEDA ------------------------------------------------------------------------------------

def keda_version() -> str:
    for line in (ROOT / "ci" / "e2e" / "versions.env").read_text().splitlines():
        if line.startswith("KEDA_VERSION="):
            return line.split("=", 1)[1]
    raise AssertionError("no KEDA_VERSION in ci/e2e/versions.env")


@lru_cache(maxsize=None)
def keda_bin() -> Path:
    proc = subprocess.run(["bash", str(ORACLE_DIR / "build.sh"), "keda"], capture_output=True, text=True)
    assert proc.returncode == 0, f"ci/oracle/build.sh keda failed:\n{proc.stderr[-4000:]}"
    return CACHE / f"keda-{keda_version()}" / "bin" / "keda"


def keda_check(scaled_objects: list[dict]) -> list[dict]:
    """KEDA's strict decode + cluster-free webhook validations, one verdict per object."""
    proc = subprocess.run([str(keda_bin())], input=json.dumps(scaled_objects), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def promtool_check(exprs: dict[str, str]) -> tuple[bool, str]:
    """Parse PromQL expressions with the real Prometheus (`promtool check rules` on a rules
    file with one recording rule per expression); (ok, promtool's output)."""
    rules = {"groups": [{"name": "oracle", "rules": [
        {"record": f"oracle:expr{i}", "expr": e} for i, e in enumerate(exprs.values())]}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.yaml"
        path.write_text(yaml.safe_dump(rules))
        proc = subprocess.run([str(ROOT / ".tools" / "bin" / "promtool"), "check", "rules", str(path)],
                              capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    for i, name in enumerate(exprs):
        out = out.replace(f"oracle:expr{i}", name)
    return proc.returncode == 0, out
