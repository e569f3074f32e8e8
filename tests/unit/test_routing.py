"""Many models behind one Gateway (issue 26), at the spec: the refusals of routes that
would take the same requests (GV050), too many names for one rule (GV051) and one router
for Gateways in several namespaces (GV052). Expected names are written from the example's
text, not computed by the code under test."""
from __future__ import annotations

from gpuvalues import pipeline
from gpuvalues.checks.spec import check_spec
from gpuvalues.yamlio.loader import load_text
from tests.conftest import ROOT

HEADER = "X-Gateway-Model-Name"
# what the example's comment promises a client
WANT = {
    "llama-8b": ["meta-llama/Llama-3.1-8B-Instruct", "sql", "support"],
    "qwen-7b": ["Qwen/Qwen2.5-7B-Instruct", "qwen-summarize"],
    "mistral-7b": ["mistralai/Mistral-7B-Instruct-v0.3"],
}


def findings(text: str):
    return check_spec(load_text(text, "spec.yaml"))


def _spec(workloads: str, gateway: str = "{name: gw, namespace: gateway-system}") -> str:
    return f"""apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {{name: h100, gpu: H100-80GB-SXM, gpusPerNode: 8, nodes: 1}}
workloads:
{workloads}
gateway: {gateway}
"""


TWO = """  - name: a
    model: org/base-a
    memoryGB: 20
    lora:
      - {name: shared, source: org/x}
  - name: b
    model: org/base-b
    memoryGB: 20
    lora:
      - {name: mine, source: org/y}
      - {name: shared, source: org/z}
"""


def test_gv050_an_adapter_name_two_workloads_serve_at_the_second():
    (f,) = [f for f in findings(_spec(TWO)) if f.code == "GV050"]
    assert (f.line, f.column, f.path) == (16, 16, "workloads[1].lora[1].name")
    assert "'shared'" in f.message and "'a'" in f.message


def test_gv050_one_model_served_by_two_workloads():
    text = _spec(TWO.replace("model: org/base-b", "model: org/base-a"))
    (f,) = [f for f in findings(text) if f.code == "GV050" and f.path.endswith(".model")]
    assert (f.line, f.path) == (12, "workloads[1].model")


def test_negative_control_distinct_names_or_other_gateways_pass():
    assert not [f for f in findings(_spec(TWO.replace("name: shared, source: org/z", "name: own, source: org/z")))
                if f.code.startswith("GV05")]
    # Triton workloads get no route: a shared name with one is no conflict
    triton = TWO.replace("  - name: b\n    model: org/base-b", "  - name: b\n    server: triton\n    model: org/base-b")
    assert not [f for f in findings(_spec(triton)) if f.code == "GV050"]


def test_gv052_gateway_without_namespace_over_several_namespaces():
    ns = TWO.replace("  - name: b\n", "  - name: b\n    namespace: other\n")
    got = findings(_spec(ns, "{name: gw}"))
    assert [f.code for f in got if f.code.startswith("GV05")] == ["GV052"]   # two Gateways: no GV050
    assert not [f for f in findings(_spec(ns, "{name: gw, bodyBasedRouting: false}")) if f.code == "GV052"]


def test_gv051_more_names_than_one_rule_holds():
    adapters = "".join(f"      - {{name: a{i}, source: org/a{i}}}\n" for i in range(64))
    text = _spec(f"  - name: a\n    model: org/base\n    memoryGB: 20\n    lora:\n{adapters}")
    assert [f.code for f in findings(text) if f.code.startswith("GV05")] == ["GV051"]
    ok = _spec(f"  - name: a\n    model: org/base\n    memoryGB: 20\n    lora:\n{adapters[: adapters.rindex('      -')]}")
    assert not [f for f in findings(ok) if f.code.startswith("GV05")]


def test_no_gateway_no_routes():
    spec = pipeline.fleet_of(ROOT / "examples" / "single-a100.yaml").spec
    assert pipeline.routes_data(spec) == []


def test_gv051_in_a_values_file_as_the_chart_refuses_it(tmp_path):
    """validate --values refuses what the chart's validation.yaml refuses (65 names)."""
    adapters = "".join(f"    - {{name: a{i}, source: org/a{i}}}\n" for i in range(64))
    path = tmp_path / "values.yaml"
    path.write_text(f"gateway: {{enabled: true}}\nlora:\n  adapters:\n{adapters}")
    assert [f.code for f in pipeline.check(values=str(path)) if f.code == "GV051"] == ["GV051"]
    path.write_text(f"gateway: {{enabled: true}}\nlora:\n  adapters:\n{adapters[: adapters.rindex('    -')]}")
    assert not [f for f in pipeline.check(values=str(path)) if f.code == "GV051"]
