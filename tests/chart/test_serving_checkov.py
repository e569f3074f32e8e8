"""checkov on the serving features (examples/values/*.yaml, one release each, Helm 4): no
failed check except the chart's documented skips (checkov-skips.yaml) and the serving ones
(checkov-serving-skips.yaml, each limited to the objects it is about and still needed)."""
from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import template
from tests.chart.test_workload_checkov import ENV, SKIPS, _checkov
from tests.conftest import ROOT, TOOLS

EXAMPLES = sorted((ROOT / "examples" / "values").glob("*.yaml"))
SERVING_SKIPS = yaml.safe_load((Path(__file__).parent / "checkov-serving-skips.yaml").read_text())["skips"]


@lru_cache(maxsize=None)
def _run(tmp: str) -> dict:
    out = Path(tmp)
    for f in EXAMPLES:
        proc = template(str(TOOLS / "helm"), f, kube_version="1.35.0", release=f.stem)
        assert proc.returncode == 0, proc.stderr
        objs = [d for d in yaml.safe_load_all(proc.stdout) if d and d.get("kind") != "Pod"]  # helm test Pod
        (out / f"{f.stem}.yaml").write_text(yaml.safe_dump_all(objs, sort_keys=False))
    proc = subprocess.run([_checkov(), "-d", str(out), "--framework", "kubernetes", "-o", "json",
                           "--skip-download", "--compact"], capture_output=True, text=True, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    return (data[0] if isinstance(data, list) else data)["results"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _run(str(tmp_path_factory.mktemp("checkov-serving")))


def _serving_skip(f: dict):
    kind = f["resource"].split(".")[0]
    for s in SERVING_SKIPS:
        if s["id"] == f["check_id"] and kind in s["kinds"] and any(r in f["resource"] for r in s["resources"]):
            return s
    return None


def _chart_skip(f: dict):
    kind = f["resource"].split(".")[0]
    return next((s for s in SKIPS if s["id"] == f["check_id"] and kind in s.get("kinds", [kind])), None)


def test_checkov_evaluated_the_serving_objects(results):
    kinds = {c["resource"].split(".")[0] for c in results["passed_checks"]}
    assert {"Deployment", "Job", "Role", "ServiceAccount"} <= kinds, kinds
    assert len(results["passed_checks"]) >= 200


def test_no_failed_check_outside_the_documented_skips(results):
    unexpected = [f"{f['check_id']} {f['check_name']} on {f['resource']}" for f in results["failed_checks"]
                  if _serving_skip(f) is None and _chart_skip(f) is None]
    assert unexpected == []


def test_every_serving_skip_has_a_reason_and_is_still_needed(results):
    used = {(_serving_skip(f) or {}).get("id") for f in results["failed_checks"]}
    for s in SERVING_SKIPS:
        assert len(s["reason"]) > 40 and s["id"] in used, s["id"]
