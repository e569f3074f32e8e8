"""Every chart scenario (charts/gpu-inference/ci/*-values.yaml) on the real control plane:
`helm install` (Helm 4, server-side apply, so the API server's own validation and
admission run on every object), pods Running on nodes that match the values' intent,
platform DaemonSets only on GPU nodes, `helm test` passing, `helm uninstall` leaving
nothing behind."""
from __future__ import annotations

import json

import pytest

from tests.e2e import e2elib
from tests.e2e.e2elib import CHART, SCENARIOS


def _ids(p):
    return p.name.removesuffix("-values.yaml")


@pytest.mark.parametrize("values_file", SCENARIOS, ids=_ids)
def test_scenario_lifecycle(kube, namespace, values_file, tmp_path):
    values = e2elib.effective_values(values_file)
    release = "r-" + _ids(values_file)[:30]
    objects = e2elib.render(release, namespace, [values_file])
    prereqs = e2elib.prerequisites(values, namespace)
    dra = []
    if values["gpu"]["mode"] == "dra":
        dra = e2elib.dra_objects(list(kube.nodes().values()), values["gpu"]["dra"]["deviceClassName"], tmp_path)
    try:
        if prereqs or dra:
            kube.kubectl("apply", "--server-side", "-f", "-",
                         input=json.dumps({"apiVersion": "v1", "kind": "List", "items": prereqs + dra}))
        for o in prereqs:
            if o["kind"] == "PersistentVolumeClaim":
                kube.wait(f"PVC {o['metadata']['name']} Bound", lambda: kube.json(
                    "get", "pvc", o["metadata"]["name"], "-n", namespace)["status"].get("phase") == "Bound")

        # 1. install: the API server accepts every rendered object (server-side apply)
        kube.helm("install", release, str(CHART), "-n", namespace, "-f", str(values_file),
                  "--wait", "--timeout", "120s")

        # 2. inference pods Running, each on a node that fits the values' intent
        nodes = kube.nodes()
        deployments = [o for o in objects if o["kind"] == "Deployment" and e2elib.is_gpu_workload(o)]
        # a platform-only release (workload.enabled false) renders none: the others must
        assert bool(deployments) == values.get("workload", {}).get("enabled", True), (
            "the scenario renders no GPU Deployment" if not deployments else
            "a platform-only release renders a GPU Deployment")
        for dep in deployments:
            want = e2elib.expected_replicas(objects, dep)
            sel = e2elib.selector_string(dep["spec"]["selector"]["matchLabels"])

            def ready_pods():
                pods = [p for p in kube.pods(namespace, sel) if not p["metadata"].get("deletionTimestamp")]
                ready = [p for p in pods if e2elib.pod_is_ready(p)]
                return ready if len(ready) == want else None

            pods = kube.wait(f"{want} Ready pods of {dep['metadata']['name']}", ready_pods, timeout=90)
            for pod in pods:
                node = nodes[pod["spec"]["nodeName"]]
                assert not e2elib.placement_problems(pod, node, values), (
                    f"{pod['metadata']['name']} on {pod['spec']['nodeName']}: "
                    f"{e2elib.placement_problems(pod, node, values)}")
            if values["gpu"]["mode"] == "dra":
                claims = kube.json("get", "resourceclaims", "-n", namespace)["items"]
                allocated = [c for c in claims if c.get("status", {}).get("allocation")]
                assert len(allocated) == want, f"{len(allocated)} of {want} ResourceClaims allocated"
                for c in allocated:
                    results = c["status"]["allocation"]["devices"]["results"]
                    assert len(results) == int(values["gpu"]["count"]), results

        # 3. platform DaemonSets: a pod on every GPU node (that carries the DaemonSet's
        # nodeSelector labels, e.g. nvidia.com/mps.capable for the MPS daemon), none elsewhere
        for ds in (o for o in objects if o["kind"] == "DaemonSet"):
            sel = e2elib.selector_string(ds["spec"]["selector"]["matchLabels"])
            # the nodes its nodeSelector, required affinity and tolerations admit: the GPU agents'
            # affinity names the GPU labels, NFD's worker runs everywhere, and mig-manager only
            # where a node selects a MIG config (nvidia.com/mig.config Exists: none here)
            gpu_nodes = {n for n, o in nodes.items() if e2elib.daemonset_admits(ds, o)}
            requires = ds["spec"]["template"]["spec"].get("affinity", {}).get("nodeAffinity", {})
            assert gpu_nodes or requires, f"no node in the fleet for DaemonSet {ds['metadata']['name']}"

            def ds_nodes():
                pods = [p for p in kube.pods(namespace, sel) if e2elib.pod_is_ready(p)]
                on = {p["spec"]["nodeName"] for p in pods}
                return on == gpu_nodes

            try:
                kube.wait(f"DaemonSet {ds['metadata']['name']} Ready on exactly the GPU nodes", ds_nodes, timeout=60)
            except AssertionError:
                on = sorted({p["spec"].get("nodeName") for p in kube.pods(namespace, sel)})
                pytest.fail(f"DaemonSet {ds['metadata']['name']}: pods on {on}, admitted nodes are {sorted(gpu_nodes)}")

        # 4. helm test: the test pod completes (kwok stage pod-complete-helm-test)
        res = kube.helm("test", release, "-n", namespace, "--timeout", "90s", check=False)
        assert res.returncode == 0, f"helm test failed:\n{res.stderr}{res.stdout}"

        # 5. uninstall leaves nothing: every rendered object and every release pod is gone
        kube.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "90s")
        left = []
        for o in objects:
            ns = ["-n", namespace] if o["kind"] not in CLUSTER_SCOPED else []
            kind = f"{o['kind'].lower()}.{o['apiVersion'].split('/')[0]}" if "/" in o["apiVersion"] else o["kind"].lower()
            got = kube.kubectl("get", kind, o["metadata"]["name"], *ns, "--ignore-not-found", "-o", "name").stdout.strip()
            if got:
                left.append(got)
        assert not left, f"helm uninstall left: {left}"
        kube.wait("all release pods gone",
                  lambda: not kube.pods(namespace, f"app.kubernetes.io/instance={release}"), timeout=60)
    finally:
        if prereqs or dra:
            kube.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", check=False,
                         input=json.dumps({"apiVersion": "v1", "kind": "List", "items": prereqs + dra}))


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "APIService", "PriorityClass", "Namespace",
                  "CustomResourceDefinition", "DeviceClass", "PersistentVolume",
                  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "StorageClass",
                  "RuntimeClass", "ResourceSlice"}
