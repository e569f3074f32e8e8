"""Many models behind one Gateway (issue 26), through the CLI and the real helm: `plan`
states the model names of every route, `render` writes routes that match exactly those
names on the body-based router's header, and a spec whose routes would take the same
requests is refused (GV050: one line, exit 2, nothing written). Expected names are written
from examples/multi-model-gateway.yaml's text."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import ROOT, run
from tests.unit.test_routing import HEADER, TWO, WANT, _spec

GV = str(ROOT / ".venv" / "bin" / "gpuvalues")
EXAMPLE = ROOT / "examples" / "multi-model-gateway.yaml"


def test_plan_states_the_model_names_of_every_route():
    proc = run([GV, "-q", "--output", "json", "plan", str(EXAMPLE)])
    assert proc.returncode == 0, proc.stderr
    routes = json.loads(proc.stdout)["routes"]
    assert {r["workload"]: r["models"] for r in routes} == WANT
    assert {(r["gateway"], r["header"]) for r in routes} == {("gateway-system/inference-gateway", HEADER)}
    table = run([GV, "-q", "plan", str(EXAMPLE)]).stdout
    assert "model (request body)" in table and "qwen-summarize" in table


def test_rendered_routes_match_exactly_their_names_and_nothing_else(tmp_path):
    proc = run([GV, "-q", "render", str(EXAMPLE), "-o", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    routes = {}
    for f in tmp_path.glob("*_httproute-*.yaml"):
        r = yaml.safe_load(f.read_text())
        (rule,) = r["spec"]["rules"]
        values = []
        for m in rule["matches"]:
            (h,) = m["headers"]
            assert (h["type"], h["name"]) == ("Exact", HEADER)
            values.append(h["value"])
        workload = r["metadata"]["labels"]["app.kubernetes.io/instance"]
        assert r["metadata"]["annotations"]["gpu-inference.io/model-names"] == ",".join(values)
        assert rule["backendRefs"][0]["name"] == f"{workload}-gpu-inference"
        routes[workload] = values
    assert routes == WANT
    # the platform release runs the router once, wired to that Gateway
    (policy,) = [yaml.safe_load(f.read_text()) for f in tmp_path.glob("gpu-platform_envoyextensionpolicy-*")]
    assert policy["metadata"]["namespace"] == "gateway-system"
    assert policy["spec"]["targetRefs"][0]["name"] == "inference-gateway"
    assert list(tmp_path.glob("gpu-platform_deployment-*-bbr.yaml"))
    assert list(tmp_path.glob("gpu-platform_referencegrant-*-bbr.yaml"))

@pytest.mark.parametrize("cmd", ["render", "values"])

def test_refusal_is_one_line_exit_2_no_output(tmp_path, cmd):
    spec = tmp_path / "spec.yaml"
    spec.write_text(_spec(TWO))
    out = tmp_path / "out"
    proc = run([GV, cmd, str(spec), "-o", str(out) + "/"])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "[GV050]" in lines[0] and f"{spec}:16:16:" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


PLATFORM = {"workload": {"enabled": False}, "autoscaling": {"engine": "none"},
            "platform": {"bodyBasedRouting": {"enabled": True}}}


def test_bbr_provider_none_renders_only_the_router_serving_tls(helm4):
    """provider none: no Envoy Gateway objects, and BBR keeps upstream's TLS serving."""
    from tests.chart.chartlib import render
    objs = render(helm4, values={**PLATFORM, "platform": {"bodyBasedRouting": {"enabled": True, "provider": "none"}}})
    kinds = sorted(o["kind"] for o in objs if o["metadata"]["name"].endswith("-bbr"))
    assert kinds == ["Deployment", "Service", "ServiceAccount"]
    (dep,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-bbr")]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--secure-serving=false" not in args and "--streaming" in args
    # same namespace as the Gateway (default): no ReferenceGrant with envoyGateway either
    objs = render(helm4, values=PLATFORM)
    assert sorted(o["kind"] for o in objs if o["metadata"]["name"].endswith("-bbr")) == [
        "Deployment", "EnvoyExtensionPolicy", "Service", "ServiceAccount"]


def test_chart_refuses_more_than_64_names_in_one_route(helm4):
    from tests.chart.chartlib import template
    adapters = [{"name": f"a{i}", "source": f"org/a{i}"} for i in range(64)]
    proc = template(helm4, values={"gateway": {"enabled": True}, "lora": {"adapters": adapters}})
    assert proc.returncode != 0 and "65 model names" in proc.stderr, proc.stderr
    proc = template(helm4, values={"gateway": {"enabled": True}, "lora": {"adapters": adapters[:63]}})
    assert proc.returncode == 0, proc.stderr
