"""The causal model (gpuvalues.fleet.producers) against the chart it models, rendered by the
real Helm 4: the labels it says a workload's pods require are the ones the pods require; the
DaemonSet placement it replays is the chart's default; render's fit, on the nodes the
install produces, leaves pods Pending when a producer is off (issue 22 item 5)."""
from __future__ import annotations

import pytest
import yaml

from gpuvalues import pipeline
from gpuvalues.checks.fleet import check_fleet
from gpuvalues.checks.spec import load_spec, spec_from_text
from gpuvalues.fleet import build_fleet, producers
from tests.chart.chartlib import render
from tests.conftest import CHART, ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def pod_requirements(objs: list[dict]) -> dict[str, tuple[str, ...]]:
    """In/Exists requirements of the workload's pods (every required term the same here) and
    their nodeSelector: the Deployment's, or a LeaderWorkerSet's leader and workers (which
    must agree)."""
    [dep] = [o for o in objs if o["kind"] in ("Deployment", "LeaderWorkerSet")
             and o["metadata"]["name"].endswith("-gpu-inference")]
    if dep["kind"] == "LeaderWorkerSet":
        lwt = dep["spec"]["leaderWorkerTemplate"]
        leader, worker = (pod_requirements([{**dep, "kind": "Deployment", "spec": {"template": t}}])
                          for t in (lwt["leaderTemplate"], lwt["workerTemplate"]))
        assert leader == worker, (leader, worker)
        return leader
    spec = dep["spec"]["template"]["spec"]
    out = {k: (v,) for k, v in (spec.get("nodeSelector") or {}).items()}
    terms = (spec.get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []))
    for t in terms[:1]:
        for e in t.get("matchExpressions", []):
            if e["operator"] in ("In", "Exists"):
                out[e["key"]] = tuple(e.get("values", ()))
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_required_labels_are_what_the_rendered_pods_require(helm4, path):
    fleet = build_fleet(load_spec(path))
    assert fleet.workloads
    for r in fleet.workloads:
        objs = render(helm4, values=dict(r.values), release=r.name, namespace=r.namespace,
                      kube_version=fleet.spec.kubernetes_version)
        assert producers.required_node_labels(r.values) == pod_requirements(objs), (path.stem, r.name)


def test_the_model_reads_a_changed_affinity_differently(helm4):
    """Negative control of the comparison above: a user nodeSelector shows up on both sides."""
    fleet = build_fleet(load_spec(ROOT / "examples" / "single-a100.yaml"))
    values = {**fleet.workloads[0].values, "nodeSelector": {"example.com/rack": "r1"}}
    got = pod_requirements(render(helm4, values=values, release="x", namespace="inference"))
    assert got["example.com/rack"] == ("r1",) == producers.required_node_labels(values)["example.com/rack"]
    assert got != pod_requirements(render(helm4, values=dict(fleet.workloads[0].values),
                                          release="x", namespace="inference"))


def test_daemonset_placement_is_the_charts_default():
    terms = [{e["key"]: tuple(e["values"]) for e in t["matchExpressions"]}
             for t in DEFAULTS["platform"]["gpuNodeAffinity"]]
    assert terms == [{k: (v,) for k, v in t.items()} for t in producers.GPU_NODE_TERMS]
    p = DEFAULTS["platform"]
    assert {producers.DEVICE_PLUGIN: p["devicePlugin"]["nodeOptOutLabel"],
            producers.GFD: p["gfd"]["nodeOptOutLabel"],
            producers.MIG_MANAGER: p["migManager"]["nodeOptOutLabel"],
            "dcgm-exporter": p["dcgmExporter"]["nodeOptOutLabel"]} == producers.OPT_OUT


SPEC = (ROOT / "examples" / "single-a100.yaml").read_text()


def _fit(helm4, text: str):
    fleet = check_fleet(build_fleet(spec_from_text(text, "s.yaml")))
    rendered = [(r, render(helm4, values=dict(r.values), release=r.name, namespace=r.namespace,
                           kube_version=fleet.spec.kubernetes_version)) for r in fleet.releases]
    return fleet, pipeline.fit_findings(fleet, rendered)


def test_render_fit_leaves_pods_pending_when_gfd_is_off(helm4):
    assert "gpuFeatureDiscovery" not in SPEC and "\nplatform:\n" in SPEC
    fleet, found = _fit(helm4, SPEC.replace("\nplatform:\n", "\nplatform:\n  gpuFeatureDiscovery: false\n"))
    assert found and all("node affinity" in f.message for f in found), found
    assert [f.code for f in fleet.errors] == ["GV021"]
    fleet, found = _fit(helm4, SPEC)             # negative control: GFD on, everything fits
    assert found == [] and fleet.errors == ()
