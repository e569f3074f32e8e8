"""Golden examples: every documented spec goes spec -> values -> checks -> real helm
(Helm 4 and Helm 3) -> kubernetes-validate, and the rendered objects carry what the spec
asked for (expectations written from each example's text, not from the builder)."""
from __future__ import annotations

import os

import pytest
import yaml

from gpuvalues import cli, pipeline
from gpuvalues.checks.built import build_all
from gpuvalues.checks.spec import load_spec
from gpuvalues.io.files import TREE_MARKER
from tests.chart.chartlib import by_kind, k8s_errors, render
from tests.chart.test_workload import one
from tests.conftest import ROOT, run

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GV = str(ROOT / ".venv" / "bin" / "gpuvalues")

# Per example workload: the GPU resource in the server's limits, the scaling object.
EXPECT = {
    ("single-a100", "llama-8b"): ({"nvidia.com/gpu": 1}, "HorizontalPodAutoscaler"),
    ("mixed-a100-h100-mig", "embed-small"): ({"nvidia.com/mig-1g.10gb": 1},
                                             "HorizontalPodAutoscaler"),
    ("mixed-a100-h100-mig", "mistral-7b"): ({"nvidia.com/mig-3g.40gb": 1},
                                            "HorizontalPodAutoscaler"),
    ("mixed-a100-h100-mig", "llama-70b"): ({"nvidia.com/gpu": 2}, "HorizontalPodAutoscaler"),
    ("rtx4090-time-slicing", "phi-mini"): ({"nvidia.com/gpu.shared": 1},
                                           "HorizontalPodAutoscaler"),
    ("nvlink-tp8", "llama-405b-fp8"): ({"nvidia.com/gpu": 8}, "HorizontalPodAutoscaler"),
    ("keda", "qwen-32b"): ({"nvidia.com/gpu": 1}, "ScaledObject"),
}
CASES = [(p, w.name) for p in EXAMPLES for w in load_spec(p).workloads]


def test_every_example_workload_has_expectations():
    assert sorted((p.stem, w) for p, w in CASES) == sorted(EXPECT)


@pytest.mark.parametrize("path, workload", CASES, ids=lambda x: getattr(x, "stem", x))
def test_example_renders_and_validates(helm, path, workload):
    spec = load_spec(path)
    built = {b.workload: b for b in build_all(spec)}[workload]
    objects = render(helm, values=built.values, release=workload, kube_version=spec.kubernetes_version)
    minor = ".".join(spec.kubernetes_version.split(".")[:2])
    for m in sorted({minor, "1.37"}):
        assert k8s_errors(objects, m) == []
    limits, scaler = EXPECT[(path.stem, workload)]
    dep = one(objects, "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    gpu_limits = {k: v for k, v in container["resources"]["limits"].items()
                  if k.startswith("nvidia.com/")}
    assert gpu_limits == limits
    assert "replicas" not in dep["spec"]            # an autoscaler owns the replica count
    assert len(by_kind(objects, scaler)) == 1
    other = {"HorizontalPodAutoscaler", "ScaledObject"} - {scaler}
    assert by_kind(objects, other.pop()) == []
    # gpuvalues.planners.fit replays the scheduler's filters on the spec's pools (labelled and
    # partitioned as the build says): min and max replicas both schedule.
    assert pipeline.fit_findings(spec, built, objects) == []
    if spec.workload(workload).server == "vllm":      # triton reads a model repository
        assert f"--model={spec.workload(workload).model}" in container["args"]


def _affinity_values(dep, key):
    terms = dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [e["values"] for t in terms for e in t["matchExpressions"] if e["key"] == key]


def _rendered(out):
    """The objects `render -o DIR` wrote (each file but write_tree's marker)."""
    return [yaml.safe_load(p.read_text()) for p in sorted(out.iterdir()) if p.name != TREE_MARKER]


def test_tensor_parallel_pods_pin_to_the_nvlink_label(helm4, tmp_path):
    out = tmp_path / "m"
    assert cli.main(["render", str(ROOT / "examples" / "nvlink-tp8.yaml"), "-o", str(out),
                     "-q", "--helm", helm4]) == 0
    objects = _rendered(out)
    assert _affinity_values(one(objects, "Deployment"), "nvidia.com/gpu.topology") == [["NV8"]]


def test_time_slicing_config_reaches_the_device_plugin(helm4, tmp_path):
    out = tmp_path / "m"
    assert cli.main(["render", str(ROOT / "examples" / "rtx4090-time-slicing.yaml"),
                     "-o", str(out), "-q", "--helm", helm4]) == 0
    objects = _rendered(out)
    configs = [c for c in by_kind(objects, "ConfigMap") if "ts-4" in (c.get("data") or {})]
    assert len(configs) == 1
    ts = yaml.safe_load(configs[0]["data"]["ts-4"])["sharing"]["timeSlicing"]
    assert ts["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert _affinity_values(one(objects, "Deployment"), "nvidia.com/gpu.product") == \
        [["NVIDIA-GeForce-RTX-4090-SHARED"]]


def test_render_o_dir_one_file_per_object(helm4, tmp_path):
    proc = run([GV, "render", str(ROOT / "examples" / "single-a100.yaml"), "--helm", helm4])
    assert proc.returncode == 0, proc.stderr
    streamed = [d for d in yaml.safe_load_all(proc.stdout) if d]
    out = tmp_path / "manifests"
    proc = run([GV, "render", str(ROOT / "examples" / "single-a100.yaml"), "-o", str(out),
                "--helm", helm4])
    assert proc.returncode == 0, proc.stderr
    files = sorted(p for p in out.iterdir() if p.name != TREE_MARKER)
    assert len(files) == len(streamed)
    assert [f for f in os.listdir(out) if f.startswith(".")] == [TREE_MARKER]   # no temp files left
    written = []
    for f in files:
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        assert len(docs) == 1
        obj = docs[0]
        assert f.name.startswith(obj["kind"].lower() + "-")
        written.append(obj)
    key = lambda o: (o["kind"], o["metadata"]["name"])
    assert sorted(written, key=key) == sorted(streamed, key=key)


def test_render_without_arguments_uses_the_builtin_spec(helm4):
    proc = run([GV, "render", "--helm", helm4])
    assert proc.returncode == 0, proc.stderr
    objects = [d for d in yaml.safe_load_all(proc.stdout) if d]
    dep = one(objects, "Deployment")
    limits = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 1
    assert "NVIDIA-A100-SXM4-80GB" in _affinity_values(dep, "nvidia.com/gpu.product")[0]


def test_render_values_file_and_kube_version(helm4, tmp_path):
    v = tmp_path / "v.yaml"
    v.write_text("gpu:\n  mode: dra\n")
    proc = run([GV, "render", "--values", str(v), "--kube-version", "1.33.0", "--helm", helm4])
    assert proc.returncode == 2 and "[GV009]" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    proc = run([GV, "render", "--values", str(v), "--kube-version", "1.34.0", "--helm", helm4])
    assert proc.returncode == 0, proc.stderr
    assert "kind: ResourceClaimTemplate" in proc.stdout


def test_helm_3_can_be_chosen(helm3):
    proc = run([GV, "render", "--helm", helm3, "-q"])
    assert proc.returncode == 0, proc.stderr
