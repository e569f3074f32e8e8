"""Rules the chart enforces with `fail` and gpuvalues checks in Python must agree: the same
generated values pass or fail both (templates/validation.yaml vs gpuvalues.checks.rules)."""
from __future__ import annotations

import itertools

import pytest

from gpuvalues.checks.rules import semantic_findings
from tests.chart.chartlib import template

# (replicas floor, minAvailable, maxUnavailable): counts, percentages, both edges
PDB_CASES = [(r, m, u) for r, m, u in itertools.product(
    (1, 2, 3), (None, 1, 2, "50%", "67%", "100%"), (None, 0, 1, "0%", "50%"))
    if not (m is not None and u is not None)]      # the schema allows one of the two


@pytest.mark.parametrize("replicas, min_available, max_unavailable", PDB_CASES,
                         ids=lambda x: str(x))
def test_pdb_rule_chart_and_python_agree(helm4, replicas, min_available, max_unavailable):
    values = {"autoscaling": {"engine": "hpa", "minReplicas": replicas, "maxReplicas": 4},
              "pdb": {"enabled": True, "minAvailable": min_available,
                      "maxUnavailable": max_unavailable}}
    proc = template(helm4, values=values)
    chart_refuses = proc.returncode != 0 and "pdb." in proc.stderr
    assert proc.returncode == 0 or chart_refuses, proc.stderr      # no other failure
    python_refuses = any(f.code == "GV004" for f in semantic_findings(values))
    assert chart_refuses == python_refuses, (values, proc.stderr.strip()[-200:])


def test_the_agreement_check_can_fail(helm4):
    """Negative control: the case the two disagreed on before (50% of 1 replica) is a
    refusal on both sides, so a regression in either shows up above."""
    values = {"autoscaling": {"engine": "hpa", "minReplicas": 1, "maxReplicas": 4},
              "pdb": {"enabled": True, "minAvailable": "50%", "maxUnavailable": None}}
    assert template(helm4, values=values).returncode != 0
    assert [f.code for f in semantic_findings(values)] == ["GV004"]


@pytest.mark.parametrize("name", ["HF_TOKEN", "hf_token", "MY_API_KEY", "APIKEY", "API-KEY",
                                  "DB_PASSWORD", "SECRETARY", "LOG_LEVEL", "VLLM_PORT"])
def test_literal_credential_rule_helm_and_validate_agree(helm4, name):
    # one home: values.schema.json $defs.envVar "not"; helm's Go regexp and the Python
    # schema check must read its pattern alike (issue 23: validate passed what render refused)
    from gpuvalues.yamlio.loader import Loaded
    from gpuvalues.checks.rules import check_values, errors_only
    values = {"extraEnv": [{"name": name, "value": "x"}]}
    proc = template(helm4, values=values)
    assert proc.returncode == 0 or "'not' failed" in proc.stderr, proc.stderr
    loaded = Loaded(values, "v", "", {}, {}, ())
    assert (proc.returncode != 0) == bool(errors_only(check_values(loaded))), name
