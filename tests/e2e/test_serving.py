"""Serving features (issue 18) on the real control plane (kube-apiserver, controller-manager
and scheduler 1.35.4; kwok plays the kubelets).

- The upstream CRDs are installed from the same schemas the chart tests use
  (tests/chart/data/crds: InferencePool v1 and InferenceObjective v1alpha2 from the Gateway
  API Inference Extension v1.5.0 module, HTTPRoute and Gateway v1 from sigs.k8s.io/gateway-api
  v1.6.3), so the API server itself (structural schema, defaults, CEL rules) judges the
  chart's InferencePool, HTTPRoute and InferenceObjectives. Each CRD is installed with only
  the version the chart uses (upstream's HTTPRoute CRD also serves v1beta1).
- A cache Job's PVC binds: the real PV controller binds the chart's ReadWriteMany claim to a
  PV of a StorageClass the test creates. Faked: the storage behind the PV (an NFS source that
  nothing mounts, as no kubelet runs) and the Job's container (kwok's pod-complete stage marks
  it Succeeded).
- A workload scaled to zero wakes: the real KEDA operator (v2.17.2, built from its Go module
  by `ci/e2e/build.sh keda`) runs on the host against the cluster and the real Prometheus;
  the one fake is the endpoint picker's queue gauge, served by the test (no gateway data
  plane runs here). KEDA's metrics API server (the HPA's external metrics above one
  replica) is not run: 0 <-> 1 is the operator's own work.
"""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import harness
from tests.e2e import e2elib
from tests.e2e.e2elib import CHART, ROOT
from tests.exposition import ExpositionHandler as _QueueHandler

CRDS = ROOT / "tests" / "chart" / "data" / "crds"
SERVING_CRDS = ["inferencepool-v1", "inferenceobjective-v1alpha2", "httproute-v1", "gateway-v1"]
EXAMPLES = ROOT / "examples" / "values"


def crd_object(path: Path) -> dict:
    """A CustomResourceDefinition serving the one stored version of tests/chart/data/crds/<path>."""
    d = yaml.safe_load(path.read_text())
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{d['plural']}.{d['group']}", "annotations": d.get("annotations", {})},
            "spec": {"group": d["group"], "scope": d["scope"],
                     "names": {"plural": d["plural"], "singular": d["kind"].lower(), "kind": d["kind"],
                               "listKind": f"{d['kind']}List"},
                     "versions": [{"name": d["version"], "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": d["openAPIV3Schema"]},
                                   "subresources": {"status": {}}}]}}


def install_serving_crds(kube) -> list[str]:
    names = []
    for n in SERVING_CRDS:
        obj = crd_object(CRDS / f"{n}.yaml")
        # server-side: the HTTPRoute schema is larger than the last-applied annotation allows
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(obj))
        names.append(obj["metadata"]["name"])
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
    return names


def values_of(example: str, **over) -> dict:
    v = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    v.update(over)
    return v


def test_gateway_objects_accepted_by_the_api_server(kube, namespace):
    install_serving_crds(kube)
    release, full = "gw", "gw-gpu-inference"
    values = values_of("lora-adapters", gateway={"enabled": True, "parentRefs": [{"name": "inference-gateway"}]})
    gateway = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "inference-gateway", "namespace": namespace},
               "spec": {"gatewayClassName": "e2e", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}
    kube.kubectl("apply", "-f", "-", input=json.dumps(gateway))
    kube.helm("install", release, str(CHART), "-n", namespace, values=values)

    pool = kube.json("get", "inferencepool", full, "-n", namespace)
    assert pool["spec"]["endpointPickerRef"]["name"] == f"{full}-epp"
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    route = kube.json("get", "httproute", full, "-n", namespace)
    assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
    # the API server applied the CRD's defaults: the parentRef's group and kind
    assert route["spec"]["parentRefs"][0] == {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                              "name": "inference-gateway"}
    objectives = kube.json("get", "inferenceobjectives", "-n", namespace)["items"]
    assert sorted(o["metadata"]["name"] for o in objectives) == [f"{full}-sql", f"{full}-support"]
    # the picker runs (on the CPU node: it needs no GPU) and its pool's pods are scheduled
    epp = kube.wait("the endpoint picker pod scheduled", lambda: [
        p for p in kube.pods(namespace, "app.kubernetes.io/component=endpoint-picker")
        if p["spec"].get("nodeName")])
    assert epp[0]["spec"]["nodeName"] == "cpu-0"

    # Negative control: the same API server refuses what the CRD schema forbids.
    bad = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
           "metadata": {"name": "bad", "namespace": namespace},
           "spec": {"targetPorts": [{"number": 70000}], "selector": {"matchLabels": {"a": "b"}},
                    "endpointPickerRef": {"name": "x", "port": {"number": 9002}}}}
    res = kube.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0 and "spec.targetPorts[0].number" in res.stderr, res.stderr


def test_cache_job_and_its_pvc_bind(kube, namespace):
    sc, pv = f"rwx-{namespace}", f"models-{namespace}"
    kube.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": sc},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"}))
    kube.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "50Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": sc,
                 "persistentVolumeReclaimPolicy": "Retain", "nfs": {"server": "127.0.0.1", "path": "/models"}}}))
    try:
        release, full = "cache", "cache-gpu-inference"
        values = {"model": {"source": "pvc", "sizeGB": 16, "pvc": {"create": True, "storageClassName": sc}},
                  "autoscaling": {"engine": "none"}, "replicaCount": 1}
        kube.helm("install", release, str(CHART), "-n", namespace, values=values)
        claim = kube.wait("the model cache PVC Bound", lambda: (lambda c: c if c["status"].get("phase") == "Bound" else None)(
            kube.json("get", "pvc", f"{full}-model", "-n", namespace)), timeout=60)
        assert claim["spec"]["volumeName"] == pv
        assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
        jobs = kube.json("get", "jobs", "-n", namespace)["items"]
        assert len(jobs) == 1 and jobs[0]["metadata"]["name"].startswith(f"{full}-fill-")
        done = kube.wait("the fill Job complete", lambda: (lambda j: j if j["status"].get("succeeded") else None)(
            kube.json("get", "job", jobs[0]["metadata"]["name"], "-n", namespace)), timeout=90)
        assert done["status"]["succeeded"] == 1
        # the server pod mounts the same claim and is scheduled onto a GPU node
        pod = kube.wait("the server pod scheduled", lambda: [
            p for p in kube.pods(namespace, "app.kubernetes.io/component=inference") if p["spec"].get("nodeName")])[0]
        vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "model")
        assert vol["persistentVolumeClaim"]["claimName"] == f"{full}-model"
    finally:
        kube.helm("uninstall", "cache", "-n", namespace, "--wait", "--timeout", "60s", check=False)
        kube.kubectl("delete", "pv", pv, "--ignore-not-found", "--wait=false", check=False)
        kube.kubectl("delete", "storageclass", sc, "--ignore-not-found", check=False)


# --- scale to zero with the real KEDA operator -------------------------------------------------

class QueueExporter(http.server.ThreadingHTTPServer):
    """The one fake of the scale-from-zero test: the endpoint picker's flow-control queue
    gauge (no gateway data plane runs here), in the EPP's metric name and labels."""

    def __init__(self, pool: str):
        super().__init__(("127.0.0.1", 0), _QueueHandler)
        self.pool, self.value = pool, 0.0

    def exposition(self) -> str:
        m = "inference_extension_flow_control_queue_size"
        return (f"# TYPE {m} gauge\n"
                f'{m}{{fairness_id="default",priority="0",inference_pool="{self.pool}",'
                f'model_name="m",target_model_name="m"}} {self.value}\n')


def keda_binary() -> Path:
    v = harness.versions()["KEDA_VERSION"]
    return ROOT / ".cache" / "e2e" / f"keda-{v}" / "bin" / "keda"


def test_keda_scales_from_zero_when_the_queue_rises(kube, namespace, prometheus_bin, tmp_path):
    """The real KEDA operator (v2.17.2, built by ci/e2e/build.sh keda) reads the chart's
    ScaledObject, queries the real Prometheus with the chart's activation query, takes the
    idle Deployment to 0 and back to 1 when the gateway's queue rises."""
    keda = keda_binary()
    if not keda.exists():
        pytest.fail(f"KEDA operator missing at {keda}: run `bash ci/e2e/build.sh keda`")
    cluster = kube.cluster
    install_serving_crds(kube)
    release, full = "s2z", "s2z-gpu-inference"
    exporter = QueueExporter(full)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    procs = []
    try:
        # the target namespace as a label, as a ServiceMonitor adds it
        prom, prom_url = e2elib.start_prometheus(
            cluster, prometheus_bin, tmp_path, "epp", exporter.server_address[1], honor_labels=False,
            labels={"namespace": namespace}, name="prometheus-s2z")
        procs.append(prom)
        # KEDA's gRPC metrics service needs a serving cert (ca.crt, tls.crt, tls.key)
        certs = tmp_path / "keda-certs"
        certs.mkdir()
        harness._ca(certs, "ca")
        harness._leaf(certs, "tls", "ca", "/CN=keda-operator", "serverAuth,clientAuth", "IP:127.0.0.1,DNS:localhost")
        health = harness.free_port()
        env_kc = str(cluster.kubeconfig)
        procs.append(cluster.spawn("keda-operator", [
            "env", f"KUBECONFIG={env_kc}", f"WATCH_NAMESPACE={namespace}", f"KEDA_CLUSTER_OBJECT_NAMESPACE={namespace}",
            str(keda), "--leader-elect=false", f"--metrics-bind-address=127.0.0.1:{harness.free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            f"--metrics-service-bind-address=127.0.0.1:{harness.free_port()}", f"--cert-dir={certs}",
            "--enable-webhook-patching=false", "--zap-log-level=info"],
            ready_url=f"http://127.0.0.1:{health}/healthz", timeout=240))

        values = values_of("scale-to-zero-keda", gateway={"enabled": True, "parentRefs": [{"name": "inference-gateway"}]})
        values["autoscaling"]["keda"].update({"serverAddress": prom_url, "pollingInterval": 1,
                                              "cooldownPeriod": 5})
        kube.kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=token=e2e-not-a-token")
        kube.helm("install", release, str(CHART), "-n", namespace, values=values)

        def replicas():
            return kube.json("get", "deployment", full, "-n", namespace)["spec"].get("replicas")

        # Never active: KEDA takes the new Deployment (1 replica by default) to zero.
        kube.wait("KEDA scaling the idle workload to 0", lambda: replicas() == 0, timeout=180, interval=1)
        # Requests wait in the gateway: the queue rises above activationThreshold (0).
        exporter.value = 3
        kube.wait("KEDA scaling 0 -> 1 on the queue", lambda: replicas() == 1, timeout=180, interval=1)
        # KEDA sets the Active condition after it scales the target (scale executor): waited for
        kube.wait("the ScaledObject Active", lambda: any(
            c["type"] == "Active" and c["status"] == "True" for c in
            kube.json("get", "scaledobject", full, "-n", namespace).get("status", {}).get("conditions") or []),
            timeout=60, interval=1)
        pod = kube.wait("the woken replica scheduled", lambda: [
            p for p in kube.pods(namespace, "app.kubernetes.io/component=inference") if p["spec"].get("nodeName")])[0]
        assert pod["spec"]["containers"][0]["startupProbe"]["failureThreshold"] * \
            pod["spec"]["containers"][0]["startupProbe"]["periodSeconds"] >= 600
        # The PDB never blocks the lone woken replica: the real disruption controller allows
        # evicting it (maxUnavailable 1), so a node drain is not stuck at 1 replica.
        pdb = kube.wait("the PDB allowing one disruption at 1 replica", lambda: (lambda p: p if (
            p.get("status", {}).get("disruptionsAllowed") == 1 and p["status"].get("expectedPods") == 1) else None)(
            kube.json("get", "pdb", full, "-n", namespace)), timeout=120, interval=1)
        assert pdb["spec"]["maxUnavailable"] == 1
        # Queue drained: after the cooldown (5 s here) KEDA returns it to zero.
        exporter.value = 0
        kube.wait("KEDA scaling back to 0 after the cooldown", lambda: replicas() == 0, timeout=180, interval=1)
        # ... and at zero the PDB expects no pod and reports no error: nothing to protect.
        kube.wait("the PDB at 0 expected pods", lambda: kube.json("get", "pdb", full, "-n", namespace)
                  .get("status", {}).get("expectedPods") == 0, timeout=120, interval=1)
        # uninstall while KEDA runs: it removes its finalizer from the ScaledObject
        kube.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
    except AssertionError:
        print(cluster.logs("keda-operator", 60))
        raise
    finally:
        for p in reversed(procs):
            cluster.terminate(p)
        exporter.shutdown()
        exporter.server_close()


def test_api_server_refuses_hpa_at_zero_without_the_feature_gate(kube, namespace):
    """Why the chart refuses engine=hpa with minReplicas 0 unless autoscaling.hpaScaleToZero:
    this API server runs with HPAScaleToZero off (its default, alpha since 1.16), and refuses
    the HPA the chart renders when the values claim the gate is on."""
    from tests.chart.chartlib import render

    objs = render(str(kube.helm_bin), values={"autoscaling": {
        "minReplicas": 0, "hpaScaleToZero": True, "externalMetric": {"name": "gateway_queue", "target": "5"}}},
        release="hz", namespace=namespace, kube_version="1.35.4")
    hpa = next(o for o in objs if o["kind"] == "HorizontalPodAutoscaler")
    res = kube.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(hpa), check=False)
    assert res.returncode != 0 and "spec.minReplicas" in res.stderr, res.stderr
    # the same HPA at minReplicas 1 is accepted: the refusal is about zero only
    hpa["spec"]["minReplicas"] = 1
    kube.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(hpa))


@pytest.mark.parametrize("example", ["model-image", "model-streamer"])
def test_model_source_accepted_by_the_api_server(kube, namespace, example):
    """The `image` volume source (on by default in 1.35) and the streamer's envFrom pass the
    real API server's validation (server-side dry-run apply of the rendered Deployment)."""
    from tests.chart.chartlib import render

    objs = render(str(kube.helm_bin), EXAMPLES / f"{example}.yaml", release="src", namespace=namespace,
                  kube_version="1.35.4")
    dep = next(o for o in objs if o["kind"] == "Deployment")
    kube.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(dep))
    if example == "model-image":
        # The field is kept (a disabled ImageVolume gate would drop it): the pod the
        # ReplicaSet controller creates carries the image volume.
        kube.helm("install", "src", str(CHART), "-n", namespace, "-f", str(EXAMPLES / f"{example}.yaml"))
        pod = kube.wait("a pod of the image-volume Deployment", lambda: kube.pods(
            namespace, "app.kubernetes.io/instance=src"))[0]
        vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "model")
        assert vol["image"]["reference"] == "registry.example.com/models/qwen2.5-7b-instruct:v1"
        # Negative control: the API server does validate the image volume (its pull policy).
        bad = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "model")
        bad["image"]["pullPolicy"] = "Sometimes"
        res = kube.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(dep), check=False)
        assert res.returncode != 0 and "image.pullPolicy" in res.stderr, res.stderr


def test_long_adapter_names_keep_one_inference_objective_each(kube, namespace):
    """Two adapters whose names share a 48-character prefix: the chart names their
    InferenceObjectives <first 54>-<hash> past 63 characters, and the real API server stores
    two objects (plain truncation gave one name: the second apply would overwrite the first)."""
    install_serving_crds(kube)
    prefix = "customer-support-escalation-summaries-in-english"
    lora = {"adapters": [{"name": f"{prefix}-v1", "source": "org/a"},
                         {"name": f"{prefix}-v2", "source": "org/b"}]}
    kube.helm("install", "gi", str(CHART), "-n", namespace, values=values_of("lora-adapters", lora=lora))
    objectives = kube.json("get", "inferenceobjectives", "-n", namespace)["items"]
    adapters = {o["metadata"]["labels"]["gpu-inference/lora-adapter"]: o["metadata"]["name"]
                for o in objectives}
    assert sorted(adapters) == [f"{prefix}-v1", f"{prefix}-v2"]
    assert len(set(adapters.values())) == 2 and all(len(n) <= 63 for n in adapters.values())
    pod = kube.wait("a server pod", lambda: kube.pods(namespace, "app.kubernetes.io/instance=gi,"
                                                                 "app.kubernetes.io/component=inference"))[0]
    server = next(c for c in pod["spec"]["containers"] if c["name"] == "server")
    assert "--max-loras=2" in server["args"]
