"""The workload chart against a REAL kube-apiserver (the e2e control plane of ci/e2e, with
the upstream ServiceMonitor/PrometheusRule/ScaledObject CRDs installed): every scenario's
objects, as each helm renders them, pass the API server's own validation
(`kubectl apply --server-side --dry-run=server`: strict field validation, CEL, CRD
schemas, defaulting and admission, nothing persisted), and the reason the chart never
renders `spec.replicas` under an autoscaler is shown, not assumed: with Helm 4's
server-side apply, an upgrade after someone else scaled the Deployment conflicts on
`.spec.replicas` exactly when the chart renders it.

Why not `helm install --dry-run=server`: it renders with `lookup` allowed and sends no
object to the API server for validation (helm/helm#12510: "--dry-run=server will enable
lookup functions"; helm/helm#31616, still open, would add the server-side validation).
`test_helm_dry_run_server_does_not_validate` proves it on our pinned helms with an object
the API server refuses, and is the negative control of the check used here.

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


def _server_dry_run(env: dict, manifest: str) -> subprocess.CompletedProcess:
    """The API server validating `manifest` as an apply would (field manager helm, as
    Helm 4's server-side apply names itself), persisting nothing."""
    return subprocess.run([str(TOOLS / "kubectl"), "apply", "--server-side", "--dry-run=server",
                           "--field-manager=helm", "--validate=strict", "-n", "inference", "-f", "-"],
                          input=manifest, env=env, capture_output=True, text=True)


def _template(env: dict, helm: str, release: str, chart, *args: str) -> str:
    """The objects as this helm renders them for this cluster (its version and APIs as
    Capabilities: Helm 4's `template --dry-run=server`, Helm 3's `template --validate`)."""
    server = "--dry-run=server" if helm.endswith("/helm") else "--validate"
    proc = subprocess.run([helm, "template", release, str(chart), "-n", "inference", server, *args],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_passes_the_api_servers_validation(apiserver, helm, scenario):
    # The API server's own validation (strict fields, CEL, CRD schemas, defaulting), on
    # every object (hooks such as the helm test Pod included) as this helm renders them.
    name = "h4" if helm.endswith("/helm") else "h3"
    manifest = _template(apiserver, helm, f"{name}-{scenario}"[:40], CHART, "-f", str(scenario_file(scenario)))
    proc = _server_dry_run(apiserver, manifest)
    assert proc.returncode == 0, proc.stderr
    kinds = {line.split()[0].split("/")[0] for line in proc.stdout.splitlines() if "(server dry run)" in line}
    assert "deployment.apps" in kinds and "service" in kinds, proc.stdout


# A Deployment the API server accepts, and three faults it refuses each on its own: a
# label value (ValidateLabels), a field no schema declares (strict field validation), a
# resource name that is neither standard nor domain-qualified. A client that only renders
# sees none of them.
_GOOD = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: bad
  labels:
    app.kubernetes.io/name: bad
spec:
  selector:
    matchLabels: {app: bad}
  template:
    metadata:
      labels: {app: bad}
    spec:
      containers:
        - name: c
          image: registry.k8s.io/pause:3.10
          resources:
            limits: {cpu: "1"}
"""
_FAULTS = {
    "label value": (("app.kubernetes.io/name: bad", 'app.kubernetes.io/name: "not a label value"'), "metadata.labels"),
    "unknown field": (("          resources:", '          commandd: ["x"]\n          resources:'), "commandd"),
    "resource name": (('limits: {cpu: "1"}', 'limits: {cpuu: "1"}'), "cpuu"),
}


def _with(*faults: str) -> str:
    text = _GOOD
    for f in faults:
        (old, new), _ = _FAULTS[f]
        text = text.replace(old, new)
    return text


def test_helm_dry_run_server_does_not_validate(apiserver, helm, tmp_path):
    """Negative control: objects the API server refuses pass `helm install
    --dry-run=server`, but not the server-side dry-run apply the scenarios above go
    through. If a future helm validates, the first assertion fails and says so: then
    helm's own dry run could be the check again."""
    chart = tmp_path / "bad"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: bad\nversion: 0.1.0\n")
    (chart / "templates" / "bad.yaml").write_text(_with(*_FAULTS))
    helm_says = _run([helm, "install", "bad", str(chart), "-n", "inference", "--dry-run=server"],
                     apiserver, check=False)
    assert helm_says.returncode == 0, f"this helm now validates on --dry-run=server: {helm_says.stderr}"
    assert _server_dry_run(apiserver, _template(apiserver, helm, "bad", chart)).returncode != 0
    assert _server_dry_run(apiserver, _GOOD).returncode == 0       # control: the object without faults
    for fault, (_, named) in _FAULTS.items():
        proc = _server_dry_run(apiserver, _with(fault))
        assert proc.returncode != 0 and named in proc.stderr, (fault, proc.stderr)


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
