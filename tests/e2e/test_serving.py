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
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.e2e.e2elib import CHART, ROOT

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
