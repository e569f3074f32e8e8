"""Platform hardening against upstream (issue 14): checkov's failed checks per platform
workload (device plugin with one and with several configs, both with the config-manager
init/sidecar; GFD; MPS control daemon; DCGM exporter; prometheus-adapter) are at most those
of the upstream chart at HEAD, recorded in data/upstream-checkov.yaml (measured once with the
same checkov; the upstream charts are not in this repository). Checkov is run per rendered
file (-f), as for the upstream numbers, from .tools/checkov-venv."""
from __future__ import annotations

import copy
import json
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import by_kind, render, rendered, scenario_file
from tests.chart.test_workload_checkov import ENV, _checkov

UPSTREAM = yaml.safe_load((Path(__file__).parent / "data" / "upstream-checkov.yaml").read_text())
# scenario -> {our workload's component: the upstream workload it is compared with}
COMPARED = {
    "platform-on": {"device-plugin": "device-plugin-single-config", "gpu-feature-discovery": "gpu-feature-discovery",
                    "dcgm-exporter": "dcgm-exporter", "prometheus-adapter": "prometheus-adapter"},
    "platform-mig-sharing": {"device-plugin": "device-plugin-multiple-configs",
                             "gpu-feature-discovery": "gpu-feature-discovery",
                             "mps-control-daemon": "mps-control-daemon",
                             "nfd-master": "nfd-master", "nfd-worker": "nfd-worker",
                             "mig-manager": "mig-manager"},
}


def platform_workloads(objs) -> list[dict]:
    return [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")
            and o["metadata"]["labels"].get("app.kubernetes.io/component") in
            {c for m in COMPARED.values() for c in m}]


def checkov_failures(objs: list[dict], tmp: Path, name: str) -> dict[str, set[str]]:
    """component -> failed check ids, from one checkov run on one file."""
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    proc = subprocess.run([_checkov(), "-f", str(f), "--framework", "kubernetes", "-o", "json",
                           "--skip-download", "--compact"], capture_output=True, text=True, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    data = data[0] if isinstance(data, list) else data
    assert len(data["results"]["passed_checks"]) >= 50 * len(objs) // 2, "checkov evaluated almost nothing"
    names = {f"{o['kind']}.{o['metadata']['namespace']}.{o['metadata']['name']}":
             o["metadata"]["labels"]["app.kubernetes.io/component"] for o in objs}
    out = {c: set() for c in names.values()}
    for c in data["results"]["failed_checks"]:
        if c["resource"] in names:
            out[names[c["resource"]]].add(c["check_id"])
    return out


@lru_cache(maxsize=None)
def _ours(scenario: str, tmp: str) -> dict[str, set[str]]:
    objs = [o for o in platform_workloads(list(rendered("helm", scenario)))
            if o["metadata"]["labels"]["app.kubernetes.io/component"] in COMPARED[scenario]]
    assert {o["metadata"]["labels"]["app.kubernetes.io/component"] for o in objs} == set(COMPARED[scenario])
    return checkov_failures(objs, Path(tmp), scenario)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("platform-checkov"))


def test_upstream_baseline_is_recorded_with_its_source():
    assert UPSTREAM["checkov"] == "3.3.30"
    for w in UPSTREAM["workloads"].values():
        src = UPSTREAM["charts"][w["chart"]]
        assert len(src["commit"]) == 40 and src["repo"] and src["path"]
        assert w["failed"] == sorted(set(w["failed"]))


def test_checkov_is_the_recorded_version():
    out = subprocess.run([_checkov(), "--version"], capture_output=True, text=True, env=ENV).stdout
    assert out.strip() == UPSTREAM["checkov"]


@pytest.mark.parametrize("scenario, component", [(s, c) for s, m in COMPARED.items() for c in m])
def test_failures_at_or_below_upstream(tmp, scenario, component):
    ours = _ours(scenario, tmp)[component]
    upstream = set(UPSTREAM["workloads"][COMPARED[scenario][component]]["failed"])
    assert len(ours) <= len(upstream), (sorted(ours - upstream), len(ours), len(upstream))


def test_device_plugin_is_compared_with_its_config_manager_containers():
    for scenario in COMPARED:
        (dp,) = [o for o in platform_workloads(list(rendered("helm", scenario)))
                 if o["metadata"]["labels"]["app.kubernetes.io/component"] == "device-plugin"]
        spec = dp["spec"]["template"]["spec"]
        assert [c["name"] for c in spec["initContainers"]] == ["config-manager-init"]
        assert "config-manager" in [c["name"] for c in spec["containers"]]


def test_negative_control_unhardened_exporter_exceeds_upstream(tmp):
    """The comparison can fail: the exporter without its resources and with only SYS_ADMIN
    added (this chart before issue 14) fails more checks than upstream's."""
    (ds,) = [o for o in platform_workloads(list(rendered("helm", "platform-on")))
             if o["metadata"]["labels"]["app.kubernetes.io/component"] == "dcgm-exporter"]
    ds = copy.deepcopy(ds)
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    del c["resources"]
    c["securityContext"] = {"runAsNonRoot": False, "runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}}
    failed = checkov_failures([ds], Path(tmp), "unhardened")["dcgm-exporter"]
    assert len(failed) > len(UPSTREAM["workloads"]["dcgm-exporter"]["failed"]), sorted(failed)


def _containers(o):
    spec = o["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


@pytest.mark.parametrize("scenario", sorted(COMPARED))
def test_every_platform_container_has_requests_and_limits(helm, scenario):
    for o in platform_workloads(render(helm, scenario_file(scenario))):
        for c in _containers(o):
            r = c.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(r.get(kind, {})), (o["metadata"]["name"], c["name"], r)


@pytest.mark.parametrize("scenario", sorted(COMPARED))
def test_least_privilege_where_upstream_runs_it(helm, scenario):
    for o in platform_workloads(render(helm, scenario_file(scenario))):
        for c in _containers(o):
            sc = c.get("securityContext", {})
            if sc.get("privileged"):
                # GFD, the MPS daemon and mig-manager run privileged upstream too (vGPU
                # info, MPS mounts; MIG mode changes and host reboots).
                assert c["name"] in {"gpu-feature-discovery", "mps-control-daemon", "mps-mounts",
                                     "nvidia-mig-manager"}, c["name"]
                continue
            assert sc.get("allowPrivilegeEscalation") is False, (o["metadata"]["name"], c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (o["metadata"]["name"], c["name"])
            assert set(sc["capabilities"].get("add", [])) <= {"SYS_ADMIN"}, c["name"]
            if c["name"].startswith("config-manager"):
                assert "add" not in sc["capabilities"], "config-manager needs no capability"


def test_sys_admin_only_where_needed(helm4):
    objs = render(helm4, values={"platform": {"devicePlugin": {"enabled": True}, "dcgmExporter": {
        "enabled": True, "profiling": False}}})
    for o in by_kind(objs, "DaemonSet"):
        for c in _containers(o):
            assert "add" not in c["securityContext"]["capabilities"], (o["metadata"]["name"], c["name"])
