"""The workload chart against a REAL kube-apiserver (the e2e control plane of ci/e2e, with
the upstream ServiceMonitor/PrometheusRule/ScaledObject CRDs installed): every scenario
passes `helm install --dry-run=server` on both helms, and the reason the chart never
renders `spec.replicas` under an autoscaler is shown, not assumed: with Helm 4's
server-side apply, an upgrade after someone else scaled the Deployment conflicts on
`.spec.replicas` exactly when the chart renders it.

Marked e2e (it needs `bash ci/e2e/build.sh`; without the binaries it FAILS, never
skips). Scaling is done with `kubectl scale` (the scale subresource, as the HPA controller
does); no metrics pipeline is needed for that.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.chart.test_workload import SCENARIOS, scenario_file
from tests.conftest import CHART, TOOLS
from tests.e2e.conftest import harness

pytestmark = pytest.mark.e2e  # also set by the directory; kept for a direct run


@pytest.fixture(scope="module")
def apiserver():
    """KUBECONFIG env of a control plane of this module's own (namespace `inference`),
    stopped after: its releases run pods that would take GPUs of the session's fleet."""
    try:
        harness.Binaries.find()
    except harness.ClusterError as e:
        pytest.fail(str(e), pytrace=False)
    with harness.Cluster.start() as cluster:
        env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
        _run([str(TOOLS / "kubectl"), "create", "namespace", "inference"], env)
        yield env


def _run(cmd: list[str], env: dict, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return proc


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_passes_server_side_dry_run(apiserver, helm, scenario):
    # The API server's own validation (strict fields, CEL, CRD schemas, defaulting).
    name = "h4" if helm.endswith("/helm") else "h3"
    _run([helm, "install", f"{name}-{scenario}"[:40], str(CHART), "-n", "inference",
          "-f", str(scenario_file(scenario)), "--dry-run=server"], apiserver)


def _replicas(env: dict, deployment: str) -> int:
    out = _run([str(TOOLS / "kubectl"), "-n", "inference", "get", f"deployment/{deployment}",
                "-o", "jsonpath={.spec.replicas}"], env)
    return int(out.stdout)


@pytest.mark.parametrize("engine", ["hpa", "keda"])
def test_helm4_upgrade_after_scaling_keeps_the_autoscalers_replicas(apiserver, helm4, engine):
    rel = f"ssa-{engine}"
    common = ["-n", "inference", "--set", f"autoscaling.engine={engine}", "--set", "helmTest.enabled=false"]
    _run([helm4, "install", rel, str(CHART), *common], apiserver)
    _run([str(TOOLS / "kubectl"), "-n", "inference", "scale", f"deployment/{rel}-gpu-inference",
          "--replicas=5"], apiserver)
    _run([helm4, "upgrade", rel, str(CHART), *common, "--set", "commonLabels.revision=two"], apiserver)
    assert _replicas(apiserver, f"{rel}-gpu-inference") == 5


def test_helm4_upgrade_conflicts_when_the_chart_renders_replicas(apiserver, helm4):
    # The counter-example: with engine none the chart renders spec.replicas, and after a
    # scale by another field manager the server-side-apply upgrade is refused.
    rel = "ssa-none"
    common = ["-n", "inference", "--set", "autoscaling.engine=none", "--set", "helmTest.enabled=false"]
    _run([helm4, "install", rel, str(CHART), *common], apiserver)
    _run([str(TOOLS / "kubectl"), "-n", "inference", "scale", f"deployment/{rel}-gpu-inference",
          "--replicas=5"], apiserver)
    proc = _run([helm4, "upgrade", rel, str(CHART), *common, "--set", "commonLabels.revision=two"],
                apiserver, check=False)
    assert proc.returncode != 0
    assert "conflict" in proc.stderr and ".spec.replicas" in proc.stderr


def test_helm3_upgrade_would_reset_rendered_replicas(apiserver, helm3):
    # Helm 3's client-side three-way merge does not conflict: it silently resets the
    # replicas the autoscaler chose, the other half of why the chart leaves them out.
    rel = "csa-none"
    common = ["-n", "inference", "--set", "autoscaling.engine=none", "--set", "replicaCount=2",
              "--set", "helmTest.enabled=false"]
    _run([helm3, "install", rel, str(CHART), *common], apiserver)
    _run([str(TOOLS / "kubectl"), "-n", "inference", "scale", f"deployment/{rel}-gpu-inference",
          "--replicas=5"], apiserver)
    _run([helm3, "upgrade", rel, str(CHART), *common, "--set", "commonLabels.revision=two"], apiserver)
    assert _replicas(apiserver, f"{rel}-gpu-inference") == 2
    rel = "csa-hpa"
    common = ["-n", "inference", "--set", "helmTest.enabled=false"]
    _run([helm3, "install", rel, str(CHART), *common], apiserver)
    _run([str(TOOLS / "kubectl"), "-n", "inference", "scale", f"deployment/{rel}-gpu-inference",
          "--replicas=5"], apiserver)
    _run([helm3, "upgrade", rel, str(CHART), *common, "--set", "commonLabels.revision=two"], apiserver)
    assert _replicas(apiserver, f"{rel}-gpu-inference") == 5
