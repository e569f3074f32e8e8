"""The chart-wide escape hatches every model chart has (issue 28): namespaceOverride moves
every namespaced object (and every reference to its namespace), extraObjects renders more
objects with the release. Real helm 4 and 3."""
from __future__ import annotations

import pytest

from tests.chart import chartlib

pytestmark = pytest.mark.chart

NAMESPACED_EXEMPT = {"ClusterRole", "ClusterRoleBinding", "APIService", "PriorityClass"}
# A platform release with every namespaced part on, and a workload with its monitoring.
SCENARIOS = ("platform-on", "minimal")


def _scenario(name):
    path = chartlib.scenario_file(name)
    if not path.exists():
        pytest.fail(f"scenario {path} is gone: pick another that turns many parts on")
    return path


@pytest.mark.parametrize("helm", sorted(chartlib.HELMS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_namespace_override_moves_every_object_and_reference(helm, scenario):
    text = chartlib.template(chartlib.HELMS[helm], _scenario(scenario), namespace="release-ns",
                             set_values={"namespaceOverride": "gpu-system"})
    assert text.returncode == 0, text.stderr
    objects = chartlib.parse(text.stdout)
    namespaced = [o for o in objects if o["kind"] not in NAMESPACED_EXEMPT]
    assert namespaced, "nothing namespaced rendered: the check is empty"
    wrong = [f'{o["kind"]}/{o["metadata"]["name"]}: {o["metadata"].get("namespace")}'
             for o in namespaced if o["metadata"].get("namespace") != "gpu-system"
             # the adapter's auth-reader RoleBinding belongs in kube-system, beside its Role
             and not o["metadata"]["name"].endswith("-auth-reader")]
    assert not wrong, wrong
    # no reference to the release's own namespace is left (RBAC subjects, APIService, selectors)
    assert "release-ns" not in text.stdout, [ln for ln in text.stdout.splitlines() if "release-ns" in ln][:5]


@pytest.mark.parametrize("helm", sorted(chartlib.HELMS))
def test_without_override_objects_stay_in_the_release_namespace(helm):
    objects = chartlib.render(chartlib.HELMS[helm], _scenario("minimal"), namespace="inference")
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] not in NAMESPACED_EXEMPT} == {"inference"}


@pytest.mark.parametrize("helm", sorted(chartlib.HELMS))
def test_extra_objects_render_maps_and_templated_strings(helm):
    values = {"extraObjects": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ .Release.Name }}-extra"},
         "data": {"k": "v"}},
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ include \"gpu-inference.fullname\" . }}-token\n"
        "stringData:\n  token: x\n",
    ]}
    objects = chartlib.render(chartlib.HELMS[helm], _scenario("minimal"), values=values, release="gi")
    extra = {(o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] in ("ConfigMap", "Secret")}
    assert ("ConfigMap", "gi-extra") in extra
    assert ("Secret", "gi-gpu-inference-token") in extra
    assert chartlib.k8s_errors([o for o in objects if o["kind"] in ("ConfigMap", "Secret")], "1.34") == []


@pytest.mark.parametrize("bad", [{"namespaceOverride": "Not_A_Namespace"}, {"extraObjects": [3]}])
def test_the_schema_refuses_bad_hatches(bad):
    proc = chartlib.template(chartlib.HELMS["helm"], _scenario("minimal"), values=bad)
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
