"""`gpuvalues doctor` on the real control plane (issue 27): a fleet brought up from bare
nodes through the node agents (test_day1's harness: kwok kubelets, the node-agent emulator
tests/e2e/nodeagent.py running upstream's NFD, device plugin and GFD, the real
prometheus-adapter and Prometheus), then each link broken in turn by the change a user or
an operator makes, and repaired: doctor must name exactly that link (one finding code,
on the object broken) and nothing else; the healthy fleet gives exit 0 and no finding.

One cluster per fleet; every break is undone before the next, and the healthy state is
checked again between them (doctor exit 0), so each step starts from the same place. The
time-slicing fleet has no MIG node and no DCGM metric: mig-manager failed and a DCGM field
not collected are broken on a second cluster, the mig-and-tp-one-pool fleet.
The runs use the real CLI. Also checked here:

- dump mode equals live mode: `--dump-to DIR` on the live run, then `--dump DIR` gives the
  same report (healthy and broken);
- read-only: doctor runs with a ServiceAccount token bound to exactly docs/doctor.md's
  ClusterRole (verbs get/list/watch only) and gets the same report as the admin's.

Where a break stands in for a component that cannot run here, it says so: the remediation
controller's quarantine is its taint put on by kubectl (the controller itself is
test_remediation.py's), and the exported_pod case is a second real Prometheus scraping the
same exporter with honor_labels false (what a ServiceMonitor with honorLabels false does).
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.e2e import day1lib, e2elib, fleetlib
from tests.e2e.test_day1 import day1  # noqa: F401  (the fixture: bare nodes + node agents)

pytestmark = pytest.mark.e2e

EXAMPLE = "time-slicing-renamed-and-not"
SPEC = ROOT / "examples" / f"{EXAMPLE}.yaml"
#: where to write the healthy and broken dumps for tests/unit/data/doctor (regenerating them)
FIXTURE_OUT = os.environ.get("DOCTOR_FIXTURE_OUT")


def _doctor(kubeconfig: Path, prometheus: str | None, *extra: str, spec: Path = SPEC) -> tuple[int, dict]:
    args = [str(day1lib.gpuvalues_bin()), "--output", "json", "doctor", str(spec), *extra]
    if "--dump" not in extra:
        args += ["--kubeconfig", str(kubeconfig)]
        if prometheus:
            args += ["--prometheus", prometheus]
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 1), f"doctor exit {res.returncode}: {res.stderr[-2000:]}"
    return res.returncode, json.loads(res.stdout)


def _codes(report: dict) -> list[tuple[str, str]]:
    return sorted((f["code"], f["object"]) for f in report["findings"])


def _read_only_kubeconfig(kube, tmp_path: Path) -> Path:
    """A kubeconfig whose user is a ServiceAccount token bound to docs/doctor.md's ClusterRole only."""
    text = (ROOT / "docs" / "doctor.md").read_text()
    role = yaml.safe_load(re.search(r"<!-- doctor-clusterrole -->\n```yaml\n(.*?)```", text, re.S).group(1))
    assert {v for r in role["rules"] for v in r["verbs"]} == {"get", "list", "watch"}, role
    kube.kubectl("create", "namespace", "doctor")
    kube.kubectl("create", "serviceaccount", "doctor", "-n", "doctor")
    kube.kubectl("apply", "-f", "-", input=json.dumps(role))
    kube.kubectl("create", "clusterrolebinding", "gpuvalues-doctor", "--clusterrole=gpuvalues-doctor",
                 "--serviceaccount=doctor:doctor")
    token = kube.kubectl("create", "token", "doctor", "-n", "doctor", "--duration=1h").stdout.strip()
    admin = json.loads(Path(kube.cluster.kubeconfig).read_text())
    admin["users"] = [{"name": "doctor", "user": {"token": token}}]
    admin["contexts"] = [{"name": "e2e", "context": {"cluster": "e2e", "user": "doctor"}}]
    path = tmp_path / "doctor-kubeconfig"
    path.write_text(json.dumps(admin))
    # the token really is read-only: a write is refused
    res = subprocess.run([str(day1lib.TOOLS_BIN / "kubectl"), "--kubeconfig", str(path), "label", "node",
                          day1lib.SYSTEM_NODE, "x=y"], capture_output=True, text=True)
    assert res.returncode != 0 and "forbidden" in res.stderr.lower(), res
    return path


class _Up:
    """A fleet brought up from bare nodes (test_day1's harness), every HPA pinned at max,
    its pods Running, and the metrics chain wired as test_fleet does: the test exporter
    serving each pod's series (the servers' and DCGM's, the latter only while a DCGM
    exporter pod runs on the pod's node), a real Prometheus scraping it, the real adapter
    on the installed rules behind the installed APIService. `settle` polls doctor until it
    names exactly the expected codes; `close` stops what this started."""

    def __init__(self, start, tmp_path: Path, prometheus_bin: str, spec: Path):
        import gpuvalues
        self.spec, self.tmp = spec, tmp_path
        self.spec_doc = yaml.safe_load(spec.read_text())
        self.fleet = fleet = gpuvalues.build_fleet(gpuvalues.load_spec(spec))
        self.printed = printed = day1lib.values(spec, tmp_path / "out", day1lib.gpuvalues_bin())
        kube, agents, self.hardware = start(self.spec_doc)     # the day1 fixture
        self.kube, self.agents = kube, agents
        self.kubeconfig = Path(kube.cluster.kubeconfig)
        day1lib.run_printed(kube, printed, self.spec_doc,
                            before_helm=lambda r, ns: day1lib.prerequisites(kube, r, ns, printed))
        self.want = want = {r.workload: fleetlib.pin_to_max(kube, r) for r in fleet.workloads}

        seen: dict = {}

        def all_running():
            got = {r.workload: fleetlib.workload_pods(kube, r) for r in fleet.workloads}
            seen["pods"] = {w: sorted(f"{p['metadata']['name']}: {p['status'].get('phase')} "
                                      f"{e2elib.unschedulable_message(p) or ''}" for p in ps) for w, ps in got.items()}
            return got if all(len(ps) == want[w] and all(p["status"].get("phase") == "Running" for p in ps)
                              for w, ps in got.items()) else None
        try:
            self.pods = e2elib.wait(f"{sum(want.values())} pods Running at maxReplicas", all_running, timeout=240)
        except AssertionError as e:
            raise AssertionError(f"{e}; pods: {seen.get('pods')}; node agents: {agents.errors}") from None
        platform = fleet.platform
        [self.cm] = [c for c in fleetlib.installed(kube, platform, "configmap")
                     if c["metadata"]["name"].endswith("-prometheus-adapter")]
        [self.svc] = [s for s in fleetlib.installed(kube, platform, "service")
                      if s["metadata"]["name"].endswith("-prometheus-adapter")]
        [self.api] = fleetlib.installed(kube, platform, "apiservice")
        self.exporter = fleetlib.Exporter(agents.dcgm_nodes)
        threading.Thread(target=self.exporter.serve_forever, daemon=True).start()
        for r in fleet.workloads:
            self.serve(r, self.pods[r.workload])
        self.prom = fleetlib.start_prometheus(kube.cluster, prometheus_bin, self.exporter, tmp_path).rstrip("/")
        self.rules = tmp_path / "rules.yaml"
        self.adapter = self.start_adapter(self.cm["data"]["config.yaml"], "prometheus-adapter")

    def serve(self, r, pods) -> None:
        """The series of `r`'s autoscaling metrics for these pods (test_fleet's values)."""
        from tests.e2e import test_fleet as tf
        names = [m["name"] for m in (r.values.get("autoscaling") or {}).get("metrics") or ()]
        with self.exporter.lock:
            for pod in pods:
                key = (r.namespace, pod["metadata"]["name"])
                self.exporter.node_of[key] = pod["spec"]["nodeName"]
                self.exporter.series[key] = {k: v for n in names for k, v in tf.SERVED[n.replace(":", "_")][0].items()}

    def start_adapter(self, rules_yaml: str, name: str) -> subprocess.Popen:
        self.rules.write_text(rules_yaml)
        port, proc = self.kube.cluster.start_adapter(self.rules, self.prom + "/", name=name)
        self.kube.cluster.expose_host_service(self.fleet.platform.namespace, self.svc["metadata"]["name"],
                                              self.api["metadata"]["name"], port)
        return proc

    def settle(self, what: str, expected: set[str], timeout: float = 90, prometheus: str | None = None,
               objects: set[str] | None = None, kubeconfig: Path | None = None) -> dict:
        """Poll doctor until its finding codes are `expected` (on `objects`, when given):
        the report then names only that link (and exit 1, or 0 when healthy)."""
        last = {}

        def check():
            rc, rep = _doctor(kubeconfig or self.kubeconfig, prometheus or self.prom, spec=self.spec)
            last["rep"] = rep
            ok = {f["code"] for f in rep["findings"]} == expected and rc == (1 if expected else 0)
            return rep if ok and (objects is None or {f["object"] for f in rep["findings"]} == objects) else None
        try:
            return e2elib.wait(what, check, timeout=timeout, interval=1)
        except AssertionError:
            raise AssertionError(f"{what}: doctor found {_codes(last.get('rep') or {'findings': []})}; "
                                 f"agent errors {self.agents.errors}") from None

    def same_from_dump(self, name: str, rep: dict, prometheus: str | None = None) -> None:
        """The dump of this state (`--dump-to`, then `--dump`) gives the live findings."""
        d = self.tmp / f"dump-{name}"
        _doctor(self.kubeconfig, prometheus or self.prom, "--dump-to", str(d), spec=self.spec)
        rc, dumped = _doctor(self.kubeconfig, None, "--dump", str(d), spec=self.spec)
        assert rc == (1 if rep["findings"] else 0) and _codes(dumped) == _codes(rep), (_codes(dumped), _codes(rep))

    def configmap(self, suffix: str) -> dict:
        [cm] = [c for c in fleetlib.installed(self.kube, self.fleet.platform, "configmap")
                if c["metadata"]["name"].endswith(suffix)]
        return cm

    def patch_configmap(self, cm: dict, data: dict) -> None:
        """An edit outside helm (kubectl), as a user makes it."""
        self.kube.kubectl("patch", "configmap", "-n", cm["metadata"]["namespace"], cm["metadata"]["name"],
                          "--type=merge", "-p", json.dumps({"data": data}))

    def restart_agent(self, component: str, node: str) -> None:
        """Delete the platform agent's pod on `node` (its DaemonSet makes a new one)."""
        ns = self.fleet.platform.namespace
        for p in self.kube.pods(ns, f"app.kubernetes.io/name=gpu-inference-{component}"):
            if p["spec"].get("nodeName") == node:
                self.kube.kubectl("delete", "pod", "-n", ns, p["metadata"]["name"], "--wait=false")

    def close(self) -> None:
        self.exporter.shutdown()
        self.exporter.server_close()


def test_doctor_names_each_broken_link(day1, tmp_path, prometheus_bin):  # noqa: F811
    t0 = time.monotonic()
    up = _Up(day1, tmp_path, prometheus_bin, SPEC)
    kube, agents, fleet, printed = up.kube, up.agents, up.fleet, up.printed
    kubeconfig, prom, want, exporter = up.kubeconfig, up.prom, up.want, up.exporter
    cm, api, platform = up.cm, up.api, fleet.platform
    try:
        adapter = up.adapter
        ro_kubeconfig = _read_only_kubeconfig(kube, tmp_path)
        settle = up.settle

        # 0. healthy: exit 0, no finding; the dump gives the same report; the read-only token too
        healthy = settle("a healthy fleet: no finding", set(), timeout=120)
        assert healthy["workloads"] and all(w["running"] == w["desired"] == want[w["workload"]]
                                            for w in healthy["workloads"]), healthy["workloads"]
        assert not healthy["notes"], healthy["notes"]
        dump = tmp_path / "dump-healthy"
        rc, live = _doctor(kubeconfig, prom, "--dump-to", str(dump))
        rc2, dumped = _doctor(kubeconfig, None, "--dump", str(dump))
        assert (rc, live) == (rc2, dumped) == (0, healthy), (live, dumped)
        rc3, read_only = _doctor(ro_kubeconfig, prom)
        assert (rc3, read_only) == (0, healthy), read_only
        if FIXTURE_OUT:
            _save_fixture(dump, Path(FIXTURE_OUT) / "healthy")

        nodes = sorted(n for n, o in kube.nodes().items()
                       if o["metadata"]["labels"].get(day1lib.GROUP_LABEL) == "l4")
        node = nodes[0]
        ns = platform.namespace
        broken = []

        def step(code: str, obj: str | set[str], what: str, breaks, repairs, prometheus: str | None = None,
                 timeout: float = 90):
            """Break, see doctor name exactly `code` on `obj` (or those objects), repair, see it healthy."""
            t = time.monotonic()
            breaks()
            want = {obj} if isinstance(obj, str) else obj
            rep = settle(f"{what}: {code}", {code}, timeout=timeout, prometheus=prometheus, objects=want)
            if code in ("DR003", "DR018", "DR019"):
                up.same_from_dump(code, rep, prometheus)   # the dump of a broken cluster gives the same findings
            repairs()
            settle(f"{what}: repaired", set(), timeout=timeout)
            broken.append((code, what, round(time.monotonic() - t, 1)))

        # 1. GFD not running on a node: the node opts out of it (GPU Operator's label)
        gfd_opt_out = "nvidia.com/gpu.deploy.gpu-feature-discovery"
        step("DR002", f"Node/{node}", "GFD not running",
             lambda: kube.kubectl("label", "node", node, f"{gfd_opt_out}=false"),
             lambda: kube.kubectl("label", "node", node, f"{gfd_opt_out}-"))
        # 2. a wrong device-plugin config label: the device plugin re-runs with that config
        # (another config of the same ConfigMap; the repair restores the node's own label)
        dp_label = "nvidia.com/device-plugin.config"
        [dp_cm] = [c for c in fleetlib.installed(kube, platform, "configmap")
                   if c["metadata"]["name"].endswith("-device-plugin-configs")]
        original = dict(dp_cm["data"])
        own = kube.nodes()[node]["metadata"]["labels"][dp_label]
        other = sorted(k for k in original if k != own)[0]
        step("DR003", f"Node/{node}", "wrong device-plugin config label",
             lambda: kube.kubectl("label", "node", node, "--overwrite", f"{dp_label}={other}"),
             lambda: kube.kubectl("label", "node", node, "--overwrite", f"{dp_label}={own}"))
        # 3. resource name mismatch: the device-plugin ConfigMap's configs lose renameByDefault
        # (an edit outside helm); the plugin on the node restarts and advertises nvidia.com/gpu

        def dp_pod_restart():
            for p in kube.pods(ns, "app.kubernetes.io/name=gpu-inference-device-plugin"):
                if p["spec"].get("nodeName") == node:
                    kube.kubectl("delete", "pod", "-n", ns, p["metadata"]["name"], "--wait=false")

        def set_dp_config(data):
            kube.kubectl("patch", "configmap", "-n", ns, dp_cm["metadata"]["name"], "--type=merge",
                         "-p", json.dumps({"data": data}))
            dp_pod_restart()
        unrenamed = {k: v.replace("renameByDefault: true", "renameByDefault: false") for k, v in original.items()}
        assert unrenamed != original, original
        # the nodes whose group selects a renamed config re-read it (the emulator's config-manager, as
        # upstream, or the restarted pod): doctor must name exactly the nodes that then
        # advertise nvidia.com/gpu where gpu.shared belongs (DR006), as the API server shows
        # them, and the nodes whose GFD re-read it while their plugin still serves the old
        # config (GFD's product then carries the -SHARED suffix: DR021; new pods asking for
        # the NVIDIA-L4 product would not land there); each names the ConfigMap's drift. Each
        # node changes on its own agent tick: doctor is polled until its findings and the API
        # server's nodes agree; only nodes whose own config is renamed may be named
        renamed = {f"Node/{n}" for n in nodes
                   if "renameByDefault: true" in original[kube.nodes()[n]["metadata"]["labels"][dp_label]]}
        assert renamed, original
        t = time.monotonic()
        set_dp_config(unrenamed)
        product = "nvidia.com/gpu.product"

        def mismatch():
            rc, rep = _doctor(kubeconfig, prom)
            live = kube.nodes()
            lacking = {f"Node/{n}" for n in nodes if not int(live[n]["status"]["allocatable"].get("nvidia.com/gpu.shared", 0))}
            relabelled = {f"Node/{n}" for n in nodes if f"Node/{n}" not in lacking
                          and live[n]["metadata"]["labels"].get(product, "").endswith("-SHARED")}
            want = {("DR006", o) for o in lacking} | {("DR021", o) for o in relabelled}
            return rep if rc == 1 and lacking and set(_codes(rep)) == want else None
        try:
            rep = e2elib.wait("resource name mismatch: DR006 (and DR021 where only GFD re-read the config)",
                              mismatch, timeout=120, interval=1)
        except AssertionError:
            raise AssertionError(f"resource name mismatch: doctor found {_codes(_doctor(kubeconfig, prom)[1])}") from None
        assert all(dp_cm["metadata"]["name"] in f["message"] for f in rep["findings"]), rep["findings"]
        assert {f["object"] for f in rep["findings"]} <= renamed, (_codes(rep), renamed)
        d = tmp_path / "dump-DR006"
        _doctor(kubeconfig, prom, "--dump-to", str(d))
        rc, dumped = _doctor(kubeconfig, None, "--dump", str(d))
        dumped_codes = {c for c, _ in _codes(dumped)}
        assert rc == 1 and "DR006" in dumped_codes and dumped_codes <= {"DR006", "DR021"}, _codes(dumped)
        set_dp_config(original)
        settle("resource name mismatch: repaired", set(), timeout=120)
        broken.append(("DR006", "resource name mismatch", round(time.monotonic() - t, 1)))
        # 4. an adapter rule missing: the adapter's ConfigMap without the vLLM rule, the
        # adapter restarted on it (as its pod would)
        adapter_cm = cm["metadata"]["name"]
        rules_doc = yaml.safe_load(cm["data"]["config.yaml"])
        # another metric's rule stays, so the adapter still serves the API group (with no
        # rule at all prometheus-adapter serves none: the APIService would fail too)
        kept = [x for x in rules_doc["rules"] if x["name"]["as"] != "vllm_num_requests_waiting"]
        other_rule = json.loads(json.dumps(rules_doc["rules"][0]).replace("num_requests_waiting", "num_requests_running"))
        without = yaml.safe_dump({**rules_doc, "rules": kept + [other_rule]})
        assert without != cm["data"]["config.yaml"]
        hpa_objs = {f"HorizontalPodAutoscaler/{r.namespace}/{h['metadata']['name']}"
                    for r in fleet.workloads for h in fleetlib.installed(kube, r, "hpa")}
        assert len(hpa_objs) == len(fleet.workloads), hpa_objs

        def set_rules(text):
            nonlocal adapter
            kube.kubectl("patch", "configmap", "-n", ns, adapter_cm, "--type=merge",
                         "-p", json.dumps({"data": {"config.yaml": text}}))
            kube.cluster.terminate(adapter)
            restarts.append(text)
            adapter = up.start_adapter(text, f"prometheus-adapter-{len(restarts)}")
            # the restarted adapter is the APIService's backend again once the aggregator's
            # availability check passes (the link under test is the rule, not this restart)
            e2elib.wait("the custom metrics APIService Available after the adapter restart", lambda: any(
                c["type"] == "Available" and c["status"] == "True"
                for c in kube.json("get", "apiservice", api["metadata"]["name"]).get("status", {}).get("conditions", [])),
                timeout=180, interval=1)
        restarts: list[str] = []
        t = time.monotonic()
        set_rules(without)
        rep = settle("adapter rule missing: DR009", {"DR009"}, timeout=150, objects=hpa_objs)
        assert {f["object"] for f in rep["findings"]} == hpa_objs, _codes(rep)
        set_rules(cm["data"]["config.yaml"])
        settle("adapter rule restored", set(), timeout=150)
        broken.append(("DR009", "adapter rule missing", round(time.monotonic() - t, 1)))
        # 5. the APIService unavailable: pointed at a port nothing serves
        apiservice = api["metadata"]["name"]
        current_port = kube.json("get", "apiservice", apiservice)["spec"]["service"]["port"]
        step("DR008", "APIService/v1beta1.custom.metrics.k8s.io", "APIService unavailable",
             lambda: kube.kubectl("patch", "apiservice", apiservice, "--type=merge", "-p",
                                  json.dumps({"spec": {"service": {"port": 1}}})),
             lambda: kube.kubectl("patch", "apiservice", apiservice, "--type=merge", "-p",
                                  json.dumps({"spec": {"service": {"port": current_port}}})), timeout=180)
        # 6. exported_pod labels: a Prometheus whose scrape does not honour the exporter's
        # labels while the target has its own pod/namespace (a ServiceMonitor's target
        # labels, honorLabels false): the series' pod becomes exported_pod
        (tmp_path / "p2").mkdir()
        _, prom2 = e2elib.start_prometheus(kube.cluster, prometheus_bin, tmp_path / "p2", "fleet", exporter.port,
                                           honor_labels=False, name="prometheus-exported",
                                           labels={"namespace": ns, "pod": "scrape-target-0"})
        t = time.monotonic()
        rep = settle("series labelled exported_pod: DR011", {"DR011"}, prometheus=prom2, objects=hpa_objs)
        assert {f["object"] for f in rep["findings"]} == hpa_objs, _codes(rep)
        broken.append(("DR011", "exported_pod labels", round(time.monotonic() - t, 1)))
        # 7. the series absent: a Prometheus that scrapes an exporter serving none of the
        # servers' series (a ServiceMonitor that selects no server Service)
        other = fleetlib.Exporter()
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            (tmp_path / "p3").mkdir()
            _, prom3 = e2elib.start_prometheus(kube.cluster, prometheus_bin, tmp_path / "p3", "fleet", other.port,
                                               name="prometheus-other")
            t = time.monotonic()
            rep = settle("series absent: DR010", {"DR010"}, prometheus=prom3, objects=hpa_objs)
            assert {f["object"] for f in rep["findings"]} == hpa_objs, _codes(rep)
            broken.append(("DR010", "series absent", round(time.monotonic() - t, 1)))
        finally:
            other.shutdown()
            other.server_close()
        # 8. a PDB that blocks drains (edited outside helm)
        r0 = fleet.workloads[0]
        [pdb] = fleetlib.installed(kube, r0, "pdb")
        pdb_spec = pdb["spec"]
        step("DR013", f"PodDisruptionBudget/{r0.namespace}/{pdb['metadata']['name']}", "PDB blocking a drain",
             lambda: kube.kubectl("patch", "pdb", "-n", r0.namespace, pdb["metadata"]["name"], "--type=json", "-p",
                                  json.dumps([{"op": "replace", "path": "/spec",
                                               "value": {"selector": pdb_spec["selector"], "maxUnavailable": 0}}])),
             lambda: kube.kubectl("patch", "pdb", "-n", r0.namespace, pdb["metadata"]["name"], "--type=json", "-p",
                                  json.dumps([{"op": "replace", "path": "/spec", "value": pdb_spec}])))
        # 9. a quarantined node: the remediation controller's taint (put on by kubectl here)
        step("DR014", f"Node/{node}", "quarantined node",
             lambda: kube.kubectl("taint", "node", node, "remediation.gpu-inference.io/gpu-unhealthy=true:NoSchedule"),
             lambda: kube.kubectl("taint", "node", node, "remediation.gpu-inference.io/gpu-unhealthy-"))
        # 9b. a platform ConfigMap drifted in a way that breaks no link yet: the DCGM
        # exporter's counters without a field no HPA of this fleet reads (kubectl edit)
        counters = up.configmap("-dcgm-exporter-counters")
        csv = counters["data"]["counters.csv"]
        [field] = [ln for ln in csv.splitlines(keepends=True) if ln.startswith("DCGM_FI_DEV_GPU_UTIL,")]
        step("DR018", f"ConfigMap/{ns}/{counters['metadata']['name']}", "platform ConfigMap drift",
             lambda: up.patch_configmap(counters, {"counters.csv": csv.replace(field, "")}),
             lambda: up.patch_configmap(counters, {"counters.csv": csv}))
        # 9c. GFD's product label not the node group's GPU: the node's GPUs become another
        # model (its mock hardware the l40s node's, as a node of the wrong instance type in
        # the node group); GFD restarted on the node reads them, the running device plugin
        # does not re-enumerate (upstream: only on its restart), so its resources stay right
        [l40s] = [n for n, o in kube.nodes().items() if o["metadata"]["labels"].get(day1lib.GROUP_LABEL) == "l40s"]
        own_hw = copy.deepcopy(agents.nodes[node].hardware)
        assert agents.nodes[l40s].hardware["count"] == own_hw["count"], (own_hw, agents.nodes[l40s].hardware)

        def set_hw(hw):
            with agents.lock:
                agents.nodes[node].hardware = copy.deepcopy(hw)
            up.restart_agent("gpu-feature-discovery", node)
        step("DR019", f"Node/{node}", "GFD's product not the group's GPU",
             lambda: set_hw(agents.nodes[l40s].hardware), lambda: set_hw(own_hw), timeout=120)
        # 10. image drift: the DCGM exporter's image changed outside helm
        [dcgm] = [d for d in fleetlib.installed(kube, platform, "daemonset")
                  if d["metadata"]["name"].endswith("-dcgm-exporter")]
        container = dcgm["spec"]["template"]["spec"]["containers"][0]

        def set_image(image):
            kube.kubectl("set", "image", "daemonset", "-n", ns, dcgm["metadata"]["name"], f"{container['name']}={image}")
        drift_image = container["image"].rsplit(":", 1)[0] + ":0.0.1-drift"
        t = time.monotonic()
        set_image(drift_image)
        rep = settle("image drift: DR015", {"DR015"}, timeout=120)
        dcgm_obj = {f["object"] for f in rep["findings"]}
        assert dcgm_obj and all(o.startswith(f"Pod/{ns}/{dcgm['metadata']['name']}-") for o in dcgm_obj), dcgm_obj
        set_image(container["image"])
        settle("image restored", set(), timeout=120)
        broken.append(("DR015", "image drift", round(time.monotonic() - t, 1)))
        # 11. values drift: a workload release upgraded with a value the fleet does not have
        r1 = fleet.workloads[-1]
        values_file = printed.out / f"{r1.name}.values.yaml"

        def helm_upgrade(*extra):
            kube.helm("upgrade", "--install", r1.name, str(ROOT / "charts" / "gpu-inference"), "-n", r1.namespace,
                      "-f", str(values_file), "--force-conflicts", *extra)   # the HPA pin is kubectl's
        def serve_new_pods():
            """The new annotation rolls the pods: the servers' series follow them (the test
            exporter is keyed by pod, as a real server's own /metrics is)."""
            def rolled():
                ps = fleetlib.workload_pods(kube, r1)
                return ps if ps and all(p["status"].get("phase") == "Running" for p in ps) else None
            up.serve(r1, e2elib.wait("the upgraded pods Running", rolled, timeout=120))
        step("DR016", f"Release/{r1.namespace}/{r1.name}", "values drift",
             lambda: (helm_upgrade("--set", "podAnnotations.drift=yes"), serve_new_pods()),
             lambda: (helm_upgrade(), serve_new_pods()))
        # 12. a fleet release not installed: the other workload's release uninstalled
        # (checked last: reinstalling re-pins)
        t = time.monotonic()
        kube.helm("uninstall", r0.name, "-n", r0.namespace)
        rep = settle("a release uninstalled: DR001", {"DR001"}, objects={f"Release/{r0.namespace}/{r0.name}"})
        assert _codes(rep) == [("DR001", f"Release/{r0.namespace}/{r0.name}")], _codes(rep)
        broken.append(("DR001", "release missing", round(time.monotonic() - t, 1)))
        print(f"\ndoctor e2e: {len(broken)} links broken and named in {time.monotonic() - t0:.1f} s: {broken}")
        assert len({c for c, _, _ in broken}) == 14, broken
        assert not agents.errors, agents.errors
    finally:
        up.close()


MIG_SPEC = ROOT / "examples" / "mig-and-tp-one-pool.yaml"


def test_doctor_names_mig_manager_failed_and_a_dcgm_field_not_collected(day1, tmp_path, prometheus_bin):  # noqa: F811
    """The two links the time-slicing fleet lacks, on a MIG fleet (mig-and-tp-one-pool:
    MIG node groups applied by the emulated mig-manager, two HPAs on a DCGM metric), each
    broken for real and repaired; the healthy fleet first (exit 0, no finding, its dump too).

    - mig-manager failed: the mig-parted ConfigMap loses the config one node group's label
      selects (an edit outside helm) and mig-manager restarts on a node of that group: the
      real `nvidia-mig-parted assert --valid-config` refuses it and the node's
      mig.config.state becomes failed. doctor names DR004 on that node alone, the
      ConfigMap's drift in it as the cause (not a DR018 beside it); the nodes whose
      mig-manager did not restart keep their applied layout and are not named.
    - a DCGM field not collected: the DCGM exporter's counters lose the field the two
      HPAs' metric reads: DR012 on those HPAs alone.
    """
    t0 = time.monotonic()
    up = _Up(day1, tmp_path, prometheus_bin, MIG_SPEC)
    kube, fleet = up.kube, up.fleet
    try:
        healthy = up.settle("the MIG fleet healthy: no finding", set(), timeout=180)
        assert healthy["workloads"] and all(w["running"] == w["desired"] == up.want[w["workload"]]
                                            for w in healthy["workloads"]), healthy["workloads"]
        assert not healthy["notes"], healthy["notes"]
        up.same_from_dump("mig-healthy", healthy)
        mig_cm = up.configmap("-mig-manager")
        [key] = list(mig_cm["data"])
        parted = yaml.safe_load(mig_cm["data"][key])
        group = next(g for g in fleet.layout.node_groups if g.mig_devices and any(g.mig_devices))
        config = group.labels["nvidia.com/mig.config"]
        assert config in parted["mig-configs"], (config, list(parted["mig-configs"]))
        node = sorted(n for n, o in kube.nodes().items()
                      if o["metadata"]["labels"].get(day1lib.GROUP_LABEL) == group.name)[0]
        state = "nvidia.com/mig.config.state"

        def node_state():
            return kube.nodes()[node]["metadata"]["labels"].get(state)
        t = time.monotonic()
        without = {**parted, "mig-configs": {k: v for k, v in parted["mig-configs"].items() if k != config}}
        up.patch_configmap(mig_cm, {key: yaml.safe_dump(without)})
        up.restart_agent("mig-manager", node)
        e2elib.wait(f"{state}=failed on {node}, mig-parted's own error", lambda: node_state() == "failed" and any(
            "selected mig-config not present" in e for e in up.agents.errors.values()), timeout=120)
        rep = up.settle("mig-manager failed: DR004", {"DR004"}, timeout=120, objects={f"Node/{node}"})
        assert config in rep["findings"][0]["message"] and mig_cm["metadata"]["name"] in rep["findings"][0]["message"], rep
        up.same_from_dump("DR004", rep)
        up.patch_configmap(mig_cm, {key: mig_cm["data"][key]})
        up.restart_agent("mig-manager", node)
        e2elib.wait(f"{state}=success on {node}", lambda: node_state() == "success", timeout=120)
        up.settle("mig-manager failed: repaired", set(), timeout=120)
        t_mig = round(time.monotonic() - t, 1)

        t = time.monotonic()
        counters = up.configmap("-dcgm-exporter-counters")
        csv = counters["data"]["counters.csv"]
        dcgm_hpas = {f"HorizontalPodAutoscaler/{r.namespace}/{h['metadata']['name']}"
                     for r in fleet.workloads for h in fleetlib.installed(kube, r, "hpa")
                     if any(m["name"].startswith("DCGM_") for m in r.values["autoscaling"]["metrics"])}
        assert dcgm_hpas, "no HPA of the MIG fleet reads a DCGM metric"
        [field] = {m["name"] for r in fleet.workloads for m in r.values["autoscaling"]["metrics"]
                   if m["name"].startswith("DCGM_")}
        [line] = [ln for ln in csv.splitlines(keepends=True) if ln.startswith(field + ",")]
        up.patch_configmap(counters, {"counters.csv": csv.replace(line, "")})
        rep = up.settle("a DCGM field not collected: DR012", {"DR012"}, objects=dcgm_hpas)
        up.same_from_dump("DR012", rep)
        up.patch_configmap(counters, {"counters.csv": csv})
        up.settle("a DCGM field not collected: repaired", set())
        print(f"\ndoctor MIG e2e: DR004 {t_mig} s, DR012 {round(time.monotonic() - t, 1)} s, "
              f"all {time.monotonic() - t0:.1f} s")
    finally:
        up.close()


def _save_fixture(dump: Path, out: Path) -> None:
    """The dump as the unit tests' fixture (tests/unit/data/doctor), pretty but compact:
    managed fields are already dropped by --dump-to."""
    out.mkdir(parents=True, exist_ok=True)
    for f in dump.iterdir():
        (out / f.name).write_text(f.read_text())
