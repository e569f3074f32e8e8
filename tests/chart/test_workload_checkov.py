"""Workload policy checks with checkov (a maintained checker, installed by ci/setup.sh into
.tools/checkov-venv): every scenario rendered by Helm 4 into one directory, one checkov run,
no failed check except those listed with a reason in tests/chart/checkov-skips.yaml.
The GPU-specific rules checkov does not know (probes distinct, PDB not blocking, no
replicas under an autoscaler, HPA min >= 2) are in test_workload.py::policy_violations."""
from __future__ import annotations

import json
import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import template
from tests.chart.test_workload import SCENARIOS, min_minor, ours, scenario_file
from tests.conftest import ROOT, TOOLS

CHECKOV = ROOT / ".tools" / "checkov-venv" / "bin" / "checkov"
SKIPS = yaml.safe_load((Path(__file__).parent / "checkov-skips.yaml").read_text())["skips"]
# Offline: no guideline download, no platform mapping (the network only reaches registries).
ENV = dict(os.environ, BC_SKIP_MAPPING="TRUE", CHECKOV_SKIP_DOWNLOAD="1", LOG_LEVEL="WARNING")


def _checkov():
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: run ci/setup.sh")
    return str(CHECKOV)


@lru_cache(maxsize=None)
def _run(tmp: str) -> dict:
    out = Path(tmp)
    for s in SCENARIOS:
        # One release per scenario: checkov evaluates all files as one graph, and a
        # NetworkPolicy of one release must not cover another's pods.
        proc = template(str(TOOLS / "helm"), scenario_file(s), kube_version=f"1.{max(min_minor(s), 34)}.0",
                        release=s)
        assert proc.returncode == 0, proc.stderr
        objs = ours([d for d in yaml.safe_load_all(proc.stdout) if d])
        (out / f"{s}.yaml").write_text(yaml.safe_dump_all(objs, sort_keys=False))
    proc = subprocess.run([_checkov(), "-d", str(out), "--framework", "kubernetes", "-o", "json",
                           "--skip-download", "--compact"], capture_output=True, text=True, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    data = data[0] if isinstance(data, list) else data
    return data["results"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _run(str(tmp_path_factory.mktemp("checkov")))


def _skip_for(failure: dict):
    kind = failure["resource"].split(".")[0]
    for s in SKIPS:
        if s["id"] == failure["check_id"] and kind in s.get("kinds", [kind]):
            return s
    return None


def test_checkov_ran_the_kubernetes_checks(results):
    # It really evaluated our objects: hundreds of passed checks, including the security ones.
    passed = {c["check_id"] for c in results["passed_checks"]}
    assert len(results["passed_checks"]) >= 200
    for cid in ("CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_40",
                "CKV_K8S_10", "CKV_K8S_11", "CKV_K8S_12", "CKV_K8S_13", "CKV_K8S_14", "CKV_K8S_8", "CKV_K8S_9"):
        assert cid in passed, cid


def test_no_failed_check_outside_the_documented_skips(results):
    unexpected = [f"{f['check_id']} {f['check_name']} on {f['resource']} ({f['file_path']})"
                  for f in results["failed_checks"] if _skip_for(f) is None]
    assert unexpected == []


def test_every_skip_has_a_reason_and_is_still_needed(results):
    used = {(_skip_for(f) or {}).get("id") for f in results["failed_checks"]}
    for s in SKIPS:
        assert len(s.get("reason", "")) > 40, s["id"]
        assert s["id"] in used, f"{s['id']} no longer fails: remove it from checkov-skips.yaml"


def test_network_policy_satisfies_checkov_where_enabled(results):
    # whole-hpa enables networkPolicy: CKV2_K8S_6 fails for the other scenarios, not for it.
    # (only the helm-test client Pod, which no ingress policy needs to select, still shows up).
    fails = [(Path(f["file_path"]).name, f["resource"]) for f in results["failed_checks"]
             if f["check_id"] == "CKV2_K8S_6"]
    assert [r for file, r in fails if file == "whole-hpa.yaml"] == ["Pod.inference.whole-hpa-gpu-inference-test-ready"]
    assert len([r for file, r in fails if file == "minimal.yaml"]) == 2
