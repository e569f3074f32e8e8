"""The API server's own rules judge the port of them in tests/chart/test_validate_vs_render.py
(issue 25): each case of that corpus that helm renders with the schema skipped goes to a
REAL kube-apiserver (`kubectl apply --dry-run=server` of helm's output: helm's own
`--dry-run=server` only lets templates look objects up, it sends none), which
must refuse it exactly when `api_server_errors` says it would (object names, label keys
and values, container resource names, subPaths). Gateway cases are left out: the e2e
control plane has no Gateway API or InferencePool CRDs (their schemas judge those cases
in the chart test). Marked e2e: it FAILS, never skips, without the control plane."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import HELMS, parse
from tests.chart.test_validate_vs_render import HOSTILE, VALID, api_server_errors
from tests.conftest import CHART, TOOLS
from tests.e2e.test_server_side_apply import apiserver  # noqa: F401  (the fixture)

pytestmark = pytest.mark.e2e

CASES = {k: v for k, v in {**HOSTILE, **VALID}.items() if "gateway" not in v}


def helm(args: list[str], values: dict) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        return subprocess.run([HELMS["helm"], *args, str(CHART), "--namespace", "inference",
                               "--skip-schema-validation", "--values", str(f)],
                              capture_output=True, text=True)


def test_the_api_server_refuses_what_the_port_says(apiserver):  # noqa: F811
    judged, disagree = 0, []
    for case, values in sorted(CASES.items()):
        proc = helm(["template", "gi", "--kube-version", "1.35.0"], values)
        if proc.returncode:
            continue        # refused by helm or a chart rule: no object reaches the API server
        port = [e for obj in parse(proc.stdout) for e in api_server_errors(obj)]
        if not port and case in HOSTILE:
            continue        # refused by another consumer (the Hub): nothing for the port to say
        real = subprocess.run([str(TOOLS / "kubectl"), "apply", "--dry-run=server", "-f", "-"], input=proc.stdout, capture_output=True, text=True,
                              env=apiserver)
        judged += 1
        if bool(port) != (real.returncode != 0):
            disagree.append((case, port, real.stderr.strip()[-300:]))
    assert disagree == [], disagree
    assert judged >= 20, judged
