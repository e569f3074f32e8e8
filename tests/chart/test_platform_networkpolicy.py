"""NetworkPolicies for every platform component that listens (issue 25): the DCGM exporter,
the Prometheus adapter, the endpoint picker and the remediation controller (whose /metrics
has no auth). Each policy must select exactly its component's pods, admit only ports those
pods name, and validate for Kubernetes; the switches follow `networkPolicy.enabled` unless
a component sets its own (the remediation controller's is on by default)."""
from __future__ import annotations

import pytest

from tests.chart.chartlib import HELMS, by_kind, k8s_errors, render, scenario_file
from tests.conftest import ROOT

GATEWAY = ROOT / "examples" / "values" / "gateway.yaml"
ALL_ON = {"networkPolicy.enabled": "true", "platform.remediation.enabled": "true"}
MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "Job")

# component -> (ports each rule admits, the peers of each rule by default)
EXPECTED = {
    "dcgm-exporter": [(["metrics"], MONITORING)],
    "prometheus-adapter": [(["https"], None)],          # any source: the API server
    "remediation": [(["metrics"], MONITORING)],
    "endpoint-picker": [(["grpc"], None), (["metrics"], MONITORING)],
}


def objects(helm_name: str, **set_values: str) -> list[dict]:
    return render(HELMS[helm_name], scenario_file("platform-on"), GATEWAY,
                  set_values=set_values)


def component(obj: dict) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def selected(policy: dict, objs: list[dict]) -> list[dict]:
    """Pod templates in the policy's namespace whose labels its podSelector matches."""
    want = policy["spec"]["podSelector"]["matchLabels"]
    return [o for o in objs if o["kind"] in WORKLOAD_KINDS
            and o["metadata"].get("namespace") == policy["metadata"].get("namespace")
            and want.items() <= o["spec"]["template"]["metadata"]["labels"].items()]


def platform_policies(objs: list[dict]) -> dict[str, dict]:
    return {component(p): p for p in by_kind(objs, "NetworkPolicy") if component(p) != "inference"}


@pytest.mark.parametrize("helm_name", ["helm", "helm3"])
def test_each_listening_component_is_policed(helm_name):
    objs = objects(helm_name, **ALL_ON)
    policies = platform_policies(objs)
    assert sorted(policies) == sorted(EXPECTED)
    for name, policy in policies.items():
        pods = selected(policy, objs)
        # exactly the component's own pods, nothing else in the release
        assert [component(o) for o in pods] == [name], (name, [o["metadata"]["name"] for o in pods])
        named = {p["name"] for c in pods[0]["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        rules = policy["spec"]["ingress"]
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert [([p["port"] for p in r["ports"]], r.get("from")) for r in rules] == EXPECTED[name]
        for r in rules:
            assert {p["port"] for p in r["ports"]} <= named, (name, named)
    assert k8s_errors(by_kind(objs, "NetworkPolicy"), "1.34") == []


def test_switches_follow_the_workload_policy():
    objs = objects("helm", **{"platform.remediation.enabled": "true"})
    # networkPolicy.enabled is off by default: only the remediation controller's is on
    assert sorted(platform_policies(objs)) == ["remediation"]
    objs = objects("helm", **ALL_ON, **{
        "platform.dcgmExporter.networkPolicy.enabled": "false",
        "platform.remediation.networkPolicy.enabled": "false"})
    assert sorted(platform_policies(objs)) == ["endpoint-picker", "prometheus-adapter"]


def test_peers_are_configurable():
    peers = '{"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}}'
    objs = render(HELMS["helm"], scenario_file("platform-on"), GATEWAY, set_values=ALL_ON,
                  values={"platform": {"dcgmExporter": {"networkPolicy": {"from": [{"podSelector": {
                      "matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]}},
                      "prometheusAdapter": {"networkPolicy": {"from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]}}},
                      "gateway": {"epp": {"networkPolicy": {"from": [{"namespaceSelector": {
                          "matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}}]}}},
                      "networkPolicy": {"metricsFrom": [{"namespaceSelector": {"matchLabels": {
                          "kubernetes.io/metadata.name": "observability"}}}]}})
    p = platform_policies(objs)
    assert p["dcgm-exporter"]["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "prometheus"}, peers
    assert p["prometheus-adapter"]["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert p["endpoint-picker"]["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "envoy-gateway-system"}
    observability = {"kubernetes.io/metadata.name": "observability"}
    for name in ("remediation", "endpoint-picker"):
        assert p[name]["spec"]["ingress"][-1]["from"][0]["namespaceSelector"]["matchLabels"] == observability


def test_the_selector_check_can_fail():
    """Negative control: a policy whose selector misses its pods is caught by `selected`."""
    objs = objects("helm", **ALL_ON)
    policy = platform_policies(objs)["dcgm-exporter"]
    broken = {**policy, "spec": {**policy["spec"], "podSelector": {"matchLabels": {
        "app.kubernetes.io/instance": "gi"}}}}
    assert len(selected(broken, objs)) > 1
