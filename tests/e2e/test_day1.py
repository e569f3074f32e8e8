"""Day 1 from bare nodes (issue 22 items 3-4): the install `gpuvalues values` prints, run
exactly as printed on nodes that carry only what the cloud provider and the kubelet give
them, must bring the fleet up through the node agents the install deploys.

The cluster is the real control plane (tests/e2e/conftest.py); kwok plays the kubelets
and the node-agent emulator (tests/e2e/nodeagent.py) plays the containers kwok cannot
run: for each platform pod Running on a node it runs that image's upstream code with the
pod's env, args and ConfigMaps on the node's mock hardware. Nothing in these tests
labels or resources a node (the printed `kubectl label` step sets the config selectors;
everything else comes from NFD, GFD and the device plugin).

test_bare_nodes_come_up_through_their_agents walks one fleet (the platform release's
switches set by hand, the rest as printed) through each missing producer in turn, so
every step is a transition the agents make and each gap is a negative control:

1. no NFD: every platform DaemonSet schedules nowhere
   (`feature.node.kubernetes.io/pci-10de.present` has no producer) and every workload
   pod stays Pending;
2. the platform's NFD on: the real nfd-worker reads each node's mock sysfs, the real
   nfd-master labels the GPU nodes (not the CPU one), the DaemonSets schedule, the
   device plugin publishes each node group's resources (the oracle's, for the config the
   group's label selects); GFD off: the workload pods stay Pending (nothing produces
   `nvidia.com/gpu.product`), and `validate` of the spec with GFD off says so (GV021);
3. GFD on: its labels reach the nodes through NFD's master, equal to the oracle's GFD for
   that hardware and config, and every workload pod runs on its pool;
4. the DCGM exporter off: no node serves DCGM series any more.

test_day1_fleet_from_bare_nodes runs, for every example fleet, exactly the commands
`gpuvalues values` prints, in order, and asserts every workload at maxReplicas Running on
its pool with the resource it requests (a DRA pod: its ResourceClaim allocated by the real
scheduler from the emulated DRA driver's ResourceSlice of its node), every DaemonSet's
pods Running on exactly the nodes it admits, each MIG node's layout (what mig-parted's
own code applied to its mock GPUs) equal to the plan with
`nvidia.com/mig.config.state=success`, and every HPA reading its metric (test_fleet's
check_hpas, DCGM series only from nodes running the exporter). Where the printed install
lacks a producer the pods need (missing_producers: GFD off, MIG without mig-manager), the
test checks the predicted outcome (every workload pod Unschedulable) and reports an
expected failure (xfail), never a pass. A spec whose platform deploys no NFD gets the
cluster's own (NFD's chart at the pinned tag, the GPU Operator's worker settings:
day1lib.NFD_VALUES); a DRA fleet gets the cluster's NVIDIA DRA driver
(day1lib.install_dra_driver) after the printed install, whose DRA pods first stay
Unschedulable without it, the scheduler and `gpuvalues doctor` saying why (the negative
control _dra_without_the_driver); a one-workload spec's single combined release is read as
both platform and workload (day1lib.as_printed).

test_cluster_nfd_present_comes_up_on_the_clusters_own_nfd: `cluster.nfd: present`, with
its negative control (no NFD on the cluster: DaemonSets unscheduled), and on the same
cluster the GPU Operator mode's ClusterPolicy applied to the real API server.
"""
from __future__ import annotations

import json
import subprocess
import time
import types

import yaml

from tests.conftest import ROOT
from tests.e2e import day1lib, e2elib, fleetlib, nodeagent
from tests.e2e.conftest import Kube, harness

import pytest

EXAMPLE = "time-slicing-renamed-and-not"
PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"


@pytest.fixture
def day1(helm4, tmp_path):
    """start(spec_doc) -> (kube, agents, node hardware): a fresh cluster of the spec's
    bare nodes with the emulator running; everything stopped afterwards."""
    made = []

    def start(spec_doc):
        t0 = time.monotonic()
        try:
            cluster = harness.Cluster.start()
        except harness.ClusterError as e:
            pytest.fail(str(e), pytrace=False)
        made.append(cluster)
        manifests, hardware = day1lib.bare_nodes(spec_doc)
        cluster.add_nodes(manifests)
        nodes = nodeagent.mock_nodes(tmp_path, hardware)
        agents = nodeagent.NodeAgents(cluster, nodes, tmp_path).start()
        made.append(agents)
        print(f"\n{len(manifests)} bare nodes up in {time.monotonic() - t0:.1f} s")
        return Kube(cluster, helm4), agents, hardware

    yield start
    for m in reversed(made):
        m.stop()


def _gpu_nodes(kube) -> dict[str, dict]:
    return {n: o for n, o in kube.nodes().items() if n != day1lib.SYSTEM_NODE}


def _workload_pods(kube, namespaces) -> list[dict]:
    return [p for ns in namespaces for p in kube.pods(ns)
            if e2elib.GPU_TAINT_KEY in str(p["spec"].get("tolerations", []))
            and p["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "device-plugin"
            and not p["metadata"].get("deletionTimestamp")]


def _helm_platform(kube, printed, release: str, namespace: str, file=None, **sets) -> None:
    """The platform release from its printed values file (or `file`), with `--set` overrides."""
    args = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sets.items()]
    kube.helm("upgrade", "--install", release, str(ROOT / "charts" / "gpu-inference"), "-n", namespace,
              "--create-namespace", "-f", str(file or printed.values_file(release)),
              *[x for a in args for x in ("--set", a)])


def test_bare_nodes_come_up_through_their_agents(day1, tmp_path):
    """The agents' chain on one fleet, one missing producer at a time (the platform
    release's switches set explicitly, the workloads as printed)."""
    import gpuvalues
    spec_path = ROOT / "examples" / f"{EXAMPLE}.yaml"
    spec_doc = yaml.safe_load(spec_path.read_text())
    fleet = gpuvalues.build_fleet(gpuvalues.load_spec(spec_path))
    kube, agents, hardware = day1(spec_doc)
    printed = day1lib.values(spec_path, tmp_path / "out", day1lib.gpuvalues_bin())
    rel, ns = fleet.platform.name, fleet.platform.namespace
    # bare: no node has a GPU label or resource before anything runs
    for _name, node in kube.nodes().items():
        assert not [k for k in node["metadata"]["labels"] if "nvidia.com" in k or "feature.node" in k], node
        assert not [k for k in node["status"]["allocatable"] if k.startswith("nvidia.com/")], node
    # the node groups' config selectors, as printed; then the releases
    for argv in day1lib.label_commands(printed.out / "nodes", spec_doc):
        kube.kubectl(*argv[1:])
    _helm_platform(kube, printed, rel, ns, **{"platform.nfd.enabled": False, "platform.gfd.enabled": False})
    for r in fleet.workloads:
        day1lib.prerequisites(kube, r.name, r.namespace, printed)
        kube.helm("upgrade", "--install", r.name, str(ROOT / "charts" / "gpu-inference"), "-n", r.namespace,
                  "--create-namespace", "-f", str(printed.out / f"{r.name}.values.yaml"))

    def workload_pods():
        return [p for r in fleet.workloads for p in fleetlib.workload_pods(kube, r)]

    # 1. no NFD: the platform's DaemonSets schedule nowhere, the workloads stay Pending
    def settled_unscheduled():
        ds = day1lib.daemonsets(kube, ns)
        ps = workload_pods()
        return (ds and all(d.get("status", {}).get("observedGeneration")
                           and d["status"].get("desiredNumberScheduled", 0) == 0 for d in ds)
                and ps and all(e2elib.unschedulable_message(p) for p in ps))
    e2elib.wait("platform DaemonSets unscheduled and workload pods Unschedulable without NFD",
                settled_unscheduled, timeout=120)
    assert not any(PCI_LABEL in n["metadata"]["labels"] for n in kube.nodes().values())

    # 2. NFD on (its CRDs first, docs/day1-contract.md): the real worker and master label
    # the GPU nodes from their PCI devices; the device plugin publishes each group's
    # resources; GFD is off, so nothing produces gpu.product and the workloads stay Pending
    kube.kubectl("apply", "--server-side", "-k", str(day1lib.nfd_crds()))
    _helm_platform(kube, printed, rel, ns, **{"platform.nfd.enabled": True, "platform.gfd.enabled": False})
    gpu_nodes = [n for n in kube.nodes() if n != day1lib.SYSTEM_NODE]

    def pci_labels():
        got = {n: o["metadata"]["labels"].get(PCI_LABEL) for n, o in kube.nodes().items()}
        return all(got[n] == "true" for n in gpu_nodes) and got
    try:
        got = e2elib.wait(f"NFD's {PCI_LABEL} on every GPU node", pci_labels, timeout=90)
    except AssertionError:
        raise AssertionError(f"no NFD labels; agent errors {agents.errors}; log {agents.log[-10:]}") from None
    assert got[day1lib.SYSTEM_NODE] is None, "NFD labelled the node without NVIDIA PCI devices"
    groups = {g["name"]: g for g in yaml.safe_load((printed.out / "nodes" / "node-groups.yaml").read_text())}
    verdicts = _oracle_run(printed, hardware, groups)
    want_res = {n: v.resources for n, v in verdicts.items()}
    assert want_res and all(want_res.values()), want_res
    try:
        e2elib.wait("the device plugin's resources on every GPU node", lambda: all(
            all(str(kube.nodes()[n]["status"]["allocatable"].get(r)) == str(v) for r, v in want.items())
            for n, want in want_res.items()), timeout=90)
    except AssertionError:
        raise AssertionError(f"resources {[(n, o['status']['allocatable']) for n, o in kube.nodes().items()]}"
                             f"; agent errors {agents.errors}") from None
    time.sleep(3)
    ps = workload_pods()
    assert ps and all(fleetlib.pending([p]) for p in ps), "workloads scheduled without GFD's labels"
    assert not any("nvidia.com/gpu.product" in o["metadata"]["labels"] for o in kube.nodes().values())
    # ... and `validate` of the same fleet with GFD switched off in the spec names the
    # missing producer (GV021) of the label the Pending pods select
    off = tmp_path / "gfd-off.yaml"
    off.write_text(yaml.safe_dump({**spec_doc, "platform": {**(spec_doc.get("platform") or {}),
                                                            "gpuFeatureDiscovery": False}}))
    res = subprocess.run([str(day1lib.gpuvalues_bin()), "validate", str(off)], capture_output=True, text=True)
    assert res.returncode == 1 and "GV021" in res.stdout + res.stderr \
        and "nvidia.com/gpu.product" in res.stdout + res.stderr, (res.returncode, res.stdout, res.stderr)

    # 3. GFD on: its labels reach the nodes through NFD's master, equal to the oracle's GFD
    # for that hardware and config; every workload pod runs with the resource it requests
    _helm_platform(kube, printed, rel, ns, **{"platform.nfd.enabled": True, "platform.gfd.enabled": True})
    want_labels = {n: v.labels for n, v in verdicts.items()}
    try:
        e2elib.wait("GFD's labels (the oracle's) on every GPU node", lambda: all(
            all(kube.nodes()[n]["metadata"]["labels"].get(k) == v for k, v in want.items())
            for n, want in want_labels.items()), timeout=90)
    except AssertionError:
        raise AssertionError(f"agent errors {agents.errors}; log {agents.log[-10:]}") from None

    def running():
        got = workload_pods()
        return got if got and all(p["status"].get("phase") == "Running" for p in got) else None
    pods = e2elib.wait("every workload pod Running", running, timeout=90)
    nodes = kube.nodes()
    place = {p.workload: p for p in fleet.placements}
    for p in pods:
        w = p["metadata"]["labels"].get("app.kubernetes.io/instance")
        node = nodes[p["spec"]["nodeName"]]
        assert node["metadata"]["labels"][day1lib.POOL_LABEL] == place[w].pool.name, (w, node["metadata"]["name"])
        for res, n in fleetlib.gpu_limits(p).items():
            assert int(node["status"]["allocatable"].get(res, 0)) >= n, (p["metadata"]["name"], res)

    # 4. a stopped agent stops its effect: DCGM exporter off, no node exports DCGM series
    # (first on every GPU node: its pods start beside GFD's, not before the workloads, so waited for)
    e2elib.wait("a DCGM exporter running on every GPU node", lambda: agents.dcgm_nodes() == set(gpu_nodes),
                timeout=120)
    _helm_platform(kube, printed, rel, ns, **{"platform.nfd.enabled": True, "platform.gfd.enabled": True,
                                             "platform.dcgmExporter.enabled": False})
    e2elib.wait("no DCGM exporter running", lambda: not agents.dcgm_nodes(), timeout=120)
    assert not agents.errors, agents.errors


def _group_of(printed, groups) -> dict[str, dict]:
    """node name -> its node group (as the printed label step assigned them)."""
    out = {}
    for argv in day1lib.label_commands(printed.out / "nodes", {}):
        node = argv[3]
        labels = dict(a.split("=", 1) for a in argv[5:])
        out[node] = next(g for g in groups.values() if g["labels"] == labels and node.startswith(g["pool"]))
    return out


def _oracle_run(printed, hardware, groups) -> dict:
    """Per GPU node, the oracle's verdict for its hardware and the config its group's
    label selects from the rendered platform (an independent run of upstream's code)."""
    from tests.e2e import fleet as gpu_fleet
    from tests.oracle import oraclelib as ol
    vals = yaml.safe_load((printed.out / "gpu-platform.values.yaml").read_text())
    vals["platform"]["gfd"]["enabled"] = True
    objs = gpu_fleet._platform_objects("gpu-platform", "gpu-platform", yaml.safe_dump(vals))
    configs = ol.device_plugin_configs(objs)
    cm = gpu_fleet._config_manager_env(objs)
    plugin_env, plugin_args = ol.container_env_args(objs, "-device-plugin", "nvidia-device-plugin")
    gfd_env, _ = ol.container_env_args(objs, "-gpu-feature-discovery", "gpu-feature-discovery")
    out = {}
    for node, g in _group_of(printed, groups).items():
        name = gpu_fleet.select_config(g["labels"].get(gpu_fleet.DEVICE_PLUGIN_CONFIG_LABEL, ""), set(configs),
                                       cm.get("DEFAULT_CONFIG", ""), cm.get("FALLBACK_STRATEGIES", "").split(","))
        v = ol.device_plugin(configs[name], hardware[node], plugin_env=plugin_env, plugin_args=plugin_args,
                             gfd_env=gfd_env)
        assert v.ok, v.error
        out[node] = v
    return out


# --- every example fleet, as printed -------------------------------------------------------

#: every example fleet: a one-workload spec's combined release read as both platform and
#: workload (day1lib.as_printed); dra-fleet with the cluster's NVIDIA DRA driver
#: (day1lib.install_dra_driver, its kubelet plugin emulated by the node agents), installed
#: after the printed install, whose DRA pods stay Unschedulable until then (the negative
#: control: _dra_without_the_driver)
FLEETS = ["mixed-a100-h100-mig", "mig-and-tp-one-pool", "time-slicing-renamed-and-not",
          "mps-two-models", "mixed-a100-h100-h200", "keda-fleet", "rtx4090-time-slicing", "nvlink-tp8",
          "dra-fleet"]
#: GFD's labels the chart's workload pods select (templates: gpuProducts affinity, MIG
#: strategy, sharing strategy)
GFD_SELECTED = ("nvidia.com/gpu.product", "nvidia.com/mig.strategy", "nvidia.com/gpu.sharing-strategy")


def _kinds(objs) -> dict[str, dict]:
    """The rendered platform's node agents by kind (nodeagent.agent_of of its containers)."""
    out = {}
    for o in objs:
        if o["kind"] in ("DaemonSet", "Deployment"):
            for c in o["spec"]["template"]["spec"]["containers"]:
                a = nodeagent.agent_of(c)
                if a:
                    out[a] = o
    return out


def missing_producers(fleet, platform_objs) -> list[str]:
    """What the rendered install lacks for the fleet to come up, as the issue states it:
    the labels every pod selects and the MIG layout need their producers."""
    kinds = _kinds(platform_objs)
    out = []
    if "gfd" not in kinds:
        out.append("GFD (platform.gfd.enabled false): nothing produces " + ", ".join(GFD_SELECTED))
    if any(g.mig_devices and any(g.mig_devices) for g in fleet.layout.node_groups) and "mig-manager" not in kinds:
        out.append("mig-manager: the plan's MIG layout has nothing to apply it")
    return out


@pytest.mark.parametrize("example", FLEETS)
def test_day1_fleet_from_bare_nodes(example, day1, tmp_path, prometheus_bin):
    import gpuvalues
    from tests.e2e import fleet as gpu_fleet
    from tests.e2e import test_fleet as tf

    t0 = time.monotonic()
    spec_path = ROOT / "examples" / f"{example}.yaml"
    spec_doc = yaml.safe_load(spec_path.read_text())
    fleet = gpuvalues.build_fleet(gpuvalues.load_spec(spec_path))
    printed = day1lib.values(spec_path, tmp_path / "out", day1lib.gpuvalues_bin())
    assert printed.commands, "`gpuvalues values` printed no install order"
    fleet = day1lib.as_printed(fleet, printed)
    platform_file = printed.values_file(fleet.platform.name)
    assert platform_file is not None, f"no printed helm line installs {fleet.platform.name}: {printed.commands}"
    objs = gpu_fleet._platform_objects(fleet.platform.name, fleet.platform.namespace, platform_file.read_text())
    kube, agents, hardware = day1(spec_doc)
    kinds = _kinds(objs)
    if "nfd-worker" not in kinds:     # the platform deploys no NFD: the cluster has its own
        day1lib.install_cluster_nfd(kube, day1lib.nfd_chart())
    dra = {p.workload for p in fleet.placements if p.mode == "dra"}
    day1lib.run_printed(kube, printed, spec_doc,
                        before_helm=lambda r, ns: day1lib.prerequisites(kube, r, ns, printed))
    want = {r.workload: fleetlib.pin_to_max(kube, r) for r in fleet.workloads}
    if dra:
        # DRA pools: first without the cluster's NVIDIA DRA driver (the negative control),
        # then with it: the same install comes up once the driver publishes the devices
        _dra_without_the_driver(kube, fleet, spec_path, dra)
        _dra_without_the_kubelet_plugin(kube, fleet, spec_path, dra)
        day1lib.install_dra_driver(kube)
    missing = missing_producers(fleet, objs)
    if missing:
        # The predicted gap, checked: every workload pod Unschedulable, then reported as
        # the expected failure it is (never a pass).
        def all_unschedulable():
            ps = [p for r in fleet.workloads for p in fleetlib.workload_pods(kube, r)]
            return ps and all(e2elib.unschedulable_message(p) for p in ps)
        e2elib.wait(f"every workload pod Unschedulable ({'; '.join(missing)})", all_unschedulable, timeout=120)
        pytest.xfail("the printed install lacks: " + "; ".join(missing))
    # 1. every workload at maxReplicas Running on its own pool with the resource it requests
    def all_running():
        got = {r.workload: fleetlib.workload_pods(kube, r) for r in fleet.workloads}
        return got if all(len(ps) == want[w] and all(p["status"].get("phase") == "Running" for p in ps)
                          for w, ps in got.items()) else None
    try:
        pods = e2elib.wait(f"{sum(want.values())} pods Running at maxReplicas", all_running, timeout=150)
    except AssertionError:
        got = {r.workload: fleetlib.workload_pods(kube, r) for r in fleet.workloads}
        raise AssertionError("not every workload Running at maxReplicas: " + "; ".join(
            f"{w}: {sum(p['status'].get('phase') == 'Running' for p in ps)}/{want[w]}, "
            f"Pending {fleetlib.pending(ps)[:2]}" for w, ps in got.items())
            + f"\nagent errors: {agents.errors}") from None
    nodes = kube.nodes()
    place = {p.workload: p for p in fleet.placements}
    for w, ps in pods.items():
        for pod in ps:
            node = nodes[pod["spec"]["nodeName"]]
            assert node["metadata"]["labels"][day1lib.POOL_LABEL] == place[w].pool.name, (w, node["metadata"]["name"])
            if w in dra:                  # devices through the pod's claim, no limits
                assert fleetlib.gpu_limits(pod) == {} and pod["spec"].get("resourceClaims"), w
                continue
            assert fleetlib.gpu_limits(pod) == {place[w].resource: place[w].count}, (w, fleetlib.gpu_limits(pod))
            assert int(node["status"]["allocatable"].get(place[w].resource, 0)) >= place[w].count
    if dra:
        _check_dra_claims(kube, fleet, pods, want, agents)

    # 2. every platform pod Running on exactly the nodes its DaemonSet admits
    for ds in kube.json("get", "daemonsets", "-A")["items"]:
        admitted = {n for n, o in nodes.items() if e2elib.daemonset_admits(ds, o)}
        match = e2elib.selector_string(ds["spec"]["selector"]["matchLabels"])
        e2elib.wait(f"DaemonSet {ds['metadata']['name']} Running on its {len(admitted)} nodes", lambda: {
            p["spec"].get("nodeName") for p in kube.pods(ds["metadata"]["namespace"], match)
            if p["status"].get("phase") == "Running"} == admitted, timeout=120)
        if ds["metadata"]["namespace"] == fleet.platform.namespace:
            assert admitted, f"platform DaemonSet {ds['metadata']['name']} admits no node"

    # 3. each node's MIG layout (what mig-manager applied to its mock GPUs) is the plan's
    groups = {g.name: g for g in fleet.layout.node_groups}
    by_node = {n: groups[o["metadata"]["labels"][day1lib.GROUP_LABEL]] for n, o in nodes.items()
               if o["metadata"]["labels"].get(day1lib.GROUP_LABEL) in groups}
    if not by_node:        # the older printed step (a comment): the groups as label_commands took them
        by_node = {argv[3]: g for argv in day1lib.label_commands(printed.out / "nodes", spec_doc)
                   for g in groups.values() if dict(a.split("=", 1) for a in argv[5:]) == dict(g.labels)}
    assert by_node, "no node belongs to a node group"
    for name, g in by_node.items():
        if g.mig_devices is None:
            continue
        plan = {str(i): sorted(p for p, n in d.items() for _ in range(n)) for i, d in enumerate(g.mig_devices) if d}

        def applied(name=name):
            got = {k: sorted(v) for k, v in (agents.nodes[name].hardware.get("mig") or {}).items()}
            return got == plan and kube.json("get", "node", name)["metadata"]["labels"].get(
                nodeagent.MIG_STATE_LABEL) == "success"
        # a node whose MIG slices no pod needed may still be reconfiguring when the pods run:
        # waited for (mig-manager sets the state after the layout, in a later write)
        try:
            e2elib.wait(f"{name}: the plan's MIG layout applied, mig.config.state success", applied, timeout=120)
        except AssertionError:
            raise AssertionError((name, agents.nodes[name].hardware.get("mig"), plan, agents.errors)) from None

    # 4. every HPA reads its metric through the platform's adapter (test_fleet's check,
    # DCGM series only from nodes running the DCGM exporter)
    fc = types.SimpleNamespace(kube=kube, cluster=kube.cluster, fleet=fleet, exporters=[])
    try:
        tf.check_hpas(fc, prometheus_bin, tmp_path, pods, want, dcgm_nodes=agents.dcgm_nodes,
                      adapter_control=example == tf.ADAPTER_CONTROL)
    finally:
        for e in fc.exporters:
            e.shutdown()
            e.server_close()
    assert not agents.errors, agents.errors
    print(f"{example}: day 1 at max in {time.monotonic() - t0:.1f} s")


def _dra_without_the_driver(kube, fleet, spec_path, dra: set[str]) -> None:
    """Negative control of the DRA fleet (issue 22): the printed install on a cluster without
    NVIDIA's DRA driver (its chart not installed: no DeviceClass gpu.nvidia.com, no kubelet
    plugin, so the node agents publish no device). Every DRA workload pod stays
    Unschedulable, the real scheduler naming the missing DeviceClass; no ResourceSlice
    exists; and `gpuvalues doctor` (the live check) names the missing DeviceClass for each
    DRA workload (DR023), and nothing else for them."""
    seen: list = []

    def unschedulable():
        # the scheduler's first word may be about the claim not created yet: waited for the
        # message that names the DeviceClass
        ps = [p for r in fleet.workloads if r.workload in dra for p in fleetlib.workload_pods(kube, r)]
        msgs = [e2elib.unschedulable_message(p) or "" for p in ps]
        seen[:] = sorted(set(msgs))
        return ps if ps and all(nodeagent.DRA_DRIVER in m for m in msgs) else None
    try:
        pods = e2elib.wait(f"every DRA workload pod Unschedulable without the DRA driver, the scheduler naming "
                           f"DeviceClass {nodeagent.DRA_DRIVER}", unschedulable, timeout=120)
    except AssertionError as e:
        raise AssertionError(f"{e}; the scheduler says {seen}") from None
    print(f"without the DRA driver, the scheduler says: {sorted({e2elib.unschedulable_message(p) for p in pods})}")
    assert not kube.json("get", "resourceslices")["items"], "devices published without the driver"
    _doctor_says(kube, spec_path, dra, "DR023", f"DeviceClass/{nodeagent.DRA_DRIVER}",
                 "doctor naming the missing DeviceClass for every DRA workload")


def _dra_without_the_kubelet_plugin(kube, fleet, spec_path, dra: set[str]) -> None:
    """Negative control, the next step of a half-done install: the driver's DeviceClass
    applied but not its kubelet plugin (DaemonSet), so no node publishes a device. The DRA
    pods stay Pending (the scheduler now finds the class, and no device to allocate), no
    ResourceSlice appears, and doctor names the unpublished devices of each DRA workload's
    pool (DR024) instead of the missing class."""
    day1lib.install_dra_driver(kube, frozenset({"Namespace", "ServiceAccount", "DeviceClass"}))
    assert kube.json("get", "deviceclass", nodeagent.DRA_DRIVER)["metadata"]["name"] == nodeagent.DRA_DRIVER
    _doctor_says(kube, spec_path, dra, "DR024", "Pod/", "doctor naming the pool without published devices")
    assert not kube.json("get", "resourceslices")["items"], "devices published without the kubelet plugin"
    ps = [p for r in fleet.workloads if r.workload in dra for p in fleetlib.workload_pods(kube, r)]
    assert ps and all(p["status"].get("phase") == "Pending" for p in ps), [p["status"] for p in ps]


def _doctor_says(kube, spec_path, dra: set[str], code: str, obj: str, what: str) -> None:
    """Poll `gpuvalues doctor` (the live check) until it names `code` (an object starting
    with `obj`) for exactly the DRA workloads, and no other finding for them. The pods are
    refused at once, while the node agents may still be coming up (NFD, then GFD): doctor
    reports those node-side gaps at their root too, so it is polled."""
    last: dict = {}

    def says():
        res = subprocess.run([str(day1lib.gpuvalues_bin()), "--output", "json", "doctor", str(spec_path),
                              "--kubeconfig", str(kube.cluster.kubeconfig)], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode in (0, 1), (res.returncode, res.stderr[-2000:])
        last["report"] = report = json.loads(res.stdout)
        mine = [f for f in report["findings"] if f["workload"] in dra]
        named = {f["workload"] for f in mine if f["code"] == code and f["object"].startswith(obj)}
        return res.returncode == 1 and named == dra and all(f["code"] == code for f in mine)
    try:
        e2elib.wait(what, says, timeout=120, interval=2)
    except AssertionError as e:
        raise AssertionError(f"{e}; doctor's findings {last.get('report', {}).get('findings')}") from None
    print(f"{what}: " + "; ".join(f"{f['code']} {f['object']}: {f['message']}" for f in last["report"]["findings"]))


def _check_dra_claims(kube, fleet, pods, want, agents) -> None:
    """Each DRA pod's ResourceClaim allocated by the real scheduler with its count of
    devices, all from the emulated driver's ResourceSlice of the pod's own node; slices
    exist only on nodes where the driver's kubelet plugin runs."""
    place = {p.workload: p for p in fleet.placements}
    slices = kube.json("get", "resourceslices")["items"]
    plugin_nodes = {p["spec"].get("nodeName") for p in kube.pods(day1lib.DRA_NAMESPACE)
                    if p["status"].get("phase") == "Running"}
    assert slices and {s["spec"]["nodeName"] for s in slices} == plugin_nodes, (
        [s["spec"]["nodeName"] for s in slices], plugin_nodes)
    devices = {(s["spec"]["pool"]["name"], d["name"]) for s in slices for d in s["spec"]["devices"]}
    for w in (w for w in want if place[w].mode == "dra"):
        [r] = [r for r in fleet.workloads if r.workload == w]
        claims = kube.json("get", "resourceclaims", "-n", r.namespace)["items"]
        node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods[w]}
        mine = [(c, node_of[o["name"]]) for c in claims for o in c["metadata"].get("ownerReferences", [])
                if o.get("name") in node_of]
        assert len(mine) == want[w], f"{w}: {len(mine)} ResourceClaims for {want[w]} pods"
        for c, node in mine:
            results = c.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
            assert len(results) == place[w].count, (w, c["metadata"]["name"], results)
            for x in results:
                assert x["driver"] == nodeagent.DRA_DRIVER and x["pool"] == node \
                    and (x["pool"], x["device"]) in devices, (w, x, node)


def test_negative_control_mig_manager_without_the_config(day1, tmp_path):
    """mig-manager deployed with a mig-parted ConfigMap that lacks the config a node's
    label selects (the chart's default, `all-disabled` only): the real `nvidia-mig-parted
    assert --valid-config` refuses it, the node's `nvidia.com/mig.config.state` becomes
    `failed` and never `success`, no MIG resource appears and every MIG workload pod stays
    Pending, while the same cluster with the printed config comes up (the config is the
    only difference)."""
    import gpuvalues
    example = "mig-and-tp-one-pool"
    spec_path = ROOT / "examples" / f"{example}.yaml"
    spec_doc = yaml.safe_load(spec_path.read_text())
    fleet = gpuvalues.build_fleet(gpuvalues.load_spec(spec_path))
    mig = [p for p in fleet.placements if p.mode == "mig"]
    assert mig, f"{example} has no MIG workload"
    kube, agents, hardware = day1(spec_doc)
    printed = day1lib.values(spec_path, tmp_path / "out", day1lib.gpuvalues_bin())
    rel, ns = fleet.platform.name, fleet.platform.namespace
    for argv in day1lib.label_commands(printed.out / "nodes", spec_doc):
        kube.kubectl(*argv[1:])
    kube.kubectl("apply", "--server-side", "-k", str(day1lib.nfd_crds()))
    base = {"platform.nfd.enabled": True, "platform.gfd.enabled": True, "platform.migManager.enabled": True}
    # the printed platform values with mig-manager's config replaced by the chart's
    # default (`all-disabled` only): the one change of this control
    vals = yaml.safe_load(printed.values_file(rel).read_text())
    vals["platform"].setdefault("migManager", {})["config"] = {
        "version": "v1", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": False}]}}
    without = tmp_path / "platform-without-mig-config.yaml"
    without.write_text(yaml.safe_dump(vals))
    _helm_platform(kube, printed, rel, ns, file=without, **base)
    for r in fleet.workloads:
        day1lib.prerequisites(kube, r.name, r.namespace, printed)
        kube.helm("upgrade", "--install", r.name, str(ROOT / "charts" / "gpu-inference"), "-n", r.namespace,
                  "--create-namespace", "-f", str(printed.out / f"{r.name}.values.yaml"))
    mig_nodes = [n for n, o in kube.nodes().items() if nodeagent.MIG_CONFIG_LABEL in o["metadata"]["labels"]]
    assert mig_nodes

    def states():
        return {n: kube.nodes()[n]["metadata"]["labels"].get(nodeagent.MIG_STATE_LABEL) for n in mig_nodes}
    try:
        e2elib.wait("mig.config.state failed on every MIG node, mig-parted's error reported", lambda: all(
            v == "failed" for v in states().values()) and any(
            "selected mig-config not present" in e for e in agents.errors.values()), timeout=90)
    except AssertionError:
        raise AssertionError(f"states {states()}; agent errors {agents.errors}; log {agents.log[-8:]}; "
                             f"pods {[(p['metadata']['name'], p['spec'].get('nodeName'), p['status'].get('phase')) for p in kube.pods(ns)]}") from None
    time.sleep(5)
    assert set(states().values()) == {"failed"}, states()
    nodes = kube.nodes()
    assert not [k for n in mig_nodes for k in nodes[n]["status"]["allocatable"]
                if k.startswith("nvidia.com/mig-") and int(nodes[n]["status"]["allocatable"][k])], "MIG resources"
    mig_pods = [p for r in fleet.workloads if r.workload in {m.workload for m in mig}
                for p in fleetlib.workload_pods(kube, r)]
    assert mig_pods and all(fleetlib.pending([p]) for p in mig_pods), [p["status"].get("phase") for p in mig_pods]
    assert not any(agents.nodes[n].hardware.get("mig") for n in mig_nodes), "a MIG layout was applied"

    # the printed config: the same nodes reconfigure and the MIG pods run
    mig_config = yaml.safe_load((printed.out / "nodes" / "mig-parted-config.yaml").read_text())
    vals["platform"]["migManager"]["config"] = mig_config
    without.write_text(yaml.safe_dump(vals))
    _helm_platform(kube, printed, rel, ns, file=without, **base)
    e2elib.wait("mig.config.state success on every MIG node", lambda: set(states().values()) == {"success"},
                timeout=120)
    e2elib.wait("every MIG workload pod Running", lambda: all(
        p["status"].get("phase") == "Running" for r in fleet.workloads if r.workload in {m.workload for m in mig}
        for p in fleetlib.workload_pods(kube, r)), timeout=120)


def test_cluster_nfd_present_comes_up_on_the_clusters_own_nfd(day1, tmp_path):
    """A spec that says `cluster.nfd: present` (issue 22 item 1, "switchable when the
    cluster already has it"): the printed install deploys no NFD. Negative control: on a
    cluster that, against the spec, has no NFD, no platform DaemonSet schedules anywhere
    and every workload pod stays Unschedulable. Then the cluster's own NFD (its chart at
    the pinned tag, day1lib.NFD_VALUES) labels the GPU nodes and the same install comes
    up: every DaemonSet on the nodes it admits, every workload pod Running.

    On the same cluster, first (sharing its start-up): the GPU Operator mode's
    ClusterPolicy for this spec (cluster_policy_is_accepted)."""
    import gpuvalues
    from tests.e2e import fleet as gpu_fleet
    spec_doc = yaml.safe_load((ROOT / "examples" / f"{EXAMPLE}.yaml").read_text())
    spec_doc["cluster"]["nfd"] = "present"
    spec_path = tmp_path / "nfd-present.yaml"
    spec_path.write_text(yaml.safe_dump(spec_doc))
    fleet = gpuvalues.build_fleet(gpuvalues.load_spec(spec_path))
    assert not fleet.errors, fleet.errors
    printed = day1lib.values(spec_path, tmp_path / "out", day1lib.gpuvalues_bin())
    objs = gpu_fleet._platform_objects(fleet.platform.name, fleet.platform.namespace,
                                       printed.values_file(fleet.platform.name).read_text())
    kinds = _kinds(objs)
    assert "nfd-worker" not in kinds and "nfd-master" not in kinds, sorted(kinds)
    assert {"device-plugin", "gfd"} <= set(kinds), sorted(kinds)
    kube, agents, _ = day1(spec_doc)
    cluster_policy_is_accepted(kube, spec_doc, tmp_path)
    day1lib.run_printed(kube, printed, spec_doc,
                        before_helm=lambda r, ns: day1lib.prerequisites(kube, r, ns, printed))
    ns = fleet.platform.namespace

    def workload_pods():
        return [p for r in fleet.workloads for p in fleetlib.workload_pods(kube, r)]

    def unscheduled():
        ds, ps = day1lib.daemonsets(kube, ns), workload_pods()
        return (ds and all(d.get("status", {}).get("observedGeneration")
                           and d["status"].get("desiredNumberScheduled", 0) == 0 for d in ds)
                and ps and all(e2elib.unschedulable_message(p) for p in ps))
    e2elib.wait("no NFD on the cluster: platform DaemonSets unscheduled, workload pods Unschedulable",
                unscheduled, timeout=120)
    time.sleep(3)
    assert unscheduled(), "something scheduled without NFD's labels"
    assert not any(PCI_LABEL in o["metadata"]["labels"] for o in kube.nodes().values())

    day1lib.install_cluster_nfd(kube, day1lib.nfd_chart())

    def running():
        ps = workload_pods()
        return ps and all(p["status"].get("phase") == "Running" for p in ps)
    try:
        e2elib.wait("the cluster's NFD: every workload pod Running", running, timeout=150)
    except AssertionError:
        raise AssertionError(f"agent errors {agents.errors}; log {agents.log[-10:]}") from None
    nodes = kube.nodes()
    for ds in day1lib.daemonsets(kube, ns):
        admitted = {n for n, o in nodes.items() if e2elib.daemonset_admits(ds, o)}
        assert admitted, ds["metadata"]["name"]
        match = e2elib.selector_string(ds["spec"]["selector"]["matchLabels"])
        e2elib.wait(f"DaemonSet {ds['metadata']['name']} Running on its {len(admitted)} nodes", lambda: {
            p["spec"].get("nodeName") for p in kube.pods(ns, match)
            if p["status"].get("phase") == "Running"} == admitted, timeout=60)
    assert not agents.errors, agents.errors


def cluster_policy_is_accepted(kube, spec_doc: dict, tmp_path) -> None:
    """The GPU Operator mode (`platform.gpuOperator: true`): the ClusterPolicy that the
    gpu-operator chart (v26.7.0, tests/chart/data) renders with the real Helm 4 from the
    operator values `gpuvalues values` writes is accepted by the real API server, with
    strict field validation, under the ClusterPolicy CRD built from the schema at that
    tag (tests/chart/data/crds/clusterpolicy-v1.yaml); the same object with a misspelled
    field and with a wrong type is refused (negative controls). The operator itself does
    not run here (its operands need a container runtime and the driver: ci/e2e/README)."""
    import copy

    from tests.chart.chartlib import HELMS, by_kind
    from tests.chart.test_gpu_operator import render_operator
    doc = copy.deepcopy(spec_doc)
    doc.setdefault("platform", {})["gpuOperator"] = True
    doc["cluster"].pop("nfd", None)
    path = tmp_path / "operator.yaml"
    path.write_text(yaml.safe_dump(doc))
    printed = day1lib.values(path, tmp_path / "operator-out", day1lib.gpuvalues_bin())
    op_file = printed.values_file("gpu-operator")
    assert op_file is not None, printed.commands
    [cp] = by_kind(render_operator(HELMS["helm"], yaml.safe_load(op_file.read_text())), "ClusterPolicy")
    crd = yaml.safe_load((ROOT / "tests" / "chart" / "data" / "crds" / "clusterpolicy-v1.yaml").read_text())
    kube.kubectl("apply", "--server-side", "-f", "-", input=json.dumps({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{crd['plural']}.{crd['group']}"},
        "spec": {"group": crd["group"], "scope": crd["scope"],
                 "names": {"kind": crd["kind"], "plural": crd["plural"], "singular": crd["kind"].lower(),
                           "listKind": f"{crd['kind']}List"},
                 "versions": [{"name": crd["version"], "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": crd["openAPIV3Schema"]},
                               "subresources": {"status": {}}}]}}))
    # polled: `kubectl wait` fails while the new CRD has no status.conditions yet
    e2elib.wait("the ClusterPolicy CRD Established", lambda: any(
        c["type"] == "Established" and c["status"] == "True" for c in kube.json(
            "get", "crd", f"{crd['plural']}.{crd['group']}").get("status", {}).get("conditions") or []), timeout=30)

    def apply(obj):
        return kube.kubectl("apply", "--server-side", "--validate=strict", "-f", "-", input=json.dumps(obj),
                            check=False)
    res = apply(cp)
    assert res.returncode == 0, res.stderr
    got = kube.json("get", "clusterpolicy", cp["metadata"]["name"])["spec"]
    assert got["devicePlugin"]["config"] == cp["spec"]["devicePlugin"]["config"], got["devicePlugin"]
    bad = copy.deepcopy(cp)
    bad["spec"]["devicePlugin"]["confg"] = bad["spec"]["devicePlugin"].pop("config")
    res = apply(bad)
    assert res.returncode != 0 and "confg" in res.stderr, res.stderr
    bad = copy.deepcopy(cp)
    bad["spec"]["devicePlugin"]["config"]["name"] = 7
    res = apply(bad)
    assert res.returncode != 0 and "devicePlugin.config.name" in res.stderr, res.stderr
