"""The fleet harness's injected-nodes control (issue 12, issue 13 item 7): every example
fleet runs from bare nodes in the day-1 test (tests/e2e/test_day1.py, issue 22); what stays
here is check_hpas (the day-1 test's HPA step) and one negative control on nodes
injected with the upstream device plugin's and GFD's end state (tests/e2e/fleet.py
fleet_gpu_nodes: the oracle's verdict on each node group's hardware and config, never
gpuvalues.expected_nodes): a time-slicing fleet whose renamed node group lacks its
device-plugin config label leaves that group's workload Pending. Its nodes are injected
because the fault is in the node state itself (a label the printed install would set).
"""
from __future__ import annotations

import threading
import time

import pytest
import yaml

import gpuvalues
from tests.conftest import ROOT
from tests.e2e import e2elib, fleetlib
from tests.e2e.conftest import Kube, harness

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
    """Install the platform release, then every workload release; pin each at max."""
    fleetlib.install(fc.kube, fc.fleet.platform)
    for r in fc.fleet.workloads:
        fleetlib.install(fc.kube, r)
    return {r.workload: fleetlib.pin_to_max(fc.kube, r) for r in fc.fleet.workloads}


def _pods_by_workload(fc: FleetCluster) -> dict[str, list[dict]]:
    return {r.workload: fleetlib.workload_pods(fc.kube, r) for r in fc.fleet.workloads}


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
            e2elib.wait(f"every HPA ({len(hpa_workloads)}) reading its metric", every_hpa, timeout=180, interval=1)
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
                          only_vllm_unserved, timeout=120, interval=1)


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
                            settled, timeout=150)
    except AssertionError:
        raise AssertionError(f"negative control did not settle: {settled.last}") from None
    assert not any(p["spec"].get("nodeName") for p in got["phi-mini"])
