"""`gpuvalues doctor` on dumps (issue 27): the library's checks, the dump reader, the CLI.

The fixture `tests/unit/data/doctor/healthy/` is not hand-written: it is what `gpuvalues
doctor --dump-to` wrote from the e2e cluster of tests/e2e/test_doctor.py (the
time-slicing-renamed-and-not fleet brought up from bare nodes through the node agents, the
real adapter and Prometheus), regenerated with `DOCTOR_FIXTURE_OUT=tests/unit/data/doctor
pytest tests/e2e/test_doctor.py`. Each test below starts from it and makes one change the
way the cluster would show it (a label mig-manager writes, a ConfigMap edited, a series
gone), then holds doctor to naming exactly that link. The e2e test breaks the links on the
real control plane (mig-manager failed and a DCGM field not collected on a second, MIG
fleet); these cover each link on the fixture, the ones no e2e breaks (KEDA, MIG strategy,
GPU count) and the reader's refusals.
"""
from __future__ import annotations

import base64
import copy
import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest
import yaml

from gpuvalues.errors import CODES as GV_CODES
from gpuvalues.operations import doctor
from gpuvalues.operations.doctor import CODES, Snapshot, diagnose
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).parent / "data" / "doctor" / "healthy"
SPEC = ROOT / "examples" / "time-slicing-renamed-and-not.yaml"


@pytest.fixture(scope="module")
def fleet():
    import gpuvalues
    return gpuvalues.build_fleet(gpuvalues.load_spec(SPEC))


@pytest.fixture(scope="module")
def healthy_objects() -> list[dict]:
    return json.loads((FIXTURE / "cluster.json").read_text())["items"]


@pytest.fixture(scope="module")
def healthy_series() -> dict:
    return json.loads((FIXTURE / "prometheus-series.json").read_text())


def snap(objects, series) -> Snapshot:
    from gpuvalues.io.snapshot import _check_series, snapshot_from_objects
    return snapshot_from_objects(objects, _check_series(series, "s") if series is not None else None, "t")


def codes(report) -> set[tuple[str, str]]:
    return {(f.code, f.object) for f in report.findings}


def _one(objects, kind, pred=lambda o: True):
    found = [o for o in objects if o["kind"] == kind and pred(o)]
    assert found, kind
    return found[0]


def _l4_node(objects):
    return _one(objects, "Node", lambda o: o["metadata"].get("labels", {}).get("gpu-inference.io/node-group") == "l4")


def test_the_healthy_fixture_is_healthy(fleet, healthy_objects, healthy_series):
    report = diagnose(fleet, snap(healthy_objects, healthy_series))
    assert report.findings == () and report.notes == ()
    assert {w.workload: (w.running, w.pending) for w in report.workloads} == {
        w.workload: (w.desired, 0) for w in report.workloads}
    assert all(w.desired >= 2 for w in report.workloads)


def test_the_fixture_is_a_real_cluster(healthy_objects):
    """Guard against a hand-made fixture: nodes labelled by the real NFD and GFD (through
    the emulator), pods bound by the real scheduler, Helm's own release records."""
    kinds = {o["kind"] for o in healthy_objects}
    assert {"Node", "Pod", "DaemonSet", "ConfigMap", "HorizontalPodAutoscaler", "APIService", "Secret",
            "PodDisruptionBudget", "Event"} <= kinds
    node = _l4_node(healthy_objects)
    assert node["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"].startswith("NVIDIA-L4")
    assert any(o["kind"] == "Pod" and o["status"].get("phase") == "Running" and o["spec"].get("nodeName")
               for o in healthy_objects)


# -- one link broken at a time ------------------------------------------------------------------
def _mig_fleet():
    import gpuvalues
    return gpuvalues.build_fleet(gpuvalues.load_spec(ROOT / "examples" / "mig-and-tp-one-pool.yaml"))


def test_each_broken_link_is_named_alone(fleet, healthy_objects, healthy_series):
    """Every change below is one link; doctor names it, and nothing else."""
    def broken(change):
        objs = copy.deepcopy(healthy_objects)
        series = copy.deepcopy(healthy_series)
        series = change(objs, series) or series
        return codes(diagnose(fleet, snap(objs, series)))

    node = _l4_node(healthy_objects)["metadata"]["name"]

    def wrong_label(objs, series):
        _l4_node(objs)["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "ts-4-unrenamed"
    assert broken(wrong_label) == {("DR003", f"Node/{node}")}

    def not_advertised(objs, series):
        n = _l4_node(objs)["status"]
        n["allocatable"].pop("nvidia.com/gpu.shared")
        n["allocatable"]["nvidia.com/gpu"] = "4"
    assert broken(not_advertised) == {("DR006", f"Node/{node}")}

    def gfd_stopped(objs, series):
        for o in list(objs):
            if o["kind"] == "Pod" and o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == \
                    "gpu-inference-gpu-feature-discovery" and o["spec"].get("nodeName") == node:
                objs.remove(o)
    assert broken(gfd_stopped) == {("DR002", f"Node/{node}")}

    def quarantined(objs, series):
        _l4_node(objs)["spec"].setdefault("taints", []).append(
            {"key": "remediation.gpu-inference.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"})
    assert broken(quarantined) == {("DR014", f"Node/{node}")}

    def no_series(objs, series):
        return {k: {"status": "success", "data": []} for k in series}
    hpas = {f"HorizontalPodAutoscaler/{o['metadata']['namespace']}/{o['metadata']['name']}"
            for o in healthy_objects if o["kind"] == "HorizontalPodAutoscaler"}
    assert len(hpas) == len(fleet.workloads)
    assert broken(no_series) == {("DR010", h) for h in hpas}

    def exported(objs, series):
        return {k: {"status": "success", "data": [
            {("exported_pod" if lk == "pod" else lk): lv for lk, lv in s.items()} for s in v["data"]]}
            for k, v in series.items()}
    assert broken(exported) == {("DR011", h) for h in hpas}

    def apiservice_down(objs, series):
        api = _one(objs, "APIService", lambda o: o["metadata"]["name"] == doctor.CUSTOM_METRICS_APISERVICE)
        for c in api["status"]["conditions"]:
            if c["type"] == "Available":
                c.update(status="False", reason="FailedDiscoveryCheck", message="no response")
    assert broken(apiservice_down) == {("DR008", f"APIService/{doctor.CUSTOM_METRICS_APISERVICE}")}

    def apiservice_gone(objs, series):
        objs.remove(_one(objs, "APIService", lambda o: o["metadata"]["name"] == doctor.CUSTOM_METRICS_APISERVICE))
    assert broken(apiservice_gone) == {("DR008", f"APIService/{doctor.CUSTOM_METRICS_APISERVICE}")}

    def rule_gone(objs, series):
        cm = _one(objs, "ConfigMap", lambda o: o["metadata"].get("labels", {}).get("app.kubernetes.io/name")
                  == "gpu-inference-prometheus-adapter")
        cm["data"]["config.yaml"] = yaml.safe_dump({"rules": []})
    assert broken(rule_gone) == {("DR009", h) for h in hpas}

    def pdb_blocks(objs, series):
        pdb = _one(objs, "PodDisruptionBudget")
        pdb["status"]["disruptionsAllowed"] = 0
        return None
    pdb = _one(healthy_objects, "PodDisruptionBudget")
    assert broken(pdb_blocks) == {("DR013", f"PodDisruptionBudget/{pdb['metadata']['namespace']}/"
                                             f"{pdb['metadata']['name']}")}

    def image_drift(objs, series):
        pod = _one(objs, "Pod", lambda o: o["metadata"].get("labels", {}).get("app.kubernetes.io/name")
                   == "gpu-inference-dcgm-exporter")
        pod["spec"]["containers"][0]["image"] += "-drift"
        return None
    pod = _one(healthy_objects, "Pod", lambda o: o["metadata"].get("labels", {}).get("app.kubernetes.io/name")
               == "gpu-inference-dcgm-exporter")
    assert broken(image_drift) == {("DR015", f"Pod/{pod['metadata']['namespace']}/{pod['metadata']['name']}")}

    def values_drift(objs, series):
        secret = _newest_release(objs, fleet.workloads[0].name)
        _rewrite_release(secret, lambda rel: rel["config"].setdefault("podAnnotations", {}).update(x="y"))
    r0 = fleet.workloads[0]
    assert broken(values_drift) == {("DR016", f"Release/{r0.namespace}/{r0.name}")}

    def uninstalled(objs, series):
        for o in list(objs):
            if o["kind"] == "Secret" and o["metadata"].get("labels", {}).get("name") == r0.name:
                objs.remove(o)
    assert broken(uninstalled) == {("DR001", f"Release/{r0.namespace}/{r0.name}")}

    def pending_for_capacity(objs, series):
        """One more replica than the pool holds: Pending with the scheduler's message, no
        node-side cause: DR007."""
        pod = copy.deepcopy(_one(objs, "Pod", lambda o: o["metadata"].get("labels", {}).get("app.kubernetes.io/instance")
                                 == r0.name and o["status"].get("phase") == "Running"))
        pod["metadata"]["name"] += "-extra"
        pod["spec"].pop("nodeName")
        pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                         "reason": "Unschedulable", "message": "0/4 nodes are available: 3 Insufficient "
                         "nvidia.com/gpu.shared."}]}
        objs.append(pod)
    got = broken(pending_for_capacity)
    assert {c for c, _ in got} == {"DR007"}, got


def _newest_release(objs, name):
    secrets = [o for o in objs if o["kind"] == "Secret" and o["metadata"].get("labels", {}).get("name") == name
               and o["metadata"].get("labels", {}).get("status") == "deployed"]
    return max(secrets, key=lambda o: int(o["metadata"]["labels"]["version"]))


def _rewrite_release(secret, change):
    raw = gzip.decompress(base64.b64decode(base64.b64decode(secret["data"]["release"])))
    rel = json.loads(raw)
    change(rel)
    secret["data"]["release"] = base64.b64encode(base64.b64encode(gzip.compress(json.dumps(rel).encode()))).decode()


def test_pending_behind_a_node_side_cause_is_not_reported_twice(fleet, healthy_objects, healthy_series):
    """A Pending pod on a pool whose node lacks GFD is the GFD finding, not also DR007."""
    objs = copy.deepcopy(healthy_objects)
    node = _l4_node(objs)
    node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "ts-4-unrenamed"
    pod = copy.deepcopy(_one(objs, "Pod", lambda o: "nvidia.com/gpu.shared" in json.dumps(o["spec"])))
    pod["metadata"]["name"] += "-p"
    pod["spec"].pop("nodeName")
    pod["status"] = {"phase": "Pending"}
    objs.append(pod)
    assert {f.code for f in diagnose(fleet, snap(objs, healthy_series)).findings} == {"DR003"}


def _group_node_objects(fleet):
    """(node group, its Node object) for every node of `fleet`'s groups, as `expected_nodes`
    makes them (GFD's labels, the device plugin's resources), with the labels the printed
    install puts on them (the pool's selector and the group label)."""
    import gpuvalues
    from gpuvalues.fleet.spec import GROUP_LABEL
    inv = gpuvalues.expected_nodes(fleet)
    out = []
    for g in fleet.layout.node_groups:
        for n in inv.nodes:
            if n.name.startswith(g.name + "-"):
                obj = n.to_k8s_node()
                obj["metadata"]["labels"].update({**fleet.spec.pool(g.pool).selector, GROUP_LABEL: g.name})
                out.append((g, obj))
    return out


def test_mig_manager_failed_and_mig_label_drift():
    """The MIG links, on a MIG fleet's nodes as `expected_nodes` makes them (the fixture's
    fleet has no MIG): mig-manager's failed state is DR004, a node relabelled to another
    mig-parted config DR005; with the release records and agents absent, only those links
    and the missing releases are named."""
    fleet = _mig_fleet()
    nodes = _group_node_objects(fleet)
    for g, obj in nodes:
        if g.mig_devices is not None:
            obj["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    mig = [(g, o) for g, o in nodes if g.mig_devices is not None]
    assert mig
    g, obj = mig[0]
    obj["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    g2, obj2 = mig[-1] if len(mig) > 1 else mig[0]
    report = diagnose(fleet, Snapshot(nodes=tuple(o for _, o in nodes)))
    got = {(f.code, f.object) for f in report.findings if f.code not in ("DR001", "DR002")}
    assert got == {("DR004", f"Node/{obj['metadata']['name']}")}
    obj2["metadata"]["labels"]["nvidia.com/mig.config"] = "another-config"
    report = diagnose(fleet, Snapshot(nodes=tuple(o for _, o in nodes)))
    got = {(f.code, f.object) for f in report.findings if f.code not in ("DR001", "DR002")}
    assert ("DR005", f"Node/{obj2['metadata']['name']}") in got


def test_dcgm_field_not_collected(fleet, healthy_objects, healthy_series):
    """A DCGM metric an HPA reads whose field the exporter's counters.csv lacks: DR012
    (the fixture's HPAs read vLLM's series; one is pointed at a DCGM rule here)."""
    objs = copy.deepcopy(healthy_objects)
    cm = _one(objs, "ConfigMap", lambda o: o["metadata"].get("labels", {}).get("app.kubernetes.io/name")
              == "gpu-inference-prometheus-adapter")
    rules = yaml.safe_load(cm["data"]["config.yaml"])
    rules["rules"].append({"seriesQuery": '{__name__="DCGM_FI_PROF_SM_OCCUPANCY",exported_namespace!="",exported_pod!=""}',
                           "resources": {"overrides": {"exported_namespace": {"resource": "namespace"},
                                                       "exported_pod": {"resource": "pod"}}},
                           "name": {"matches": "^DCGM_FI_PROF_SM_OCCUPANCY$", "as": "DCGM_FI_PROF_SM_OCCUPANCY"},
                           "metricsQuery": "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"})
    cm["data"]["config.yaml"] = yaml.safe_dump(rules)
    hpa = _one(objs, "HorizontalPodAutoscaler")
    hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] = "DCGM_FI_PROF_SM_OCCUPANCY"
    counters = _one(objs, "ConfigMap", lambda o: o["metadata"].get("labels", {}).get("app.kubernetes.io/name")
                    == "gpu-inference-dcgm-exporter")
    assert "DCGM_FI_PROF_SM_OCCUPANCY" not in counters["data"]["counters.csv"]
    # the adapter's ConfigMap gained a rule its release does not render: that drift breaks
    # no link (DR018); the counters' is the DR012 it explains (named there, not twice)
    adapter_ref = f"ConfigMap/{cm['metadata']['namespace']}/{cm['metadata']['name']}"
    report = diagnose(fleet, snap(objs, healthy_series))
    assert {(f.code, f.object) for f in report.findings if f.code != "DR012"} == {("DR018", adapter_ref)}, report
    [dr012] = [f for f in report.findings if f.code == "DR012"]
    assert counters["metadata"]["name"] not in dr012.message     # the counters are as rendered: no drift
    counters["data"]["counters.csv"] += "DCGM_FI_PROF_SM_OCCUPANCY, gauge, SM occupancy.\n"
    got = {f.code for f in diagnose(fleet, snap(objs, healthy_series)).findings}
    assert "DR012" not in got       # negative control: collected, so served from DCGM


def _platform_cm(objs, component):
    return _one(objs, "ConfigMap", lambda o: o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == component)


def test_platform_configmap_drift(fleet, healthy_objects, healthy_series):
    """A platform ConfigMap edited outside helm, against the release's manifest: alone it
    is DR018 naming the key; a drift that breaks a link is named in that link's finding
    (its root) instead, once; a reformatted YAML document is no drift."""
    def run(change):
        objs = copy.deepcopy(healthy_objects)
        change(objs)
        return diagnose(fleet, snap(objs, healthy_series))

    def ref(objs, component):
        cm = _platform_cm(objs, component)
        return f"ConfigMap/{cm['metadata']['namespace']}/{cm['metadata']['name']}"

    def counter_gone(objs):
        cm = _platform_cm(objs, "gpu-inference-dcgm-exporter")
        lines = cm["data"]["counters.csv"].splitlines(keepends=True)
        field = next(x for x in lines if x.startswith("DCGM_FI_DEV_GPU_UTIL"))
        cm["data"]["counters.csv"] = "".join(x for x in lines if x != field)
    report = run(counter_gone)
    assert codes(report) == {("DR018", ref(healthy_objects, "gpu-inference-dcgm-exporter"))}
    assert "without 'DCGM_FI_DEV_GPU_UTIL'" in report.findings[0].message, report.findings[0]

    def unused_config_edited(objs):     # `default`: no node group selects it
        cm = _platform_cm(objs, "gpu-inference-device-plugin")
        cm["data"]["default"] = cm["data"]["default"].replace("migStrategy: none", "migStrategy: mixed")
        assert cm["data"]["default"] != _platform_cm(healthy_objects, "gpu-inference-device-plugin")["data"]["default"]
    report = run(unused_config_edited)
    assert codes(report) == {("DR018", ref(healthy_objects, "gpu-inference-device-plugin"))}
    assert "default: flags.migStrategy" in report.findings[0].message, report.findings[0]

    def cm_deleted(objs):
        objs.remove(_platform_cm(objs, "gpu-inference-prometheus-adapter"))
    # without the adapter's ConfigMap no rule serves the HPAs (DR009), the missing
    # ConfigMap named there
    report = run(cm_deleted)
    assert {f.code for f in report.findings} == {"DR009"}
    assert all("the ConfigMap is missing" in f.message for f in report.findings)

    def reformatted(objs):
        cm = _platform_cm(objs, "gpu-inference-prometheus-adapter")
        cm["data"]["config.yaml"] = json.dumps(yaml.safe_load(cm["data"]["config.yaml"]), indent=3)
    assert run(reformatted).findings == ()         # the same rules, other text: no drift

    def unrenamed(objs):
        """renameByDefault false in the l4 group's config, and the node's plugin re-read it:
        DR006, with the drift as its cause (not a DR018 beside it)."""
        cm = _platform_cm(objs, "gpu-inference-device-plugin")
        cm["data"]["ts-2"] = cm["data"]["ts-2"].replace("renameByDefault: true", "renameByDefault: false")
        n = _l4_node(objs)["status"]
        n["allocatable"]["nvidia.com/gpu"] = n["allocatable"].pop("nvidia.com/gpu.shared")
    report = run(unrenamed)
    node = _l4_node(healthy_objects)["metadata"]["name"]
    assert codes(report) == {("DR006", f"Node/{node}")}
    assert "ts-2: sharing.timeSlicing.renameByDefault" in report.findings[0].message, report.findings[0]
    assert "helm upgrade" in report.findings[0].fix


def test_gfd_labels_against_the_node_group(fleet, healthy_objects, healthy_series):
    """GFD's labels on a node whose agents run and resources are right: each value the
    node group's node carries, else the code of that label and what to change."""
    node = _l4_node(healthy_objects)["metadata"]["name"]

    def run(**labels):
        objs = copy.deepcopy(healthy_objects)
        n = _l4_node(objs)["metadata"]["labels"]
        for k, v in labels.items():
            if v is None:
                n.pop(k)
            else:
                n[k] = v
        return diagnose(fleet, snap(objs, healthy_series))

    report = run(**{"nvidia.com/gpu.product": "NVIDIA-L40S"})
    assert codes(report) == {("DR019", f"Node/{node}")}
    assert "'NVIDIA-L4'" in report.findings[0].message and "pool" in report.findings[0].fix
    report = run(**{"nvidia.com/gpu.product": "NVIDIA-L4-SHARED"})   # the sharing config's suffix
    assert codes(report) == {("DR021", f"Node/{node}")}
    assert "renameByDefault" in report.findings[0].fix
    report = run(**{"nvidia.com/gpu.replicas": "4"})
    assert codes(report) == {("DR021", f"Node/{node}")} and "'ts-2'" in report.findings[0].message
    report = run(**{"nvidia.com/gpu.count": "3"})
    assert codes(report) == {("DR022", f"Node/{node}")} and "a GPU is lost" in report.findings[0].message
    report = run(**{"nvidia.com/gpu.product": None})
    assert codes(report) == {("DR019", f"Node/{node}")} and "log" in report.findings[0].fix
    # labels the group's node does not carry are not held to anything (GFD writes more)
    assert run(**{"nvidia.com/gpu.machine": "other", "nvidia.com/mig.strategy": "none"}).findings == ()


def test_gfd_mig_strategy_against_the_plan():
    """On a MIG fleet's nodes (expected_nodes, as GFD makes them): a MIG strategy other
    than the plan's is DR020, the fix naming the plan's."""
    fleet = _mig_fleet()
    objs = [obj for _, obj in _group_node_objects(fleet)]
    # the node agents Running on every node (as the platform's DaemonSets' pods are)
    pods = tuple({"metadata": {"name": f"{comp}-{o['metadata']['name']}", "namespace": fleet.platform.namespace,
                               "labels": {"app.kubernetes.io/name": f"gpu-inference-{comp}",
                                          "app.kubernetes.io/instance": fleet.platform.name}},
                  "spec": {"nodeName": o["metadata"]["name"]}, "status": {"phase": "Running"}}
                 for o in objs for comp in doctor.AGENT_COMPONENTS.values())

    def found():
        return [f for f in diagnose(fleet, Snapshot(nodes=tuple(objs), pods=pods)).findings if f.code != "DR001"]
    assert found() == []
    objs[0]["metadata"]["labels"]["nvidia.com/mig.strategy"] = "single"
    [f] = found()
    assert (f.code, f.object) == ("DR020", f"Node/{objs[0]['metadata']['name']}") and "'mixed'" in f.fix


def test_a_scaledobject_not_ready(fleet, healthy_objects):
    objs = copy.deepcopy(healthy_objects)
    r0 = fleet.workloads[0]
    objs.append({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                 "metadata": {"name": r0.name, "namespace": r0.namespace,
                              "labels": {"app.kubernetes.io/instance": r0.name}},
                 "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ScaledObjectCheckFailed",
                                            "message": "no triggers"}]}})
    got = {(f.code, f.object) for f in diagnose(fleet, snap(objs, None)).findings}
    assert got == {("DR017", f"ScaledObject/{r0.namespace}/{r0.name}")}


def test_without_series_the_report_says_what_it_did_not_check(fleet, healthy_objects):
    report = diagnose(fleet, snap(healthy_objects, None))
    assert report.findings == () and any("Prometheus" in n for n in report.notes)


# -- the reader, the CLI, the tables -----------------------------------------------------------
class _Res:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def _cli(capsys):
    """The CLI in-process (unit tests start no process): exit code, stdout, stderr."""
    from gpuvalues import cli

    def run(*args):
        capsys.readouterr()
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return _Res(code, out, err)
    return run


def test_cli_dump_mode_exit_codes(tmp_path, healthy_objects, _cli):
    res = _cli("doctor", str(SPEC), "--dump", str(FIXTURE))
    assert res.returncode == 0 and "healthy: no finding" in res.stdout, res.stderr
    bad = tmp_path / "broken"
    bad.mkdir()
    objs = copy.deepcopy(healthy_objects)
    _l4_node(objs)["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "ts-4-unrenamed"
    (bad / "cluster.json").write_text(json.dumps({"kind": "List", "items": objs}))
    res = _cli("--output", "json", "doctor", str(SPEC), "--dump", str(bad))
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert [f["code"] for f in data["findings"]] == ["DR003"] and data["findings"][0]["link"] == CODES["DR003"][0]


@pytest.mark.parametrize("name,text,code", [
    ("cluster.json", "{not json", "GV065"),
    ("cluster.json", '{"items": 3}', "GV065"),
    ("prometheus-series.json", '{"m": {"data": 3}}', "GV067"),
    ("cluster.json", json.dumps({"kind": "Secret", "type": "helm.sh/release.v1", "metadata": {"name": "x"},
                                 "data": {"release": "bm90IGd6aXA="}}), "GV068"),
])
def test_a_bad_dump_is_one_line_exit_2(tmp_path, name, text, code, _cli):
    (tmp_path / name).write_text(text)
    if name != "cluster.json":
        (tmp_path / "cluster.json").write_text('{"kind": "List", "items": []}')
    res = _cli("doctor", str(SPEC), "--dump", str(tmp_path))
    assert res.returncode == 2 and res.stdout == "", (res.returncode, res.stdout)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"[{code}]") and str(tmp_path) in lines[0], lines


def test_options_are_checked(tmp_path, _cli):
    for args in ([], ["--dump", str(FIXTURE), "--kubeconfig", "k"], ["--dump", str(tmp_path / "none")],
                 ["--dump", str(FIXTURE), "--prometheus", "http://x"]):
        res = _cli("doctor", str(SPEC), *args)
        assert res.returncode == 2 and "GV066" in res.stderr, (args, res.stderr)


def test_codes_are_documented_in_one_table():
    """CODES is the one table: docs/doctor.md and README list it row for row; the GV codes
    doctor raises are registered."""
    rows = [f"| {c} | {t} | {h} |" for c, (t, h) in CODES.items()]
    for path in (ROOT / "docs" / "doctor.md", ROOT / "README.md"):
        text = path.read_text()
        block = text.split("<!-- doctor-codes -->", 1)[1].split("<!-- /doctor-codes -->", 1)[0]
        assert [ln for ln in block.splitlines() if ln.startswith("| DR")] == rows, path
    assert list(CODES) == [f"DR{i:03d}" for i in range(1, len(CODES) + 1)]
    src = (ROOT / "gpuvalues" / "io" / "snapshot.py").read_text() + (ROOT / "gpuvalues" / "operations" / "doctor.py").read_text()
    used = set(re.findall(r'"(GV\d{3})"', src))
    assert used <= set(GV_CODES) and {"GV065", "GV066", "GV067", "GV068"} <= used | {"GV066"}
    used_dr = set(re.findall(r'"(DR\d{3})"', (ROOT / "gpuvalues" / "operations" / "doctor.py").read_text()))
    assert used_dr == set(CODES), set(CODES) - used_dr


def test_the_live_reader_only_reads_and_the_role_covers_it():
    """Read-only by construction: every live call is a GET of a collection, and the docs'
    ClusterRole (get/list/watch only) names every resource read. The e2e test runs doctor
    with a token bound to exactly that role."""
    import kubernetes.client as k

    from gpuvalues.io import snapshot
    for _kind, _group, _resource, cls, method, _extra in snapshot.LIVE_LISTS:
        assert method.startswith("list_") and callable(getattr(getattr(k, cls), method)), method
    src = (ROOT / "gpuvalues" / "io" / "snapshot.py").read_text()
    # the only client calls are the table's (getattr(...)(api), method)) and Prometheus GETs
    assert not re.search(r"\b(create|patch|replace|delete|connect)_[a-z_]+", src)
    assert "urlopen(u, timeout" in src and "data=" not in src.split("def query_series", 1)[1].split("def ", 1)[0]
    text = (ROOT / "docs" / "doctor.md").read_text()
    role = yaml.safe_load(re.search(r"<!-- doctor-clusterrole -->\n```yaml\n(.*?)```", text, re.S).group(1))
    assert {v for r in role["rules"] for v in r["verbs"]} == {"get", "list", "watch"}
    granted = {(g, res) for r in role["rules"] for g in r["apiGroups"] for res in r["resources"]}
    assert granted == {(g, res) for _k, g, res, _c, _m, _e in snapshot.LIVE_LISTS}


def test_table_output_groups_findings_by_workload(fleet, healthy_objects, healthy_series):
    from gpuvalues.io.present import doctor_table
    objs = copy.deepcopy(healthy_objects)
    pdb = _one(objs, "PodDisruptionBudget")
    pdb["status"]["disruptionsAllowed"] = 0
    text = doctor_table(diagnose(fleet, snap(objs, healthy_series)).to_dict())
    owner = pdb["metadata"]["labels"]["app.kubernetes.io/instance"]
    section = text.split(f"workload {owner} ", 1)[1].split("\nworkload ", 1)[0]
    assert "DR013" in section and "1 finding(s)" in text


def test_the_dump_is_read_and_checked_without_the_collector(fleet):
    """bench_doctor's 4x: decoding a dump made the cyclic collector walk every container
    decoded so far, again and again. Counted, not timed: no collection runs while the dump
    is read or checked (decoding the fixture alone, 0.5 MB, with the collector on runs
    several), and the collector is on again afterwards, as it was."""
    import gc

    from gpuvalues.io.snapshot import load_dump
    runs = []

    def count(phase, info):
        if phase == "start":
            runs.append(info["generation"])
    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        gc.collect()
        runs.clear()
        snapshot = load_dump(FIXTURE)
        report = diagnose(fleet, snapshot)
        during = list(runs)
        gc.disable()
        with doctor.paused_gc():
            pass
        assert not gc.isenabled()          # paused_gc restores the state it found
        gc.enable()
        runs.clear()
        [json.loads((FIXTURE / "cluster.json").read_text()) for _ in range(2)]
        control = list(runs)
    finally:
        gc.callbacks.remove(count)
    assert gc.isenabled() and report.findings == ()
    # at most the one young collection the first allocations after the reading make
    # between the two paused blocks (load_dump's, diagnose's)
    assert len(during) <= 1 and 2 not in during, during
    assert len(control) > 5, f"negative control: decoding the fixture with the collector on runs it: {control}"


# -- DRA workloads: their Pending pods explained by the devices nobody publishes (DR023, DR024) --
def _dra_cluster(*, deviceclass: bool, slices_on: tuple[str, ...] = (), message: str = "", running: bool = False):
    """A DRA fleet's cluster as the API would show it (examples/dra-fleet.yaml): its releases
    deployed with the fleet's values, one pod per workload (claiming through resourceClaims)
    Pending with the scheduler's `message` (or Running), and the DRA driver's objects: the
    DeviceClass, and a ResourceSlice with a device on each node of `slices_on`."""
    import gpuvalues
    from gpuvalues.operations.doctor import HelmRelease
    from gpuvalues.planners.deviceplugin import DRA_DRIVER

    fleet = gpuvalues.build_fleet(gpuvalues.load_spec(ROOT / "examples" / "dra-fleet.yaml"))
    pool = fleet.spec.node_pools[0]
    nodes = [{"kind": "Node", "metadata": {"name": f"h100-{i}", "labels": dict(pool.selector)},
              "status": {"allocatable": {}}} for i in range(pool.nodes)]
    pods = []
    for r in fleet.workloads:
        status = {"phase": "Running"} if running else {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}
        pods.append({"kind": "Pod", "metadata": {"name": f"{r.name}-0", "namespace": r.namespace,
                                                 "labels": {"app.kubernetes.io/instance": r.name}},
                     "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": r.name}],
                              "containers": [{"name": "server", "image": "x"}]}, "status": status})
    dra = ([{"kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}}] if deviceclass else []) + [
        {"kind": "ResourceSlice", "metadata": {"name": f"{n}-{DRA_DRIVER}"},
         "spec": {"driver": DRA_DRIVER, "nodeName": n, "pool": {"name": n}, "devices": [{"name": "gpu-0"}]}}
        for n in slices_on]
    releases = tuple(HelmRelease(r.name, r.namespace, 1, "deployed", r.values, "") for r in fleet.releases)
    objects = nodes + pods + dra
    from gpuvalues.io.snapshot import snapshot_from_objects
    return fleet, dataclasses.replace(snapshot_from_objects(objects, None, "t"), releases=releases)


def _dra_codes(report, fleet):
    names = {r.workload for r in fleet.workloads}
    return {(f.code, f.workload) for f in report.findings if f.workload in names}


def test_dra_without_the_driver_is_its_missing_deviceclass():
    said = "0/3 nodes are available: resourceclaim not found... device class gpu.nvidia.com does not exist"
    fleet, s = _dra_cluster(deviceclass=False, message=said)
    report = diagnose(fleet, s)
    wl = {r.workload for r in fleet.workloads}
    assert _dra_codes(report, fleet) == {("DR023", w) for w in wl}
    f = next(f for f in report.findings if f.code == "DR023")
    assert f.object == "DeviceClass/gpu.nvidia.com" and "does not exist" in f.message and said in f.message
    # the cluster holds DRA objects (another driver's slice): the missing class counts without the message
    fleet, s = _dra_cluster(deviceclass=False, message="", slices_on=("h100-0",))
    assert _dra_codes(diagnose(fleet, s), fleet) == {("DR023", w) for w in wl}


def test_a_dump_without_dra_objects_proves_no_missing_deviceclass():
    """Control: no DRA object in the snapshot and a scheduler message that does not name the
    class: nothing says the class is missing (the dump may just not hold it): DR007."""
    fleet, s = _dra_cluster(deviceclass=False, message="0/3 nodes are available: 3 Insufficient cpu.")
    assert _dra_codes(diagnose(fleet, s), fleet) == {("DR007", r.workload) for r in fleet.workloads}


def test_dra_with_the_class_but_no_published_device_on_the_pool():
    fleet, s = _dra_cluster(deviceclass=True, message="0/3 nodes are available: 3 cannot allocate all claims.")
    report = diagnose(fleet, s)
    assert _dra_codes(report, fleet) == {("DR024", r.workload) for r in fleet.workloads}
    f = next(f for f in report.findings if f.code == "DR024")
    assert "no ResourceSlice of driver gpu.nvidia.com" in f.message and "3 node(s) of pool h100" in f.message
    # a slice on one of the pool's nodes: devices are published there, the Pending pods are DR007's
    fleet, s = _dra_cluster(deviceclass=True, slices_on=("h100-1",), message="0/3 nodes are available: 3 cannot "
                            "allocate all claims.")
    assert _dra_codes(diagnose(fleet, s), fleet) == {("DR007", r.workload) for r in fleet.workloads}


def test_running_dra_pods_are_not_questioned():
    fleet, s = _dra_cluster(deviceclass=False, running=True)
    assert not {c for c, _ in _dra_codes(diagnose(fleet, s), fleet)} & {"DR023", "DR024", "DR007"}
