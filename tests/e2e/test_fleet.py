"""Fleets end to end on the real control plane from injected nodes (issue 12, issue 13
item 7): what the day-1 test (tests/e2e/test_day1.py, bare nodes and the node agents,
issue 22) cannot run yet. Every other example fleet moved there; these stay:

- dra-fleet: its devices come from the NVIDIA DRA driver's ResourceSlices, which neither
  kwok nor the node-agent emulator runs (e2elib.dra_objects stands in);
- rtx4090-time-slicing and nvlink-tp8: one-workload specs, printed as one combined
  release, which test_day1's platform checks do not read yet;
- the negative control of a node group without its device-plugin config label.

For each example spec: a fresh control plane (etcd, kube-apiserver, kube-controller-manager
with the real HPA controller, kube-scheduler; kwok plays the kubelets) whose only nodes are
the fleet's node groups, their GPU labels and resources what the upstream device plugin
and GFD make of each group's hardware and config (tests/e2e/fleet.py fleet_gpu_nodes;
CPU/memory hand-written: fleetlib.NODE_CAPACITY).
The platform release and every workload release are installed with the real Helm 4
(server-side apply) in the fleet's namespaces, then

1. every workload is pinned at maxReplicas (the HPA's minReplicas raised to its
   maxReplicas; the HPA controller scales) and every pod must be Running on a node of
   its own pool that offers the GPU resource it requests, with no pod Pending; the
   platform's DaemonSets (device plugin holding every config a node group selects, DCGM
   exporter, MPS control daemon) run on every node they select;
2. the platform release's one adapter ConfigMap, run by the real prometheus-adapter
   against a real Prometheus that scrapes a test-served exporter (the one fake: no GPU or
   model server here), must feed every HPA of every workload: ScalingActive True and
   currentMetrics equal to what the exporter serves;
3. negative control: the same time-slicing fleet with the renamed node group's
   device-plugin config label removed leaves that group's workload Pending.

A fresh cluster per example keeps examples independent (nodes, the one
custom.metrics.k8s.io APIService); start-up is ~10 s of the run.
"""
from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

import gpuvalues
from tests.conftest import ROOT
from tests.e2e import e2elib, fleetlib
from tests.e2e import fleet as gpu_fleet
from tests.e2e.conftest import Kube, harness

#: rtx4090-time-slicing (issue 12's unschedulable -SHARED example) and nvlink-tp8 (8-GPU
#: replicas on the NVLink topology label): one-workload specs (one combined release);
#: dra-fleet's ResourceSlices are what the NVIDIA DRA driver would publish
#: (e2elib.dra_objects: the driver cannot run here); its nodes run no device plugin. The
#: multi-workload examples run from bare nodes in test_day1.py.
EXAMPLES = ["rtx4090-time-slicing", "nvlink-tp8", "dra-fleet"]

#: the example whose adapter is also run without one rule (the negative control of step 2,
#: run by test_day1.py, which covers this example)
ADAPTER_CONTROL = "mixed-a100-h100-mig"

#: What the exporter serves for each metric name the adapter can serve (its series, as
#: gauges or counters with a rate per second) and the value the HPA must then read,
#: worked out by hand from the rule's query. Every value is below every target the
#: fleets use, so the HPA wants no more than the pinned maxReplicas.
SERVED = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", 0.25)}, 0.25),
    "DCGM_FI_DEV_GPU_UTIL": ({"DCGM_FI_DEV_GPU_UTIL": ("gauge", 20.0)}, 20.0),
    "vllm_num_requests_waiting": ({"vllm:num_requests_waiting": ("gauge", 1.0)}, 1.0),
    # Triton: rate(queue time, us) / rate(successful requests) = 50000 / 0.25 = 0.2 s per request
    "nv_inference_queue_duration_us": ({"nv_inference_queue_duration_us": ("counter", 50000.0),
                                        "nv_inference_request_success": ("counter", 0.25)}, 200000.0),
}


def _fleet(name: str):
    fleet = gpuvalues.build_fleet(gpuvalues.load_spec(ROOT / "examples" / f"{name}.yaml"))
    assert not fleet.errors, fleet.errors
    return fleet


class FleetCluster:
    """A control plane holding one fleet's nodes; stopped by close()."""

    def __init__(self, fleet, helm4: str, nodes=None):
        self.fleet = fleet
        self.nodes = nodes if nodes is not None else fleetlib.fleet_nodes(fleet)
        self.exporters: list[fleetlib.Exporter] = []
        try:
            self.cluster = harness.Cluster.start()   # binaries missing: FAIL, never skip
        except harness.ClusterError as e:
            pytest.fail(str(e), pytrace=False)
        self.kube = Kube(self.cluster, helm4)
        try:
            self.cluster.add_nodes([n.manifest for n in self.nodes])
        except BaseException:
            self.cluster.stop()
            raise
        self.group_of = {n.manifest["metadata"]["name"]: n.group for n in self.nodes}

    def close(self):
        self.cluster.stop()              # Prometheus and the adapter are its processes
        for e in self.exporters:
            e.shutdown()
            e.server_close()


@pytest.fixture
def fleet_cluster(helm4):
    made = []

    def start(fleet, nodes=None):
        t0 = time.monotonic()
        fc = FleetCluster(fleet, helm4, nodes)
        made.append(fc)
        print(f"\ncluster with {len(fc.nodes)} fleet nodes up in {time.monotonic() - t0:.1f} s")
        return fc

    yield start
    for fc in made:
        fc.close()


def _wire_adapter(fc: FleetCluster, prometheus_bin: str, tmp_path, dcgm_nodes=None):
    """Start Prometheus + the real adapter with the platform release's installed rules;
    point the release's APIService at it. Returns the exporter, {served name: series},
    the rules' YAML and restart(rules_yaml) (the adapter again with other rules)."""
    kube, cluster, platform = fc.kube, fc.cluster, fc.fleet.platform
    [cm] = [c for c in fleetlib.installed(kube, platform, "configmap")
            if c["metadata"]["name"].endswith("-prometheus-adapter")]
    [svc] = [s for s in fleetlib.installed(kube, platform, "service")
             if s["metadata"]["name"].endswith("-prometheus-adapter")]
    [api] = fleetlib.installed(kube, platform, "apiservice")
    rules = tmp_path / "adapter-rules.yaml"
    rules.write_text(cm["data"]["config.yaml"])
    exporter = fleetlib.Exporter(dcgm_nodes)
    fc.exporters.append(exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    prom = fleetlib.start_prometheus(cluster, prometheus_bin, exporter, tmp_path)
    port, adapter = cluster.start_adapter(rules, prom)
    cluster.expose_host_service(platform.namespace, svc["metadata"]["name"], api["metadata"]["name"], port)
    restart = _restarter(fc, prom, tmp_path, svc["metadata"]["name"], api["metadata"]["name"], adapter)
    return exporter, fleetlib.adapter_series(cm["data"]["config.yaml"]), cm["data"]["config.yaml"], restart


def _restarter(fc, prom, tmp_path, svc, api, adapter):
    """restart(rules_yaml): the adapter again with other rules, the APIService moved to it."""
    current = [adapter]

    def restart(rules_yaml: str) -> None:
        fc.cluster.terminate(current[0])
        rules = tmp_path / "adapter-rules-2.yaml"
        rules.write_text(rules_yaml)
        port, current[0] = fc.cluster.start_adapter(rules, prom, name="prometheus-adapter-2")
        fc.cluster.expose_host_service(fc.fleet.platform.namespace, svc, api, port)
    return restart


def _install_at_max(fc: FleetCluster) -> dict[str, int]:
    """Install the platform release (and a DRA pool's ResourceSlices), then every
    workload release; pin each at max."""
    fleetlib.install(fc.kube, fc.fleet.platform)
    dra = [r for r in fc.fleet.workloads if r.values["gpu"]["mode"] == "dra"]
    if dra:
        device_class = e2elib.effective_values(None, dict(dra[0].values))["gpu"]["dra"]["deviceClassName"]
        opted_out = [n.manifest for n in fc.nodes
                     if n.manifest["metadata"]["labels"].get(gpu_fleet.DEPLOY_OPT_OUT) == "false"]
        assert opted_out, "DRA workloads but no node opted out of the device plugin"
        fc.kube.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": e2elib.dra_objects(opted_out, device_class)}))
    for r in fc.fleet.workloads:
        fleetlib.install(fc.kube, r)
    return {r.workload: fleetlib.pin_to_max(fc.kube, r) for r in fc.fleet.workloads}


def _pods_by_workload(fc: FleetCluster) -> dict[str, list[dict]]:
    return {r.workload: fleetlib.workload_pods(fc.kube, r) for r in fc.fleet.workloads}


def _opted_out(ds: dict, node: dict) -> bool:
    """The node carries a label the DaemonSet's node affinity excludes with NotIn (the
    device plugin's opt-out), or lacks one it requires with Exists (mig-manager's
    nvidia.com/mig.config): the scheduler then places no pod there."""
    terms = (ds["spec"]["template"]["spec"].get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []))
    labels = node["metadata"]["labels"]
    return any((e["operator"] == "NotIn" and labels.get(e["key"]) in e["values"])
               or (e["operator"] == "Exists" and e["key"] not in labels)
               for t in terms for e in t.get("matchExpressions", []))


@pytest.mark.parametrize("example", EXAMPLES)
def test_fleet_schedules_at_max_and_every_hpa_reads_its_metric(example, fleet_cluster, prometheus_bin, tmp_path):
    t0 = time.monotonic()
    fleet = _fleet(example)
    fc = fleet_cluster(fleet)
    kube = fc.kube
    want = _install_at_max(fc)

    # 1. every pod of every workload Running at maxReplicas, none Pending
    def all_running():
        got = _pods_by_workload(fc)
        ok = all(len(ps) == want[w] and all(p["status"].get("phase") == "Running" for p in ps)
                 for w, ps in got.items())
        return got if ok else None

    try:
        pods = e2elib.wait(f"{sum(want.values())} pods Running at maxReplicas {want}", all_running, timeout=120)
    except AssertionError:
        got = _pods_by_workload(fc)
        raise AssertionError("not every workload Running at maxReplicas: " + "; ".join(
            f"{w}: {sum(p['status'].get('phase') == 'Running' for p in ps)}/{want[w]} Running, "
            f"Pending {fleetlib.pending(ps)[:2]}" for w, ps in got.items())) from None
    nodes = kube.nodes()
    placements = {p.workload: p for p in fleet.placements}
    used: dict[tuple[str, str], int] = {}
    for w, ps in pods.items():
        place = placements[w]
        for pod in ps:
            node_name = pod["spec"]["nodeName"]
            group = fc.group_of.get(node_name)
            assert group is not None and group.pool == place.pool.name, (
                f"{pod['metadata']['name']} ({w}, pool {place.pool.name}) on {node_name}, "
                f"group {group and group.name} of pool {group and group.pool}")
            limits = fleetlib.gpu_limits(pod)
            if place.mode == "dra":          # devices through the pod's claim, no limits
                assert limits == {} and pod["spec"].get("resourceClaims"), (w, limits)
                continue
            assert limits == {place.resource: place.count}, (w, limits, place.resource, place.count)
            alloc = nodes[node_name]["status"]["allocatable"]
            for res, n in limits.items():
                assert int(alloc.get(res, 0)) >= n, (node_name, res, alloc)
                used[node_name, res] = used.get((node_name, res), 0) + n
    for (node_name, res), n in used.items():
        assert n <= int(nodes[node_name]["status"]["allocatable"][res]), (node_name, res, n)
    for w in (p.workload for p in fleet.placements if p.mode == "dra"):
        [r] = [r for r in fleet.workloads if r.workload == w]
        claims = kube.json("get", "resourceclaims", "-n", r.namespace)["items"]
        mine = [c for c in claims if any(o.get("name") in {p["metadata"]["name"] for p in pods[w]}
                                         for o in c["metadata"].get("ownerReferences", []))]
        assert len(mine) == want[w], f"{w}: {len(mine)} ResourceClaims for {want[w]} pods"
        for c in mine:
            results = c.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
            assert len(results) == placements[w].count, (w, c["metadata"]["name"], results)

    # 1b. the platform release's DaemonSets (device plugin with every node group's config,
    # DCGM exporter, MPS control daemon) Ready on every fleet node their selector admits
    [cm] = [c for c in fleetlib.installed(kube, fleet.platform, "configmap")
            if c["metadata"]["name"].endswith("-device-plugin-configs")] or [None]
    named = {g.labels[fleetlib.DEVICE_PLUGIN_CONFIG_LABEL] for g in fleet.layout.node_groups
             if fleetlib.DEVICE_PLUGIN_CONFIG_LABEL in g.labels}
    if named:
        assert cm is not None and named <= set(cm["data"]), (
            f"node groups select device-plugin configs {sorted(named)}, the platform's ConfigMap "
            f"holds {sorted((cm or {}).get('data', {}))}")
    daemonsets = fleetlib.installed(kube, fleet.platform, "daemonset")
    kinds = {d["metadata"]["name"].removeprefix(f"{fleet.platform.name}-gpu-inference-") for d in daemonsets}
    assert ("device-plugin" in kinds) == bool(fleet.platform.values["platform"]["devicePlugin"]["enabled"]), kinds
    if any(p.sharing == "mps" for p in fleet.placements):
        assert "mps-control-daemon" in kinds, kinds
    for ds in daemonsets:
        sel = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
        admitted = {n for n, o in nodes.items() if all(o["metadata"]["labels"].get(k) == v for k, v in sel.items())
                    and not _opted_out(ds, o)}
        assert admitted, f"DaemonSet {ds['metadata']['name']} (nodeSelector {sel}) admits no fleet node"
        match = e2elib.selector_string(ds["spec"]["selector"]["matchLabels"])
        e2elib.wait(f"DaemonSet {ds['metadata']['name']} Running on its {len(admitted)} nodes", lambda: {
            p["spec"].get("nodeName") for p in kube.pods(fleet.platform.namespace, match)
            if p["status"].get("phase") == "Running"} == admitted, timeout=60)

    # 2. the platform's one adapter serves every HPA's metric, read by the real HPA controller
    check_hpas(fc, prometheus_bin, tmp_path, pods, want, adapter_control=example == ADAPTER_CONTROL)
    print(f"{example}: {sum(want.values())} pods at max in {time.monotonic() - t0:.1f} s")


def check_hpas(fc, prometheus_bin: str, tmp_path, pods: dict, want: dict, *, adapter_control: bool = False,
               dcgm_nodes=None) -> None:
    """Step 2 of the fleet tests: Prometheus and the real adapter with the platform
    release's installed rules; every HPA reads what the exporter serves for its pods
    (with `dcgm_nodes`, DCGM series only for pods on nodes running the DCGM exporter);
    `adapter_control`: then the adapter without the vLLM rule starves exactly
    llama-70b's HPA. `pods`: workload -> its Running pods; `want`: workload -> replicas."""
    fleet, kube = fc.fleet, fc.kube
    adapter_on = fleet.platform.values["platform"]["prometheusAdapter"]["enabled"]
    hpa_workloads = [r for r in fleet.workloads if r.values["autoscaling"]["engine"] == "hpa"]
    exporter = None
    if adapter_on:
        exporter, series, rules_yaml, restart = _wire_adapter(fc, prometheus_bin, tmp_path, dcgm_nodes)
    else:
        assert not hpa_workloads, "HPA workloads but no adapter in the platform release"
    if exporter is not None:
        expected: dict[str, dict[str, float]] = {}
        with exporter.lock:
            for r in hpa_workloads:
                [hpa] = fleetlib.installed(kube, r, "hpa")
                names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
                missing = [n for n in names if n not in series]
                assert not missing, f"{r.workload}: HPA metrics {missing} not served by the adapter rules {sorted(series)}"
                unknown = [n for n in names if n not in SERVED]
                assert not unknown, f"add {unknown} to SERVED (what the exporter serves for it)"
                expected[r.workload] = {n: SERVED[n][1] for n in names}
                for pod in pods[r.workload]:
                    exporter.node_of[r.namespace, pod["metadata"]["name"]] = pod["spec"].get("nodeName", "")
                    exporter.series[r.namespace, pod["metadata"]["name"]] = {
                        k: v for n in names for k, v in SERVED[n][0].items()}

        def hpa_reads(r):
            [hpa] = fleetlib.installed(kube, r, "hpa")
            st = hpa.get("status", {})
            active = any(c["type"] == "ScalingActive" and c["status"] == "True"
                         for c in st.get("conditions", []))
            current = {m["pods"]["metric"]["name"]: fleetlib.quantity(m["pods"]["current"]["averageValue"])
                       for m in st.get("currentMetrics") or [] if m.get("type") == "Pods"}
            ok = active and all(abs(current.get(n, -1) - v) <= 1e-3 * v for n, v in expected[r.workload].items())
            return ok or (st.get("conditions"), current)

        def every_hpa():
            got = {r.workload: hpa_reads(r) for r in hpa_workloads}
            return True if all(v is True for v in got.values()) else None

        try:
            e2elib.wait(f"every HPA ({len(hpa_workloads)}) reading its metric", every_hpa, timeout=90, interval=1)
        except AssertionError:
            raise AssertionError("HPAs not reading their metrics: " + repr(
                {r.workload: hpa_reads(r) for r in hpa_workloads}) + "\nadapter log:\n"
                + fc.cluster.logs("prometheus-adapter", 15)) from None
        # still at max: the served values are below target, and minReplicas holds the floor
        assert {w: len(ps) for w, ps in _pods_by_workload(fc).items()} == want

        if adapter_control:
            # Negative control of the check above (issue 12's bug: an adapter whose rules
            # serve only some workloads' metrics): the same adapter without the vLLM rule.
            # llama-70b's HPA must lose its metric, the MIG workloads' HPAs keep theirs.
            rules = yaml.safe_load(rules_yaml)
            rules["rules"] = [x for x in rules["rules"] if x["name"]["as"] != "vllm_num_requests_waiting"]
            assert rules["rules"], "nothing left to serve"
            restart(yaml.safe_dump(rules))

            def only_vllm_unserved():
                got = {r.workload: hpa_reads(r) for r in hpa_workloads}
                lost = {w for w, v in got.items() if v is not True}
                return lost == {"llama-70b"} and not any(
                    c["type"] == "ScalingActive" and c["status"] == "True"
                    for c in got["llama-70b"][0] or [])
            e2elib.wait("llama-70b's HPA without a metric once its rule is gone, the others reading",
                          only_vllm_unserved, timeout=60, interval=1)


def test_negative_control_group_without_device_plugin_config_stays_pending(fleet_cluster):
    """The renamed time-slicing group (phi-mini asks nvidia.com/gpu.shared) without its
    device-plugin config label runs the default config: whole GPUs, no shared resource and
    no sharing-strategy label; every phi-mini pod stays Pending (Unschedulable: the chart's
    sharing-strategy affinity or the missing resource, whichever filter the scheduler
    reports), while the other pool's workload runs at max. The same fleet with the label
    passes test_fleet_schedules_at_max_... above: the label is the only difference."""
    fleet = _fleet("time-slicing-renamed-and-not")
    place = {p.workload: p for p in fleet.placements}
    assert place["phi-mini"].resource == "nvidia.com/gpu.shared"
    [group] = [g for g in fleet.layout.node_groups if "phi-mini" in g.workloads]
    broken = fleetlib.without_config_label(fleet, group.name)
    fc = fleet_cluster(fleet, fleetlib.fleet_nodes(broken))
    broken_nodes = [n.manifest for n in fc.nodes if n.group.name == group.name]
    assert broken_nodes and not any(fleetlib.DEVICE_PLUGIN_CONFIG_LABEL in n["metadata"]["labels"]
                                    or "nvidia.com/gpu.shared" in n["status"]["allocatable"]
                                    for n in broken_nodes)
    want = _install_at_max(fc)

    def settled():
        got = _pods_by_workload(fc)
        qwen_ok = len(got["qwen-3b"]) == want["qwen-3b"] and all(
            p["status"].get("phase") == "Running" for p in got["qwen-3b"])
        unschedulable = [p for p in got["phi-mini"] if fleetlib.pending([p])
                         and any(why in (e2elib.unschedulable_message(p) or "") for why in
                                 ("Insufficient nvidia.com/gpu.shared", "didn't match Pod's node affinity"))]
        if qwen_ok and len(unschedulable) == want["phi-mini"] == len(got["phi-mini"]):
            return got
        settled.last = {w: [(p["metadata"]["name"], p["status"].get("phase"), e2elib.unschedulable_message(p))
                            for p in ps] for w, ps in got.items()}
        return None

    settled.last = None

    try:
        got = e2elib.wait("every phi-mini pod Unschedulable, qwen-3b Running at max",
                            settled, timeout=60)
    except AssertionError:
        raise AssertionError(f"negative control did not settle: {settled.last}") from None
    assert not any(p["spec"].get("nodeName") for p in got["phi-mini"])
