"""Bad values are refused by `helm template` (schema or render-time check) with a message
that names the field and says what to change, on Helm 4.1.4 and Helm 3.17.2 alike.

Schema messages differ by Helm major (Helm 4 uses santhosh-tekuri/jsonschema, Helm 3.17
gojsonschema), so each case lists the fragment each one must print; template `fail`
messages are the chart's own and identical on both.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.chart.chartlib import template

# id: (--set values, kube version, fragments Helm 4 must print, fragments Helm 3 must print)
CASES = {
    "unknown-gpu-mode": (
        {"gpu.mode": "fractional"}, "1.34.0",
        ["/gpu/mode", "value must be one of 'whole', 'mig', 'shared', 'dra'"],
        ["gpu.mode must be one of the following", '"whole", "mig", "shared", "dra"']),
    "min-above-max": (
        {"autoscaling.minReplicas": "5", "autoscaling.maxReplicas": "3"}, "1.34.0",
        ["autoscaling.minReplicas (5) is greater than autoscaling.maxReplicas (3)"],
        ["autoscaling.minReplicas (5) is greater than autoscaling.maxReplicas (3)"]),
    "malformed-mig-profile": (
        {"gpu.mode": "mig", "gpu.mig.profile": "3g40gb"}, "1.34.0",
        ["/gpu/mig/profile", "'3g40gb' does not match pattern"],
        ["gpu.mig.profile", "Does not match pattern"]),
    "mig-profile-bad-suffix": (
        {"gpu.mode": "mig", "gpu.mig.profile": "1g.10gb+foo"}, "1.34.0",
        ["/gpu/mig/profile", "does not match pattern"],
        ["gpu.mig.profile", "Does not match pattern"]),
    "gpu-request-differs-from-limit": (
        {"resources.requests.nvidia\\.com/gpu": "2"}, "1.34.0",
        ["resources.requests.nvidia.com/gpu=2 but the GPU limit is 1 (gpu.count): GPU requests must equal limits"],
        ["resources.requests.nvidia.com/gpu=2 but the GPU limit is 1 (gpu.count): GPU requests must equal limits"]),
    "gpu-in-limits-from-values": (
        {"resources.limits.nvidia\\.com/gpu": "2"}, "1.34.0",
        ["invalid propertyName 'nvidia.com/gpu'"],
        ["resources.limits", 'Property name of "nvidia.com/gpu" does not match']),
    "gpu-request-wrong-resource": (
        {"gpu.mode": "mig", "resources.requests.nvidia\\.com/gpu": "1"}, "1.34.0",
        ["resources.requests.nvidia.com/gpu: the pod's GPU resource is nvidia.com/mig-1g.10gb"],
        ["resources.requests.nvidia.com/gpu: the pod's GPU resource is nvidia.com/mig-1g.10gb"]),
    "literal-token": (
        {"model.token": "hf_AbCdEf0123456789"}, "1.34.0",
        ["/model/token", "got string, want object"],
        ["model.token", "Invalid type. Expected: object, given: string"]),
    "literal-token-value-key": (
        {"model.token.value": "hf_AbCdEf0123456789"}, "1.34.0",
        ["/model/token", "additional properties 'value' not allowed"],
        ["model.token", "Additional property value is not allowed"]),
    "literal-token-in-env": (
        {"server.env[0].name": "HF_TOKEN", "server.env[0].value": "hf_AbCdEf0123456789"}, "1.34.0",
        ["at '/server/env/0': 'not' failed"],      # the schema's rule ($defs.envVar "not")
        ["server.env.0: Must not validate the schema (not)"]),
    "dra-on-1.33": (
        {"gpu.mode": "dra"}, "1.33.0",
        ["gpu.mode=dra needs Kubernetes >= 1.34", "v1.33.0"],
        ["gpu.mode=dra needs Kubernetes >= 1.34", "v1.33.0"]),
    "pdb-min-available-blocks-drains": (
        {"pdb.minAvailable": "2"}, "1.34.0",
        ["pdb.minAvailable=2 with 2 replica(s)", "would block every node drain"],
        ["pdb.minAvailable=2 with 2 replica(s)", "would block every node drain"]),
    "pdb-percent-blocks-drains": (
        {"pdb.minAvailable": "100%", "autoscaling.minReplicas": "3"}, "1.34.0",
        ["pdb.minAvailable=100% with 3 replica(s)", "would block every node drain"],
        ["pdb.minAvailable=100% with 3 replica(s)", "would block every node drain"]),
    "pdb-max-unavailable-zero": (
        {"pdb.maxUnavailable": "0"}, "1.34.0",
        ["pdb.maxUnavailable=0 would block every node drain"],
        ["pdb.maxUnavailable=0 would block every node drain"]),
    "pdb-single-replica-min-available": (
        {"autoscaling.engine": "none", "replicaCount": "1", "pdb.minAvailable": "1"}, "1.34.0",
        ["pdb.minAvailable=1 with 1 replica(s)"], ["pdb.minAvailable=1 with 1 replica(s)"]),
    "shared-with-gpu-metric": (
        {"gpu.mode": "shared", "autoscaling.metrics[0].name": "DCGM_FI_DEV_GPU_UTIL",
         "autoscaling.metrics[0].target": "70", "server.args[0]": "--gpu-memory-utilization=0.4"}, "1.34.0",
        ["DCGM_FI_DEV_GPU_UTIL is a GPU metric, but gpu.mode=shared"],
        ["DCGM_FI_DEV_GPU_UTIL is a GPU metric, but gpu.mode=shared"]),
    "shared-custom-server-without-metric": (
        {"gpu.mode": "shared", "server.type": "custom", "server.image.repository": "example/server",
         "server.image.tag": "1.0"}, "1.34.0",
        ["a custom server has no default queue metric: set autoscaling.metrics"],
        ["a custom server has no default queue metric: set autoscaling.metrics"]),
    "mig-with-gpu-util": (
        {"gpu.mode": "mig", "autoscaling.metrics[0].name": "DCGM_FI_DEV_GPU_UTIL",
         "autoscaling.metrics[0].target": "70"}, "1.34.0",
        ["DCGM_FI_DEV_GPU_UTIL is not reported per MIG instance"],
        ["DCGM_FI_DEV_GPU_UTIL is not reported per MIG instance"]),
    "shared-memory-fraction-twice": (
        {"gpu.mode": "shared", "gpu.shared.memoryFraction": 0.4, "server.args[0]": "--gpu-memory-utilization=0.4"},
        "1.34.0", ["set only one"], ["set only one"]),
    "shared-memory-fraction-above-0.95": (
        {"gpu.mode": "shared", "gpu.shared.memoryFraction": 1.5}, "1.34.0",
        ["/gpu/shared/memoryFraction"], ["gpu.shared.memoryFraction"]),
    "shared-mps-count-above-one": (
        {"gpu.mode": "shared", "gpu.count": "2", "server.args[0]": "--gpu-memory-utilization=0.4"}, "1.34.0",
        ["gpu.count=2 with gpu.mode=shared", "failRequestsGreaterThanOne"],
        ["gpu.count=2 with gpu.mode=shared", "failRequestsGreaterThanOne"]),
    "shared-unknown-resource": (
        {"gpu.mode": "shared", "gpu.shared.resourceName": "example.com/gpu"}, "1.34.0",
        ["/gpu/shared/resourceName", "does not match pattern"], ["gpu.shared.resourceName", "Does not match pattern"]),
    "latest-tag": (
        {"server.image.tag": "latest"}, "1.34.0",
        ["server.image.tag: latest is not allowed", "pin a version tag, or set server.image.digest"],
        ["server.image.tag: latest is not allowed", "pin a version tag, or set server.image.digest"]),
    "latest-init-tag": (
        {"model.init.image.tag": "latest"}, "1.34.0",
        ["model.init.image.tag: latest is not allowed"], ["model.init.image.tag: latest is not allowed"]),
    "unknown-key-in-own-block": (
        {"gpu.cuont": "2"}, "1.34.0",
        ["/gpu", "additional properties 'cuont' not allowed"],
        ["gpu", "Additional property cuont is not allowed"]),
    "multi-gpu-without-topology": (
        {"gpu.count": "4"}, "1.34.0",
        ["topology.values: a pod with gpu.count=4 needs a required node affinity on nvidia.com/gpu.topology"],
        ["topology.values: a pod with gpu.count=4 needs a required node affinity on nvidia.com/gpu.topology"]),
    "custom-identical-probes": (
        {"server.type": "custom", "server.image.repository": "example/server", "server.image.tag": "1.0",
         "server.custom.readinessPath": "/healthz"}, "1.34.0",
        ["server.custom.readinessPath must differ from livenessPath"],
        ["server.custom.readinessPath must differ from livenessPath"]),
    "identical-probes-by-override": (
        {"probes.readiness.path": "/health", "probes.readiness.periodSeconds": "15",
         "probes.readiness.timeoutSeconds": "5", "probes.readiness.failureThreshold": "4"}, "1.34.0",
        ["probes: liveness and readiness would be identical (/health, same timing)"],
        ["probes: liveness and readiness would be identical (/health, same timing)"]),
    "custom-without-image": (
        {"server.type": "custom"}, "1.34.0",
        ["server.image.repository", "required for server.type=custom"],
        ["server.image.repository", "required for server.type=custom"]),
    "grace-shorter-than-prestop": (
        {"server.preStopSleepSeconds": "60", "server.terminationGracePeriodSeconds": "30"}, "1.34.0",
        ["server.terminationGracePeriodSeconds (30) must exceed server.preStopSleepSeconds (60)"],
        ["server.terminationGracePeriodSeconds (30) must exceed server.preStopSleepSeconds (60)"]),
    "pvc-without-claim": (
        {"model.source": "pvc"}, "1.34.0",
        ["model.pvc.claimName: model.source=pvc needs"], ["model.pvc.claimName: model.source=pvc needs"]),
    "dra-mig-without-profile": (
        {"gpu.mode": "dra", "gpu.dra.deviceClassName": "mig.nvidia.com"}, "1.34.0",
        ["gpu.dra.migProfile"], ["gpu.dra.migProfile"]),
    "kubernetes-1.28": (
        {}, "1.28.0",
        ["chart requires kubeVersion: >=1.29.0-0 which is incompatible with Kubernetes v1.28.0"],
        ["chart requires kubeVersion: >=1.29.0-0 which is incompatible with Kubernetes v1.28.0"]),
    # 0 is scale to zero (issue 18): allowed by the schema, refused for an HPA unless the
    # cluster enables HPAScaleToZero (tests/chart/test_serving.py has the other cases).
    "min-replicas-zero": (
        {"autoscaling.minReplicas": "0"}, "1.34.0",
        ["autoscaling.minReplicas=0 with engine=hpa needs the alpha HPAScaleToZero"],
        ["autoscaling.minReplicas=0 with engine=hpa needs the alpha HPAScaleToZero"]),
}


def _split(set_values: dict) -> tuple[dict, dict | None]:
    """Floats go through a values file: `--set` keeps 0.4 a string (Helm converts only ints/bools)."""
    floats = {k: v for k, v in set_values.items() if isinstance(v, float)}
    if not floats:
        return set_values, None
    tree: dict = {}
    for key, v in floats.items():
        *parents, leaf = key.split(".")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return {k: v for k, v in set_values.items() if k not in floats}, tree


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_values_are_refused_with_a_clear_message(helm, case):
    set_values, kube, frags4, frags3 = CASES[case]
    set_values, values = _split(set_values)
    proc = template(helm, values=values, set_values=set_values, kube_version=kube)
    assert proc.returncode != 0, f"{case}: rendered although it should fail"
    assert proc.stdout.strip() == "", "no partial manifests on failure"
    frags = frags3 if Path(helm).name == "helm3" else frags4
    for frag in frags:
        assert frag in proc.stderr, f"{case}: {frag!r} not in:\n{proc.stderr}"


def test_dra_renders_on_1_34(helm):
    # The boundary of the DRA check: 1.34.0 itself is accepted.
    proc = template(helm, set_values={"gpu.mode": "dra"}, kube_version="1.34.0")
    assert proc.returncode == 0, proc.stderr
    assert "kind: ResourceClaimTemplate" in proc.stdout


def test_global_values_are_accepted(helm):
    # Parent charts inject `global`; the strict root must allow it.
    proc = template(helm, set_values={"global.imageRegistry": "registry.example"})
    assert proc.returncode == 0, proc.stderr
