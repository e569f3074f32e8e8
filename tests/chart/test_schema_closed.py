"""Every object the chart owns is closed (issue 14): the schema walk below proves that each
object node of schemas/values.schema.json has `additionalProperties: false` or is one of
the listed escape hatches (free maps users legitimately fill: labels, annotations, resource
quantities, Kubernetes objects passed through verbatim); typos at depths 1-5 are refused by
Helm 4 and Helm 3 alike and by `gpuvalues validate --values`; the affinity template keeps
every key the schema admits; a nulled alert list is refused instead of rendering `xid=~""`."""
from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml

from tests.chart.chartlib import by_kind, render, template
from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "schemas" / "values.schema.json").read_text())
GPUVALUES = ROOT / ".venv" / "bin" / "gpuvalues"

# Schema locations (where the walk reaches them) of the open maps, each with why it is open.
ESCAPE_HATCHES = {
    "#/properties/global": "Helm injects parent-chart globals; their keys are not ours",
    "#/properties/commonLabels": "label map (string values)",
    "#/properties/commonAnnotations": "annotation map",
    "#/properties/podLabels": "label map",
    "#/properties/podAnnotations": "annotation map",
    "#/properties/nodeSelector": "node label map",
    "#/properties/serviceAccount/properties/annotations": "annotation map (cloud IAM bindings)",
    "#/properties/service/properties/annotations": "annotation map",
    "#/properties/serviceMonitor/properties/labels": "label map",
    "#/properties/platform/properties/dcgmExporter/properties/serviceMonitor/properties/labels": "label map",
    "#/properties/platform/properties/alerts/properties/labels": "label map",
    "#/properties/extraVolumes/items": "a Kubernetes Volume of any source, rendered verbatim (kubernetes-validate "
                                      "and the API server's strict field validation check it)",
    "#/properties/initContainers/items": "a Kubernetes Container, rendered verbatim",
    "#/properties/sidecars/items": "a Kubernetes Container, rendered verbatim",
    "#/properties/extraObjects/items": "any Kubernetes object (or a template string), rendered through tpl",
    "#/properties/autoscaling/properties/externalMetric/properties/selector":
        "a Kubernetes LabelSelector of the External metric, rendered verbatim",
    "labelSelector/properties/matchLabels": "label map of a Kubernetes LabelSelector",
    "namespaceSelector/properties/matchLabels": "label map of a Kubernetes LabelSelector",
    "podSelector/properties/matchLabels": "label map of a Kubernetes LabelSelector",
    "resources/properties/requests": "resource quantities by resource name",
    "sidecarResources/properties/requests": "resource quantities by resource name",
    "sidecarResources/properties/limits": "resource quantities by resource name",
    "resources/properties/limits": "resource quantities by resource name",
    "#/properties/platform/properties/devicePlugin/properties/config/properties/map":
        "config name -> device plugin config (each value closed by platformDevicePluginConfig)",
    "#/properties/platform/properties/prometheusAdapter/properties/metricsQueries": "series name -> PromQL",
    "extraRules/items/properties/seriesFilters/items": "prometheus-adapter's own rule objects, passed verbatim",
    "extraRules/items/properties/resources": "prometheus-adapter's own rule objects, passed verbatim",
    "extraRules/items/properties/name": "prometheus-adapter's own rule objects, passed verbatim",
    "#/properties/platform/properties/nfd/properties/worker/properties/config/properties/core":
        "nfd-worker.conf's own core section, passed verbatim (node-feature-discovery pkg/nfd-worker)",
    "#/properties/platform/properties/nfd/properties/worker/properties/config/properties/sources":
        "nfd-worker.conf's feature sources, passed verbatim (node-feature-discovery source/*)",
    "#/properties/platform/properties/migManager/properties/config/properties/mig-configs":
        "config name -> mig-parted entries (each entry closed)",
    "mig-configs/additionalProperties/items/properties/mig-devices": "MIG profile -> instance count",
    # each platform DaemonSet's own pod annotations and node selector ($defs/daemonSetSettings)
    "properties/podAnnotations": "annotation map of a platform DaemonSet's pods",
    "properties/nodeSelector": "node label map of a platform DaemonSet",
}
# Keywords whose subschemas are predicates over a node already checked, not value nodes.
PREDICATES = {"if", "then", "else", "not"}


def _hatch(where: str) -> str | None:
    """The escape hatch naming this location: a full pointer, or a suffix for a shared $def."""
    return next((h for h in ESCAPE_HATCHES if where == h or (not h.startswith("#") and where.endswith("/" + h))), None)


def open_nodes(schema: dict) -> tuple[list[str], set[str]]:
    """(object nodes neither closed nor an escape hatch, escape hatches reached)."""
    bad, hatches, seen = [], set(), set()

    def walk(node, where):
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            ref = node["$ref"]
            key = (ref, where)
            if key in seen:
                return
            seen.add(key)
            target = schema
            for part in ref.lstrip("#/").split("/"):
                target = target[part]
            walk(target, where)
            return
        is_object = node.get("type") == "object" or "properties" in node or (
            isinstance(node.get("type"), list) and "object" in node["type"])
        if is_object and node.get("additionalProperties") is not False:
            hatch = _hatch(where)
            if hatch:
                hatches.add(hatch)
            else:
                bad.append(where)
        for k, sub in node.get("properties", {}).items():
            walk(sub, f"{where}/properties/{k}")
        for k, sub in node.get("patternProperties", {}).items():
            walk(sub, f"{where}/patternProperties/{k}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{where}/additionalProperties")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{where}/items")
        for kw in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(kw, []):
                walk(sub, where)

    walk(schema, "#")
    return bad, hatches


def test_every_object_node_is_closed_or_a_listed_escape_hatch():
    bad, hatches = open_nodes(SCHEMA)
    assert bad == []
    assert set(ESCAPE_HATCHES) - hatches == set(), "stale escape hatches"


def test_the_walk_finds_an_open_node_negative_control():
    broken = copy.deepcopy(SCHEMA)
    del broken["$defs"]["nodeSelectorTerm"]["additionalProperties"]
    bad, _ = open_nodes(broken)
    assert "#/properties/affinity/properties/nodeAffinity/properties/requiredDuringSchedulingIgnoredDuringExecution" \
           "/properties/nodeSelectorTerms/items" in bad
    assert "#/properties/platform/properties/gpuNodeAffinity/items" in bad


TERM = {"matchExpressions": [{"key": "a", "operator": "Exists"}]}
# (depth of the typo, values with the typo, the misspelt key)
TYPOS = [
    (1, {"replicaCont": 2}, "replicaCont"),
    (2, {"server": {"imagee": {"tag": "x"}}}, "imagee"),
    (2, {"tolerations": [{"key": "a", "efect": "NoSchedule"}]}, "efect"),
    (3, {"affinity": {"nodeAffinity": {"requiredDuringScheduling": {"nodeSelectorTerms": [TERM]}}}},
     "requiredDuringScheduling"),
    (3, {"podSecurityContext": {"seccompProfile": {"typ": "RuntimeDefault"}}}, "typ"),
    (3, {"containerSecurityContext": {"seLinuxOptions": {"usr": "x"}}}, "usr"),
    (3, {"networkPolicy": {"enabled": True, "from": [{"namespaceSelecter": {}}]}}, "namespaceSelecter"),
    (3, {"networkPolicy": {"metricsFrom": [{"namespaceSelectr": {}}]}}, "namespaceSelectr"),
    (3, {"platform": {"gpuNodeAffinity": [{"matchExpresions": []}]}}, "matchExpresions"),
    (3, {"server": {"images": {"vllm": {"tg": "v1"}}}}, "tg"),
    (4, {"platform": {"dcgmExporter": {"resources": {"limit": {"cpu": "1"}}}}}, "limit"),
    (4, {"platform": {"gfd": {"resources": {"requets": {"cpu": "1"}}}}}, "requets"),
    (4, {"server": {"env": [{"name": "A", "valueFrom": {"secretKeyref": {"name": "s", "key": "k"}}}]}}, "secretKeyref"),
    (4, {"networkPolicy": {"from": [{"podSelector": {"matchLabel": {"a": "b"}}}]}}, "matchLabel"),
    (4, {"platform": {"prometheusAdapter": {"extraRules": [{"seriesQuery": "x", "metricQuery": "y"}]}}}, "metricQuery"),
    (5, {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpression": [{"key": "a", "operator": "Exists"}]}]}}}}, "matchExpression"),
    (5, {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "k", "labelSelecter": {}}}]}}}, "labelSelecter"),
    (5, {"platform": {"devicePlugin": {"config": {"map": {"default": {"version": "v1", "flag": {}}}}}}}, "flag"),
]


@pytest.mark.parametrize("depth, values, typo", TYPOS, ids=[f"d{d}-{t}" for d, _, t in TYPOS])
def test_typos_are_refused_by_both_helms(helm, depth, values, typo):
    proc = template(helm, values=values)
    assert proc.returncode != 0, f"typo {typo!r} at depth {depth} was accepted"
    if helm.endswith("helm3"):
        assert f"Additional property {typo} is not allowed" in proc.stderr, proc.stderr
    else:
        assert f"additional properties '{typo}' not allowed" in proc.stderr, proc.stderr


def test_typo_depths_cover_one_to_five():
    assert {d for d, _, _ in TYPOS} == {1, 2, 3, 4, 5}


@pytest.mark.parametrize("depth, values, typo", [TYPOS[3], TYPOS[-1]], ids=["affinity", "device-plugin"])
def test_gpuvalues_validate_agrees(tmp_path, depth, values, typo):
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    proc = subprocess.run([str(GPUVALUES), "validate", "--values", str(f)], capture_output=True, text=True)
    assert proc.returncode != 0 and typo in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_the_right_spelling_passes_on_both_helms(helm):
    """Control for the typo cases: the same shapes spelt right render."""
    objs = render(helm, values={
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [TERM]}}},
        "tolerations": [{"key": "a", "effect": "NoSchedule", "operator": "Exists"}],
        "server": {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        "networkPolicy": {"enabled": True, "from": [{"podSelector": {"matchLabels": {"a": "b"}}}]},
        "platform": {"dcgmExporter": {"enabled": True, "resources": {"limits": {"cpu": "1"}}}}})
    assert by_kind(objs, "DaemonSet")


def test_every_affinity_key_the_schema_admits_reaches_the_pod(helm):
    """The template must not drop a user key: fill every affinity field the schema allows."""
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}]}
    pod_term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname",
                "namespaces": ["cache"]}
    user = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": term}]},
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [pod_term],
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 7, "podAffinityTerm": pod_term}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term]},
    }
    assert set(user) == set(SCHEMA["$defs"]["affinity"]["properties"])
    (dep,) = by_kind(render(helm, values={"affinity": user, "gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}), "Deployment")
    got = dep["spec"]["template"]["spec"]["affinity"]
    (t,) = got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert t["matchFields"] == term["matchFields"]
    assert term["matchExpressions"][0] in t["matchExpressions"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]} in t["matchExpressions"]
    assert {"weight": 5, "preference": term} in got["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert got["podAffinity"] == user["podAffinity"]
    assert got["podAntiAffinity"] == user["podAntiAffinity"]


@pytest.mark.parametrize("setting", ["platform.alerts.criticalXids=null", "platform.alerts.xidWindow=null"])
def test_nulled_alert_settings_are_refused_not_rendered_empty(helm, setting):
    key, _ = setting.split("=")
    cmd_set = {key: "null", "platform.alerts.force": "true"}
    proc = template(helm, set_values=cmd_set)
    assert proc.returncode != 0, proc.stdout[:300]
    field = key.rsplit(".", 1)[1]
    if helm.endswith("helm3"):
        assert f"{field} is required" in proc.stderr, proc.stderr
    else:
        assert f"missing property '{field}'" in proc.stderr, proc.stderr
    assert 'xid=~""' not in proc.stdout


def test_empty_critical_xids_are_refused(helm):
    proc = template(helm, values={"platform": {"alerts": {"force": True, "criticalXids": []}}})
    assert proc.returncode != 0 and "criticalXids" in proc.stderr.replace("/criticalXids", "criticalXids"), proc.stderr
