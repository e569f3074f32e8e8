"""The chart's default scaling metric and gpuvalues' metric choice are one rule.

The chart, used on its own, defaults to a GPU metric wherever one is attributable per pod
(issue 3: GPU_UTIL for whole GPUs and DRA, GR_ENGINE_ACTIVE for MIG) and to the server's
own metric under time-slicing/MPS. That is `choose_metric(mode, server, prefer="gpu")`,
falling back to the server metric (`prefer="auto"`) where GPU metrics are refused. The
values builder calls `choose_metric(..., prefer="auto")`, which prefers the vLLM queue on
whole GPUs, and always writes its metrics explicitly into values, so the two never meet
silently. This test renders every mode x server with empty `autoscaling.metrics` and
compares the HPA with the function.
"""
from __future__ import annotations

import pytest
import yaml

from gpuvalues.errors import CapacityError
from gpuvalues.planners.autoscaling.capacity import choose_metric
from tests.chart.chartlib import by_kind, template
from tests.chart.test_workload import _combo_values


def _values(mode: str, server: str) -> dict[str, str]:
    # The combination values of the chart's own tests, minus any explicit metric: the
    # point here is the default.
    v = _combo_values(mode, server, "hpa")
    return {k: x for k, x in v.items() if not k.startswith("autoscaling.metrics")}


def _expected(mode: str, server: str):
    try:
        return choose_metric(mode, server, prefer="gpu")
    except CapacityError:
        return choose_metric(mode, server, prefer="auto")


@pytest.mark.parametrize("mode", ["whole", "mig", "shared", "dra"])
@pytest.mark.parametrize("server", ["vllm", "triton", "custom"])
def test_chart_default_metric_is_choose_metric(helm4, mode, server):
    proc = template(helm4, set_values=_values(mode, server), kube_version="1.34.0")
    try:
        expected = _expected(mode, server)
    except CapacityError as exc:
        # No default exists (custom server on a shared GPU): the chart must refuse too.
        assert proc.returncode != 0, f"chart rendered a default gpuvalues refuses: {exc}"
        assert "autoscaling.metrics" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    (hpa,) = by_kind([d for d in yaml.safe_load_all(proc.stdout) if d], "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == expected.kind == "Pods"
    # The custom-metrics API name is the series name with ':' -> '_' (see the adapter rules).
    assert metric["pods"]["metric"]["name"] == expected.name.replace(":", "_")
    assert str(metric["pods"]["target"]["averageValue"]) == expected.target
