"""mig-parted's own config selection (ci/oracle/migmanager, what the day-1 e2e's
mig-manager applies to a node's mock GPUs) on every example's printed mig-parted config:
each node group's `nvidia.com/mig.config` must give, on GPUs as they ship (MIG off), the
plan's MIG layout for that group. The plan is the project's claim; mig-parted judges it."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

import gpuvalues
from tests.conftest import ROOT
from tests.e2e import nodeagent
from tests.oracle import oraclelib as ol

MIG_EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.yaml")
                      if any(g.mig_devices for g in gpuvalues.build_fleet(gpuvalues.load_spec(p)).layout.node_groups))


def _apply(config: str, selected: str, hw: dict, tmp_path) -> tuple[int, dict]:
    f = tmp_path / "config.yaml"
    f.write_text(config)
    proc = subprocess.run([str(nodeagent.migmanager_bin())], input=json.dumps(
        {"configFile": str(f), "selectedConfig": selected, "gpus": nodeagent.mig_gpus(hw)}),
        capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_there_are_mig_examples():
    assert len(MIG_EXAMPLES) >= 2, MIG_EXAMPLES


@pytest.mark.parametrize("example", MIG_EXAMPLES)
def test_mig_parted_applies_the_plan(example, tmp_path):
    fleet = gpuvalues.build_fleet(gpuvalues.load_spec(ROOT / "examples" / f"{example}.yaml"))
    config = yaml.safe_dump(fleet.node_side()["mig-parted-config.yaml"])
    pools = {p.name: p for p in fleet.spec.node_pools}
    checked = 0
    for g in fleet.layout.node_groups:
        selected = g.labels.get(nodeagent.MIG_CONFIG_LABEL)
        if not selected:
            continue
        pool = pools[g.pool]
        hw = ol.hardware_for_gpu(pool.gpu.name, pool.gpus_per_node)
        rc, out = _apply(config, selected, hw, tmp_path)
        assert rc == 0, (g.name, out)
        got = nodeagent.apply_mig(hw, out["gpus"]).get("mig") or {}
        plan = {str(i): [p for p, n in sorted(d.items()) for _ in range(n)]
                for i, d in enumerate(g.mig_devices or ()) if d}
        assert got == plan, (g.name, got, plan)
        checked += 1
    assert checked, f"{example}: no node group selects a mig-parted config"


def test_negative_control_unknown_config_and_non_mig_gpu(tmp_path):
    """mig-parted's own errors: a config name not in the file, and MIG on a GPU without MIG."""
    config = yaml.safe_dump({"version": "v1", "mig-configs": {
        "all-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "gpu0-1g": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.24gb": 4}}]}})
    rc, out = _apply(config, "nope", {"gpu": "A100-SXM4-80GB", "count": 2}, tmp_path)
    assert rc == 1 and "selected mig-config not present: nope" in out["error"], out
    # devices: all on a non-MIG GPU is skipped (apply/mode.go), an index is refused
    l4 = {"gpu": "no-mig", "name": "NVIDIA L4", "count": 2}
    rc, out = _apply(config, "all-1g", l4, tmp_path)
    assert rc == 0 and not any(g["migEnabled"] for g in out["gpus"]), out
    rc, out = _apply(config, "gpu0-1g", l4, tmp_path)
    assert rc == 1 and "cannot set MIG mode on non MIG-capable GPU" in out["error"], out
