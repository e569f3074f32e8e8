"""Upgrade after the HPA changed the replica count: Helm 4's server-side apply must not
fight the autoscaler over `.spec.replicas` (no conflict, no reset), then `helm test`
passes and `helm uninstall` removes everything."""
from __future__ import annotations

import json

from tests.e2e import e2elib
from tests.e2e.e2elib import CHART

SCENARIO = CHART / "ci" / "minimal-values.yaml"  # HPA engine (the chart's default)
HPA_MANAGER = "kube-controller-manager"  # the field manager the HPA controller writes as


def test_upgrade_after_hpa_scaling_keeps_replicas(kube, namespace):
    release = "up"
    values = e2elib.effective_values(SCENARIO)
    objects = e2elib.render(release, namespace, [SCENARIO])
    dep = next(o for o in objects if o["kind"] == "Deployment" and e2elib.is_gpu_workload(o))
    hpa = next(o for o in objects if o["kind"] == "HorizontalPodAutoscaler")
    name, sel = dep["metadata"]["name"], e2elib.selector_string(dep["spec"]["selector"]["matchLabels"])
    lo, hi = int(hpa["spec"]["minReplicas"]), int(hpa["spec"]["maxReplicas"])
    scaled = lo + 1
    assert scaled <= hi, "the scenario leaves no room to scale"

    kube.helm("install", release, str(CHART), "-n", namespace, "-f", str(SCENARIO), "--wait", "--timeout", "90s")
    # The real HPA controller raises the Deployment to minReplicas (no metrics needed).
    kube.wait(f"{lo} replicas set by the HPA", lambda: kube.json("get", "deployment", name, "-n", namespace)
              ["spec"]["replicas"] == lo)

    # Scale like the HPA does: through the scale subresource, as kube-controller-manager.
    # (No metrics pipeline drives the real HPA above minReplicas here; see test_hpa_* for that.)
    kube.kubectl("patch", "deployment", name, "-n", namespace, "--subresource=scale", "--type=merge",
                 "-p", json.dumps({"spec": {"replicas": scaled}}), f"--field-manager={HPA_MANAGER}")
    kube.wait(f"{scaled} Ready pods", lambda: len([p for p in kube.pods(namespace, sel)
                                                    if e2elib.pod_is_ready(p)]) == scaled)

    res = kube.helm("upgrade", release, str(CHART), "-n", namespace, "-f", str(SCENARIO),
                    "--set", "commonAnnotations.e2e/upgraded=yes", "--wait", "--timeout", "90s", check=False)
    assert res.returncode == 0, f"helm upgrade failed:\n{res.stderr}"
    assert "conflict" not in (res.stderr + res.stdout).lower(), res.stderr

    live = kube.json("get", "deployment", name, "-n", namespace, "--show-managed-fields")
    assert live["metadata"].get("annotations", {}).get("e2e/upgraded") == "yes", "the upgrade was not applied"
    assert live["spec"]["replicas"] == scaled, f"helm upgrade reset replicas to {live['spec']['replicas']}"
    helm_owned = [m for m in live["metadata"]["managedFields"]
                  if m["operation"] == "Apply" and "f:replicas" in m.get("fieldsV1", {}).get("f:spec", {})]
    assert not helm_owned, f"Helm's apply owns .spec.replicas: {helm_owned}"
    # kubectl's own rollout check: the upgraded ReplicaSet is complete at the HPA's count
    kube.kubectl("rollout", "status", f"deployment/{name}", "-n", namespace, "--timeout=60s")
    assert kube.json("get", "deployment", name, "-n", namespace)["status"]["readyReplicas"] == scaled
    kube.wait(f"{scaled} Ready pods after the rollout", lambda: len(
        [p for p in kube.pods(namespace, sel) if e2elib.pod_is_ready(p) and not p["metadata"].get("deletionTimestamp")]
    ) == scaled)
    assert values["autoscaling"]["engine"] == "hpa"

    res = kube.helm("test", release, "-n", namespace, "--timeout", "60s", check=False)
    assert res.returncode == 0, f"helm test failed after the upgrade:\n{res.stderr}{res.stdout}"
