"""Multi-node replicas on the real LeaderWorkerSet controller (issue 26).

The LWS controller manager is sigs.k8s.io/lws v0.9.0 (`ci/e2e/build.sh lws`: its
controllers and its webhooks, unchanged) running on the host against the real control
plane, with its upstream CRD (config/crd/bases, from the same module zip). Its webhooks
are not optional: the pod webhook gives every pod of a group the LWS_LEADER_ADDRESS /
LWS_GROUP_SIZE env vars our leader and worker commands use, the group labels, and the
exclusive-topology pod (anti-)affinity; the LeaderWorkerSet webhook defaults and validates
the object. So they run for real: controller-runtime's webhook server on 127.0.0.1 with a
throw-away serving cert (internal cert management off: it needs an in-cluster Service),
and upstream's webhook configurations (config/webhook/manifests.yaml with
mutating-patch.yaml / validating-patch.yaml's pod objectSelector) pointed at it by `url`
instead of a Service (the API server reaches a loopback URL; a Service's endpoints cannot
be loopback). kwok plays the kubelets (pods go Running and Ready; no container runs).

What is checked, as transitions the real controllers make:
- the 405B example's release: each group (a leader and a worker, 8 GPUs each) comes up
  Running on two nodes of one rack, the leader Service selects only leaders;
- a MIG rollout's waves over the pool (pods and PDB read from the cluster) take the group's
  two nodes as one unit, in one wave of their own (its 2 pods exceed the budget's 1);
- scale 1 -> 2 -> 1 through the LWS scale subresource (what the chart's HPA targets; the
  real HPA controller resolves it, AbleToScale), the second group in another rack;
- a faulty node (the remediation controller's taint and cordon, then its drain: an
  Eviction through the PDB) takes its whole group down, leader included, and the group
  comes back whole in a rack without that node: the drain's PreferNoSchedule mark on the
  rest of the bad node's rack keeps the recreated leader out of the rack its worker could
  not join (drain.py, mark_domain); the mark goes with the uncordon.
"""
from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.e2e.conftest import POOL, harness
from tests.e2e.e2elib import CHART, ROOT

RACK = "gpu-inference.io/rack"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
WEBHOOKS = ("lws-e2e-mutating", "lws-e2e-validating")


def lws_dir():
    return ROOT / ".cache" / "e2e" / f"lws-{harness.versions()['LWS_VERSION']}"


def _webhook_configs(port: int, ca_bundle: str) -> list[dict]:
    """Upstream's webhook configurations, with the kustomize patches applied (the pod
    webhooks only for pods of a LeaderWorkerSet), each service reference turned into the
    loopback URL of the controller's webhook server."""
    src = lws_dir()
    docs = [d for d in yaml.safe_load_all((src / "webhook-manifests.yaml").read_text()) if d]
    patches = {"MutatingWebhookConfiguration": src / "mutating-patch.yaml",
               "ValidatingWebhookConfiguration": src / "validating-patch.yaml"}
    out = []
    for doc, name in zip(docs, WEBHOOKS):
        for op in yaml.safe_load(patches[doc["kind"]].read_text()):
            assert op["op"] == "replace" and op["path"].startswith("/webhooks/"), op
            doc["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
        doc["metadata"] = {"name": name}
        for w in doc["webhooks"]:
            path = w["clientConfig"]["service"]["path"]
            w["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
        out.append(doc)
    return out


@pytest.fixture(scope="module")
def lws_controller(kube, tmp_path_factory):
    """The real LWS controller manager and webhooks on the host; removed afterwards (its
    pod webhook fails closed, so it must not outlive the controller)."""
    binary = lws_dir() / "bin" / "lws"
    if not binary.exists():
        pytest.fail(f"LWS controller missing at {binary}: run `bash ci/e2e/build.sh lws`", pytrace=False)
    cluster = kube.cluster
    # both CRDs the manager watches: its DisaggregatedSet controller stops the whole manager
    # when its kind is still missing after the cache sync timeout (2 min)
    for f in ("leaderworkerset.x-k8s.io_leaderworkersets.yaml", "disaggregatedset.x-k8s.io_disaggregatedsets.yaml"):
        crd = yaml.safe_load((lws_dir() / f).read_text())
        crd.pop("status", None)     # what the API server reports, not ours to apply
        # server-side: the CRD (two pod templates) is larger than the last-applied annotation
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd))
        # polled: `kubectl wait` errors out while the new CRD has no status.conditions yet
        kube.wait(f"the {crd['spec']['names']['kind']} CRD Established", lambda: any(
            c["type"] == "Established" and c["status"] == "True" for c in
            (kube.json("get", "crd", crd["metadata"]["name"]).get("status") or {}).get("conditions") or []),
            timeout=60)
    d = tmp_path_factory.mktemp("lws")
    harness._ca(d, "ca")
    harness._leaf(d, "tls", "ca", "/CN=lws-webhook", "serverAuth", "IP:127.0.0.1")
    port, health, metrics = harness.free_port(), harness.free_port(), harness.free_port()
    config = d / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(d)},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}}))
    proc = cluster.spawn("lws-controller", [
        "env", f"KUBECONFIG={cluster.kubeconfig}", str(binary), f"--config={config}",
        "--zap-log-level=info"], ready_url=f"http://127.0.0.1:{health}/readyz", timeout=120)
    import base64
    ca = base64.b64encode((d / "ca.crt").read_bytes()).decode()
    for obj in _webhook_configs(port, ca):
        kube.kubectl("apply", "-f", "-", input=json.dumps(obj))
    try:
        yield proc
    finally:
        kube.kubectl("delete", "mutatingwebhookconfiguration", WEBHOOKS[0], "--ignore-not-found", check=False)
        kube.kubectl("delete", "validatingwebhookconfiguration", WEBHOOKS[1], "--ignore-not-found", check=False)
        cluster.terminate(proc)


def _release_values(pool_name: str) -> dict:
    """The 405B example's workload release, as `gpuvalues values` writes it, on the test's
    pool (its nodes are the only ones with the pool label)."""
    from gpuvalues import build_fleet
    from gpuvalues.checks.spec import load_spec

    fleet = build_fleet(load_spec(ROOT / "examples" / "multi-node-405b.yaml"))
    assert fleet.errors == ()
    values = json.loads(json.dumps(fleet.release("llama-405b").values))
    values["nodeSelector"] = {POOL: pool_name}
    # the example sizes 2..2 groups; from 1 the test takes it 1 -> 2 -> 1 by hand through
    # the scale subresource without the HPA's minimum scaling it back
    values["autoscaling"]["minReplicas"] = 1
    return values


def test_groups_come_up_scale_and_move_as_a_unit(kube, namespace, pool, lws_controller):
    names = pool("lws", [8] * 6, gpu="H100-SXM5-80GB")
    racks = {n: f"rack-{'abc'[i // 2]}" for i, n in enumerate(names)}
    for n in names:
        # the rack (the spec's groupDomainLabel) and the NVLink label the node-labels
        # artifact puts on HGX H100 nodes (topology/hgx-h100-nv18.txt: NV8)
        kube.kubectl("label", "node", n, f"{RACK}={racks[n]}", "nvidia.com/gpu.topology=NV8", "--overwrite")
    values = _release_values("lws")
    assert values["multiNode"] == {"nodes": 2, "topologyKey": RACK}
    release, full = "big", "big-gpu-inference"
    try:
        kube.helm("install", release, str(CHART), "-n", namespace, values=values)
    except AssertionError:
        print(kube.cluster.logs("lws-controller", 60))
        raise

    def group_pods() -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for p in kube.pods(namespace, f"{LWS_NAME}={full}"):
            if not p["metadata"].get("deletionTimestamp"):
                out.setdefault(p["metadata"]["labels"].get(GROUP, "?"), []).append(p)
        return out

    def running_groups(n: int):
        groups = group_pods()
        ok = len(groups) == n and all(
            len(ps) == 2 and all(p["status"].get("phase") == "Running" and p["spec"].get("nodeName") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
                for p in ps) for ps in groups.values())
        return groups if ok else None

    def lws_status():
        return kube.json("get", "leaderworkerset", full, "-n", namespace).get("status", {})

    try:
        groups = kube.wait("one group (leader + worker) Running", lambda: running_groups(1), timeout=180)
        (pods,) = groups.values()
        assert sorted(p["metadata"]["labels"][WORKER] for p in pods) == ["0", "1"]
        assert len({racks[p["spec"]["nodeName"]] for p in pods}) == 1, "a group spans racks"
        assert len({p["spec"]["nodeName"] for p in pods}) == 2, "a group's pods share a node"
        for p in pods:
            c = p["spec"]["containers"][0]
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            # the LWS pod webhook's env, which the leader and worker commands read
            assert env.get("LWS_GROUP_SIZE") == "2" and env.get("LWS_LEADER_ADDRESS"), env
            assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
            role = p["metadata"]["labels"]["gpu-inference.io/role"]
            assert role == ("leader" if p["metadata"]["labels"][WORKER] == "0" else "worker")
            assert ("--pipeline-parallel-size=2" in c.get("args", [])) == (role == "leader")
        kube.wait("LWS status: 1 ready group", lambda: lws_status().get("readyReplicas") == 1, timeout=60)
        # a MIG rollout over the pool plans the group's two nodes as one unit, from what the
        # cluster says (the pods, and the PDB's disruptionsAllowed the disruption controller wrote)
        from kubernetes import client, config as kconfig

        from gpuvalues.operations import rollout
        api = kconfig.new_client_from_config(str(kube.cluster.kubeconfig))
        kube.wait("the PDB allowing one disruption", lambda: kube.json("get", "pdb", full, "-n", namespace).get(
            "status", {}).get("disruptionsAllowed") == 1, timeout=60)
        pods_of, allowance, groups = rollout.pods_and_budgets(client.CoreV1Api(api), client.PolicyV1Api(api), names)
        group_nodes = sorted(p["spec"]["nodeName"] for p in pods)
        assert groups == [group_nodes], groups
        waves = rollout.plan_waves([rollout.NodeChange(n, "lws", "all-disabled", "all-1g.10gb", {}) for n in names],
                                   pods_of, allowance, groups=groups)
        (unit,) = [w for w in waves if set(group_nodes) & {c.node for c in w.changes}]
        assert sorted(c.node for c in unit.changes) == group_nodes      # one wave, nothing else in it
        assert unit.notes and f"2 pods of PodDisruptionBudget {namespace}/{full}" in unit.notes[0], unit.notes
        # the leader Service reaches the leader only (the real EndpointSlice controller)
        leader = next(p for p in pods if p["metadata"]["labels"][WORKER] == "0")

        def endpoints():
            sl = kube.json("get", "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={full}")
            return sorted(e["targetRef"]["name"] for s in sl["items"] for e in s.get("endpoints") or [])
        kube.wait("the Service's endpoints: the leader only",
                  lambda: endpoints() == [leader["metadata"]["name"]], timeout=60)
        # the chart's HPA targets the LWS: the real HPA controller gets its scale subresource
        hpa = kube.wait("the HPA resolving the LeaderWorkerSet's scale", lambda: (lambda h: h if any(
            c["type"] == "AbleToScale" and c["status"] == "True" for c in h.get("status", {}).get("conditions", []))
            else None)(kube.json("get", "hpa", full, "-n", namespace)), timeout=120, interval=1)
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"

        # scale 1 -> 2 -> 1 through the scale subresource
        kube.kubectl("scale", "leaderworkerset", full, "-n", namespace, "--replicas=2")
        groups = kube.wait("two groups Running", lambda: running_groups(2), timeout=180)
        group_racks = [{racks[p["spec"]["nodeName"]] for p in ps} for ps in groups.values()]
        assert all(len(r) == 1 for r in group_racks) and len(set.union(*group_racks)) == 2, group_racks
        scale = json.loads(kube.kubectl("get", "--raw", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/"
                                        f"{namespace}/leaderworkersets/{full}/scale").stdout)
        assert scale["spec"]["replicas"] == 2
        assert f"{WORKER}=0" in scale["status"]["selector"], scale   # HPA averages over leaders
        kube.kubectl("scale", "leaderworkerset", full, "-n", namespace, "--replicas=1")
        groups = kube.wait("back to one group", lambda: running_groups(1), timeout=180)

        # a faulty node: the remediation controller's quarantine (taint + cordon) and drain
        from gpuvalues.operations import drain, remediation

        (pods,) = groups.values()
        before = {p["metadata"]["labels"][WORKER]: p["metadata"]["uid"] for p in pods}
        worker = next(p for p in pods if p["metadata"]["labels"][WORKER] == "1")
        bad = worker["spec"]["nodeName"]
        core = client.CoreV1Api(kconfig.new_client_from_config(str(kube.cluster.kubeconfig)))
        drain.add_taint(core, bad, remediation.TAINT_KEY, remediation.TAINT_EFFECT, "e2e")
        drain.cordon(core, bad, "e2e")
        drainer = drain.Drainer(core, owner="e2e")   # as remediation's and rollout's drains
        progress = drainer.step(bad, time.time())
        assert [r.outcome for r in progress.results] == ["evicted"], progress
        # the drain marked the rest of the bad node's rack (its one mate) before the eviction:
        # without it the recreated leader may take that mate and its worker, which must share
        # the leader's rack, stays Pending (LWS schedules leader first, no gang scheduling)
        mates = [n for n in names if racks[n] == racks[bad] and n != bad]

        def domain_taints(n: str) -> list[str]:
            return [t["effect"] for t in kube.json("get", "node", n).get("spec", {}).get("taints") or []
                    if t["key"] == drain.DOMAIN_TAINT_KEY]
        assert [domain_taints(n) for n in mates] == [["PreferNoSchedule"]], mates

        def moved():
            g = running_groups(1)
            if not g:
                return None
            (ps,) = g.values()
            uids = {p["metadata"]["labels"][WORKER]: p["metadata"]["uid"] for p in ps}
            return ps if all(uids[k] != before[k] for k in before) else None
        pods = kube.wait("the whole group recreated, leader included", moved, timeout=240, interval=1)
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert bad not in nodes and {racks[n] for n in nodes} != {racks[bad]}, nodes
        assert len({racks[n] for n in nodes}) == 1, nodes
        assert drainer.step(bad, time.time()).remaining == ()
        drain.uncordon(core, bad, "e2e")
        drain.remove_taint(core, bad, remediation.TAINT_KEY, "e2e")
        assert [domain_taints(n) for n in mates] == [[]], "the rack's mark outlived the drain"
        kube.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")
        kube.wait("the groups gone", lambda: not group_pods(), timeout=120)
    except AssertionError:
        print(kube.kubectl("get", "leaderworkersets,statefulsets,pods", "-n", namespace, "-o", "wide",
                           check=False).stdout)
        print(kube.cluster.logs("lws-controller", 80))
        raise
