"""Helpers for the e2e tests: chart values, scenario prerequisites, and what a GPU pod's
node must offer -- derived from the scenario's *values* (the user's intent), not from the
rendered pod spec, so a template that requests the wrong thing is caught."""
from __future__ import annotations

import copy
import re
import time
from pathlib import Path
from typing import Mapping

import yaml

from tests.chart import chartlib
from tests.conftest import CHART, ROOT, TOOLS  # noqa: F401  (tests use e2elib.ROOT and e2elib.CHART)

HELM = TOOLS / "helm"
SCENARIOS = sorted((CHART / "ci").glob("*-values.yaml"))
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_PRESENT = "nvidia.com/gpu.present"


def deep_merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def effective_values(values_file: Path | None = None, extra: Mapping | None = None) -> dict:
    """Chart defaults, then the scenario file, then `extra` (as helm -f, --set-json would)."""
    vals = yaml.safe_load((CHART / "values.yaml").read_text()) or {}
    if values_file is not None:
        vals = deep_merge(vals, yaml.safe_load(values_file.read_text()) or {})
    return deep_merge(vals, extra or {})


def render(release: str, namespace: str, values_files: list[Path], extra: Mapping | None = None) -> list[dict]:
    """`helm template` with the same inputs as the install (helm's default Kubernetes
    version, as before: no --kube-version); the objects it renders."""
    return chartlib.render(str(HELM), *values_files, values=dict(extra) if extra else None,
                           release=release, namespace=namespace, kube_version=None)


def gpu_resource(values: Mapping) -> tuple[str | None, int]:
    """(extended resource, count per pod) the values ask for; (None, n) for DRA."""
    gpu = values["gpu"]
    mode, count = gpu["mode"], int(gpu.get("count", 1))
    if mode == "whole":
        return gpu.get("resourceName", "nvidia.com/gpu"), count
    if mode == "mig":
        if gpu["mig"].get("strategy", "mixed") == "single":
            return "nvidia.com/gpu", count
        return "nvidia.com/mig-" + gpu["mig"]["profile"].replace("+", "."), count
    if mode == "shared":
        return gpu["shared"]["resourceName"], count
    return None, count


def nvlink_size(label: str | None) -> int:
    m = re.fullmatch(r"NV(\d+)", label or "")
    return int(m.group(1)) if m else 0


def placement_problems(pod: Mapping, node: Mapping, values: Mapping) -> list[str]:
    """Why `node` is the wrong place for this inference pod (empty list: it is right)."""
    problems = []
    labels = node["metadata"].get("labels", {})
    alloc = node["status"].get("allocatable", {})
    taints = node.get("spec", {}).get("taints", [])
    res, count = gpu_resource(values)
    if not any(t["key"] == GPU_TAINT_KEY for t in taints):
        problems.append("node is not a GPU node (no nvidia.com/gpu taint)")
    if res is not None:
        limits = {}
        for c in pod["spec"]["containers"]:
            for k, v in (c.get("resources", {}).get("limits") or {}).items():
                limits[k] = limits.get(k, 0) + int(v) if k.startswith("nvidia.com/") else v
        if limits.get(res) != count:
            problems.append(f"pod limits {res}={limits.get(res)}, values ask for {count}")
        if int(alloc.get(res, 0)) < count:
            problems.append(f"node does not advertise {count} {res} (allocatable {alloc.get(res, 0)})")
    products = values.get("gpuProducts") or []
    if products and labels.get("nvidia.com/gpu.product") not in products:
        problems.append(f"product {labels.get('nvidia.com/gpu.product')} not in gpuProducts {products}")
    topo = values.get("topology", {})
    key = topo.get("key", "nvidia.com/gpu.topology")
    if topo.get("values") and labels.get(key) not in topo["values"]:
        problems.append(f"{key}={labels.get(key)} not in topology.values {topo['values']}")
    if values["gpu"]["mode"] == "whole" and count > 1 and nvlink_size(labels.get(key)) < count:
        problems.append(f"{count}-GPU pod on a node whose NVLink group is {labels.get(key)!r}")
    for k, v in (values.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            problems.append(f"nodeSelector {k}={v} not met")
    return problems


def pod_is_ready(pod: Mapping) -> bool:
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def unschedulable_message(pod: Mapping) -> str | None:
    for c in pod["status"].get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
            return c.get("message", "")
    return None


def selector_string(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def expected_replicas(objects: list[dict], deployment: Mapping) -> int:
    """Replicas the Deployment settles at with no metrics: the HPA's minReplicas (the HPA
    controller raises a Deployment below it without reading metrics), else spec.replicas,
    else 1 (the API default; e.g. under KEDA, which does not run here)."""
    name = deployment["metadata"]["name"]
    for o in objects:
        if o["kind"] == "HorizontalPodAutoscaler" and o["spec"]["scaleTargetRef"]["name"] == name:
            return int(o["spec"].get("minReplicas", 1))
    return int(deployment["spec"].get("replicas", 1))


def is_gpu_workload(deployment: Mapping) -> bool:
    spec = deployment["spec"]["template"]["spec"]
    if spec.get("resourceClaims"):
        return True
    return any(k.startswith("nvidia.com/") for c in spec.get("containers", [])
               for k in (c.get("resources", {}).get("limits") or {}))


def prerequisites(values: Mapping, namespace: str) -> list[dict]:
    """Objects the scenario expects to exist already (a cluster admin's job, not the
    chart's): the model PVC (with a pre-bound PV), the hub-token Secret, the PriorityClass."""
    objs: list[dict] = []
    model = values.get("model", {})
    if model.get("source") == "pvc" and model.get("pvc", {}).get("claimName"):
        claim = model["pvc"]["claimName"]
        pv = f"{namespace}-{claim}"[:63]
        objs.append({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                     "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadOnlyMany", "ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                              "hostPath": {"path": f"/models/{claim}"},
                              "claimRef": {"namespace": namespace, "name": claim}}})
        objs.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": claim, "namespace": namespace},
                     "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv,
                              "resources": {"requests": {"storage": "1Ti"}}}})
    token = model.get("token", {})
    if token.get("secretName"):
        objs.append({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": token["secretName"], "namespace": namespace},
                     "stringData": {token.get("secretKey", "token"): "e2e-not-a-real-token"}})
    if values.get("priorityClassName"):
        objs.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": values["priorityClassName"]}, "value": 100000})
    return objs


def dra_objects(nodes: list[Mapping], device_class: str, tmp: Path) -> list[dict]:
    """What NVIDIA's DRA driver publishes on the session fleet, from the one source the day-1
    node agents use (tests/e2e/nodeagent.py): its DeviceClass as the driver's chart installs
    it (day1lib.dra_driver_objects) and, for each live GPU node of tests/e2e/hardware.yaml
    whose GPUs are not in MIG mode, the ResourceSlice the emulated kubelet plugin builds from
    the oracle's reading of that node's mock GPUs (nodeagent.dra_driver_slices). The driver
    itself cannot run here (nodeagent.py says why); the scheduler's DRA allocator that
    consumes them is the real one. The slices get fixed names (the driver's resourceslice
    controller generates them) so that the test can apply and delete them."""
    from tests.e2e import day1lib, nodeagent

    [dc] = [o for o in day1lib.dra_driver_objects() if o["kind"] == "DeviceClass"]
    assert dc["metadata"]["name"] == device_class, (dc["metadata"]["name"], device_class)
    hardware = nodeagent.hardware_yaml_nodes()
    live = {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes if n["metadata"]["name"] in hardware}
    slices = nodeagent.dra_driver_slices({n: (uid, hardware[n]) for n, uid in live.items()}, tmp)
    for s in slices:
        s["metadata"]["name"] = s["metadata"].pop("generateName").rstrip("-")
    return [dc, *slices]


def start_prometheus(cluster, prometheus_bin: str, workdir: Path, job: str, target_port: int, *,
                     honor_labels: bool = True, labels: Mapping[str, str] | None = None,
                     name: str = "prometheus"):
    """A real Prometheus on loopback scraping one test-served exporter every second
    (honor_labels as the chart's ServiceMonitors set it), supervised by `cluster`.
    Returns (process, base URL without a trailing slash)."""
    from tests.e2e.conftest import harness

    port = harness.free_port()
    target: dict = {"targets": [f"127.0.0.1:{target_port}"]}
    if labels:
        target["labels"] = dict(labels)
    scrape: dict = {"job_name": job, "static_configs": [target]}
    if honor_labels:
        scrape["honor_labels"] = True
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                   "scrape_configs": [scrape]}))
    proc = cluster.spawn(name, [prometheus_bin, f"--config.file={cfg}",
                                f"--storage.tsdb.path={workdir / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                         ready_url=f"http://127.0.0.1:{port}/-/ready")
    return proc, f"http://127.0.0.1:{port}"


def wait(what: str, predicate, timeout: float = 120, interval: float = 0.5):
    """Poll predicate() until it returns a truthy value (returned); fail with `what` and
    the last value on timeout."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() < t0 + timeout:
        last = predicate()
        if last:
            print(f"[{time.monotonic() - t0:5.1f}s] waited for {what}")
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def daemonset_admits(ds: dict, node: dict) -> bool:
    """The DaemonSet's nodeSelector and required node affinity (In/NotIn/Exists/DoesNotExist,
    terms ORed) admit the node, and its tolerations cover the node's NoSchedule taints."""
    spec = ds["spec"]["template"]["spec"]
    labels = node["metadata"].get("labels", {})
    for t in node.get("spec", {}).get("taints") or []:
        if t.get("effect") in ("NoSchedule", "NoExecute") and not any(
                (tol.get("operator") == "Exists" and tol.get("key") in (None, t["key"]))
                or (tol.get("key") == t["key"] and tol.get("value") == t.get("value"))
                for tol in spec.get("tolerations") or [] if tol.get("effect") in (None, t["effect"])):
            return False
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = (spec.get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms"))
    if not terms:
        return True

    def ok(e):
        v = labels.get(e["key"])
        return {"In": v in e.get("values", []), "NotIn": v not in e.get("values", []),
                "Exists": e["key"] in labels, "DoesNotExist": e["key"] not in labels}[e["operator"]]
    return any(all(ok(e) for e in t.get("matchExpressions", [])) for t in terms)
