"""The body-based router's NetworkPolicy (issue 26): only the Gateway's proxy pods reach its
ext_proc port. By default (provider envoyGateway) the proxies are the pods Envoy Gateway
v1.6.0 labels for the Gateway (internal/infrastructure/kubernetes/proxy/resource.go
EnvoyAppLabel, internal/gatewayapi/helpers.go GatewayOwnerLabels), in any namespace; the
selectors are values; provider none needs one. Validated for Kubernetes and by helm lint,
with helm 4 and 3."""
from __future__ import annotations

import pytest
import yaml

from tests.chart.chartlib import HELMS, KUBE_MINORS, by_kind, k8s_errors, render, template
from tests.conftest import CHART, run

BBR = {"workload": {"enabled": False}, "autoscaling": {"engine": "none"},
       "platform": {"bodyBasedRouting": {"enabled": True, "gateway": {"name": "gw", "namespace": "edge"},
                                         "networkPolicy": {"enabled": True}}}}


def with_bbr(**np) -> dict:
    v = yaml.safe_load(yaml.safe_dump(BBR))
    v["platform"]["bodyBasedRouting"]["networkPolicy"].update(np)
    return v


def bbr_policy(objs: list[dict]) -> dict:
    (np,) = [o for o in by_kind(objs, "NetworkPolicy") if o["metadata"]["name"].endswith("-bbr")]
    return np


@pytest.mark.parametrize("helm_name", ["helm", "helm3"])
def test_only_the_gateways_proxies_reach_ext_proc(helm_name):
    objs = render(HELMS[helm_name], values=BBR)
    np = bbr_policy(objs)
    (dep,) = [o for o in by_kind(objs, "Deployment") if o["metadata"]["name"].endswith("-bbr")]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    # it selects the router only: no other workload of the release carries its labels
    others = [o for o in objs if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet") and o is not dep
              and np["spec"]["podSelector"]["matchLabels"].items() <= o["spec"]["template"]["metadata"]["labels"].items()]
    assert others == []
    grpc, metrics = np["spec"]["ingress"]
    assert grpc["ports"] == [{"port": "grpc", "protocol": "TCP"}]
    named = {p["name"]: p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert named["grpc"] == 9004                        # the ext_proc port the Service sends to
    assert grpc["from"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/component": "proxy", "app.kubernetes.io/managed-by": "envoy-gateway",
        "gateway.envoyproxy.io/owning-gateway-name": "gw", "gateway.envoyproxy.io/owning-gateway-namespace": "edge"}},
        "namespaceSelector": {}}]
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}] and metrics["from"]
    assert np["spec"]["policyTypes"] == ["Ingress"]
    for minor in KUBE_MINORS:
        assert k8s_errors([np], minor) == []


@pytest.mark.parametrize("helm_name", ["helm", "helm3"])
def test_selectors_are_values_and_lint_strict(helm_name, tmp_path):
    sel = {"matchLabels": {"app": "my-proxy"}}
    ns = {"matchLabels": {"kubernetes.io/metadata.name": "proxies"}}
    values = with_bbr(podSelector=sel, namespaceSelector=ns)
    values["platform"]["bodyBasedRouting"]["provider"] = "none"
    np = bbr_policy(render(HELMS[helm_name], values=values))
    assert np["spec"]["ingress"][0]["from"] == [{"podSelector": sel, "namespaceSelector": ns}]
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(values))
    res = run([HELMS[helm_name], "lint", "--strict", str(CHART), "-f", str(f), "--namespace", "inference"])
    assert res.returncode == 0, res.stdout + res.stderr


def test_off_by_default_follows_the_release_switch_and_provider_none_needs_a_selector():
    helm = HELMS["helm"]
    off = with_bbr()
    off["platform"]["bodyBasedRouting"]["networkPolicy"]["enabled"] = None
    assert not [o for o in by_kind(render(helm, values=off), "NetworkPolicy") if o["metadata"]["name"].endswith("-bbr")]
    off["networkPolicy"] = {"enabled": True}
    assert bbr_policy(render(helm, values=off))
    none = with_bbr()
    none["platform"]["bodyBasedRouting"]["provider"] = "none"
    proc = template(helm, values=none)
    assert proc.returncode != 0 and "with provider none, set podSelector" in proc.stderr, proc.stderr
    bad = with_bbr(podSelector={"matchLabels": {"app": "x"}, "extra": 1})    # the schema refuses it
    proc = template(helm, values=bad)
    assert proc.returncode != 0 and "extra" in proc.stderr, proc.stderr
