"""Every ScaledObject the project emits, decoded strictly with KEDA's own v1alpha1 types
and run through the webhook's cluster-free validations (ci/oracle/keda); the PromQL of
every KEDA trigger and every prometheus-adapter rule (expanded as the adapter expands it)
parsed by the real Prometheus (promtool)."""
from __future__ import annotations

import copy
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.integration.test_platform_prometheus import expand
from tests.oracle import oraclelib as ol


def _releases():
    """(where, objects) of every chart scenario and every example release."""
    out = [(f"chart scenario {s}", list(ol.rendered(s))) for s in ol.chart_scenarios()]
    for ex in sorted(p.name for p in ol.EXAMPLES.glob("*.yaml")):
        with tempfile.TemporaryDirectory() as tmp:
            v = Path(tmp) / "v"
            proc = subprocess.run([str(ol.GPUVALUES), "-q", "values", str(ol.EXAMPLES / ex), "-o", str(v)],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            for f in ([v] if v.is_file() else sorted(v.glob("*.values.yaml"))):
                p = subprocess.run([str(ol.HELM), "template", "gi", str(ol.CHART), "--namespace", "inference",
                                    "--kube-version", "1.34.0", "--values", str(f)], capture_output=True, text=True)
                assert p.returncode == 0, p.stderr
                out.append((f"example {ex} ({f.name})", [d for d in yaml.safe_load_all(p.stdout) if d]))
    return out


_RELEASES = _releases()
_SCALED = [(w, o) for w, objs in _RELEASES for o in objs if o["kind"] == "ScaledObject"]


def test_every_scaled_object_passes_keda():
    assert _SCALED, "no release renders a ScaledObject"
    verdicts = ol.keda_check([o for _, o in _SCALED])
    for (where, o), v in zip(_SCALED, verdicts):
        assert v["ok"], f"{where}: ScaledObject {o['metadata']['name']}: KEDA rejects it: {v['error']}"


def test_every_trigger_and_adapter_query_parses_in_prometheus():
    exprs = {}
    for where, objs in _RELEASES:
        for o in objs:
            if o["kind"] == "ScaledObject":
                for i, t in enumerate(o["spec"]["triggers"]):
                    if t["type"] == "prometheus":
                        exprs[f"{where} ScaledObject {o['metadata']['name']} trigger {i}"] = t["metadata"]["query"]
            if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-prometheus-adapter"):
                cfg = yaml.safe_load(o["data"]["config.yaml"])
                for i, rule in enumerate(cfg.get("rules") or []):
                    for pods in (["p1"], ["p1", "p2"]):
                        exprs[f"{where} adapter rule {i} ({len(pods)} pods)"] = expand(rule, "inference", pods)
    assert any("trigger" in k for k in exprs) and any("adapter" in k for k in exprs), sorted(exprs)
    ok, out = ol.promtool_check(exprs)
    assert ok, f"promtool rejects a query:\n{out}"


# --- negative controls -----------------------------------------------------------------------

def _base():
    return copy.deepcopy(_SCALED[0][1])


def _bad(f):
    o = _base()
    f(o)
    return o


@pytest.mark.parametrize(("obj", "message"), [
    (_bad(lambda o: o["spec"].update({"minReplicaCount": 5, "maxReplicaCount": 2})),
     "MinReplicaCount=5 must be less than MaxReplicaCount=2"),
    (_bad(lambda o: o["spec"].update({"triggerz": []})), 'unknown field "triggerz"'),
    (_bad(lambda o: o["spec"]["triggers"][0].update({"metadataa": {}})), 'unknown field "metadataa"'),
    (_bad(lambda o: (o["spec"].update({"triggers": []}), o["spec"].pop("fallback", None))), "no triggers defined"),
    (_bad(lambda o: o["spec"].update({"triggers": [dict(o["spec"]["triggers"][0], name="t"),
                                                    dict(o["spec"]["triggers"][0], name="t")]})),
     "triggerName \"t\" is defined multiple times"),
    (_bad(lambda o: o["spec"].update({"fallback": {"failureThreshold": 3, "replicas": 1},
                                      "triggers": [{"type": "cpu", "metricType": "Utilization",
                                                    "metadata": {"value": "50"}}]})),
     "fallback"),
], ids=["min-gt-max", "unknown-spec-field", "unknown-trigger-field", "no-triggers", "duplicate-trigger-name",
        "fallback-cpu-only"])
def test_negative_control_keda_rejects(obj, message):
    (v,) = ol.keda_check([obj])
    assert not v["ok"] and message.lower() in v["error"].lower(), v


def test_negative_control_promtool_rejects_bad_promql():
    ok, out = ol.promtool_check({"broken": "sum(rate(vllm:num_requests_waiting[1m])"})
    assert not ok and "broken" in out
