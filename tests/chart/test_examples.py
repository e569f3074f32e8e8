"""Golden examples: every documented spec goes spec -> fleet -> checks -> real helm
(Helm 4 and Helm 3) -> kubernetes-validate for every release, and the rendered objects
carry what the spec asked for (expectations written from each example's text, not from
the builder). The whole fleet of each example schedules at min and max replicas on its
own nodes."""
from __future__ import annotations

import os

import pytest
import yaml

from gpuvalues import cli, pipeline
from gpuvalues.io import files as files_mod
from gpuvalues.checks.fleet import build_checked
from gpuvalues.checks.spec import load_spec
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
    ("mig-and-tp-one-pool", "llama-70b"): ({"nvidia.com/gpu": 2}, "HorizontalPodAutoscaler"),
    ("mig-and-tp-one-pool", "qwen-7b"): ({"nvidia.com/mig-3g.40gb": 1}, "HorizontalPodAutoscaler"),
    ("mig-and-tp-one-pool", "reranker"): ({"nvidia.com/mig-1g.10gb": 1}, "HorizontalPodAutoscaler"),
    ("time-slicing-renamed-and-not", "phi-mini"): ({"nvidia.com/gpu.shared": 1},
                                                   "HorizontalPodAutoscaler"),
    ("time-slicing-renamed-and-not", "qwen-3b"): ({"nvidia.com/gpu": 1}, "HorizontalPodAutoscaler"),
    ("mps-two-models", "embed"): ({"nvidia.com/gpu.shared": 1}, "HorizontalPodAutoscaler"),
    ("mps-two-models", "phi-mini"): ({"nvidia.com/gpu.shared": 1}, "HorizontalPodAutoscaler"),
    # 17.5 GB = 16.30 GiB (+5%) does not fit H200 1g.18gb (16.00 GiB usable): 1g.35gb
    ("mixed-a100-h100-h200", "gemma-9b"): ({"nvidia.com/mig-1g.35gb": 1}, "HorizontalPodAutoscaler"),
    ("mixed-a100-h100-h200", "embed"): ({"nvidia.com/mig-1g.10gb": 1}, "HorizontalPodAutoscaler"),
    ("mixed-a100-h100-h200", "mistral-small"): ({"nvidia.com/mig-3g.71gb": 1},
                                                "HorizontalPodAutoscaler"),
    ("mixed-a100-h100-h200", "llama-70b"): ({"nvidia.com/gpu": 4}, "HorizontalPodAutoscaler"),
    ("keda-fleet", "qwen-32b"): ({"nvidia.com/gpu": 1}, "ScaledObject"),
    ("keda-fleet", "llama-8b"): ({"nvidia.com/gpu": 1}, "ScaledObject"),
    ("keda-fleet", "phi-mini"): ({"nvidia.com/gpu": 1}, "ScaledObject"),
    ("serving-fleet", "llama-8b-lora"): ({"nvidia.com/gpu": 1}, "ScaledObject"),
    ("serving-fleet", "qwen-7b-image"): ({"nvidia.com/gpu": 1}, "ScaledObject"),
    ("serving-fleet", "mistral-rare"): ({"nvidia.com/gpu": 1}, "ScaledObject"),
    ("dra-fleet", "llama-70b"): ({}, "HorizontalPodAutoscaler"),       # devices via a claim
    ("dra-fleet", "qwen-7b"): ({}, "HorizontalPodAutoscaler"),
}
CASES = [(p, w.name) for p in EXAMPLES for w in load_spec(p).workloads]


def _objects(out):
    """Every object written by `render -o DIR` (`<release>_<kind>-<name>.yaml`)."""
    return [yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))]


def test_every_example_workload_has_expectations():
    assert sorted((p.stem, w) for p, w in CASES) == sorted(EXPECT)


@pytest.mark.parametrize("path, workload", CASES, ids=lambda x: getattr(x, "stem", x))
def test_example_renders_and_validates(helm, path, workload):
    spec = load_spec(path)
    release = build_checked(spec).release(workload)
    objects = render(helm, values=dict(release.values), release=release.name,
                     namespace=release.namespace, kube_version=spec.kubernetes_version)
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
    if spec.workload(workload).server == "vllm":      # triton reads a model repository
        # served under the spec's model name: downloaded by name, or loaded from a path/URI
        model = spec.workload(workload).model
        assert f"--model={model}" in container["args"] or \
            f"--served-model-name={model}" in container["args"], container["args"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_fleet_renders_with_unique_names_and_schedules(helm4, path):
    """Every release of the fleet (platform + one per workload) renders; no two objects of
    one kind share a namespace and name; gpuvalues.planners.scheduling.fit replays the scheduler's
    filters for all releases together on the fleet's nodes: min and max replicas schedule."""
    spec = load_spec(path)
    fleet = build_checked(spec)
    rendered = [(r, render(helm4, values=dict(r.values), release=r.name, namespace=r.namespace,
                           kube_version=spec.kubernetes_version)) for r in fleet.releases]
    keys = [(o["kind"], o["metadata"].get("namespace", r.namespace), o["metadata"]["name"])
            for r, objs in rendered for o in objs]
    assert len(keys) == len(set(keys))
    # the platform release: at most the adapter and NFD's master, no inference server
    assert {o["metadata"]["labels"]["app.kubernetes.io/component"] for o in rendered[0][1]
            if o["kind"] == "Deployment"} <= {"prometheus-adapter", "nfd-master"}
    assert pipeline.fit_findings(fleet, rendered) == []


def _affinity_values(dep, key):
    terms = dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [e["values"] for t in terms for e in t["matchExpressions"] if e["key"] == key]


def test_tensor_parallel_pods_pin_to_the_nvlink_label(helm4, tmp_path):
    out = tmp_path / "m"
    assert cli.main(["render", str(ROOT / "examples" / "nvlink-tp8.yaml"), "-o", str(out),
                     "-q", "--helm", helm4]) == 0
    deps = [o for o in _objects(out) if o["kind"] == "Deployment" and "llama" in o["metadata"]["name"]]
    assert _affinity_values(one(deps, "Deployment"), "nvidia.com/gpu.topology") == [["NV8"]]


def test_time_slicing_config_reaches_the_device_plugin(helm4, tmp_path):
    out = tmp_path / "m"
    assert cli.main(["render", str(ROOT / "examples" / "rtx4090-time-slicing.yaml"),
                     "-o", str(out), "-q", "--helm", helm4]) == 0
    objects = _objects(out)
    configs = [c for c in by_kind(objects, "ConfigMap") if "ts-4" in (c.get("data") or {})]
    assert len(configs) == 1 and configs[0]["metadata"]["name"].startswith("gpu-platform-")
    ts = yaml.safe_load(configs[0]["data"]["ts-4"])["sharing"]["timeSlicing"]
    assert ts["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert ts["renameByDefault"] is True
    # renamed replicas keep GFD's plain product label (k8s-device-plugin
    # internal/lm/resource.go appends -SHARED only when not renamed); tests/oracle runs GFD
    dep = one([o for o in objects if o["kind"] == "Deployment" and "phi" in o["metadata"]["name"]],
              "Deployment")
    assert _affinity_values(dep, "nvidia.com/gpu.product") == [["NVIDIA-GeForce-RTX-4090"]]


def test_render_o_dir_one_file_per_object(helm4, tmp_path):
    proc = run([GV, "render", str(ROOT / "examples" / "single-a100.yaml"), "--helm", helm4])
    assert proc.returncode == 0, proc.stderr
    streamed = [d for d in yaml.safe_load_all(proc.stdout) if d]
    out = tmp_path / "manifests"
    proc = run([GV, "render", str(ROOT / "examples" / "single-a100.yaml"), "-o", str(out),
                "--helm", helm4])
    assert proc.returncode == 0, proc.stderr
    files = sorted(out.glob("*.yaml"))
    assert {p.name.split("_")[0] for p in files} == {"gpu-platform", "llama-8b"}   # per release
    assert len(files) == len(streamed)
    assert [f for f in os.listdir(out) if f.startswith(".")] == [files_mod.TREE_MARKER]  # no temp files
    written = []
    for f in files:
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        assert len(docs) == 1
        obj = docs[0]
        assert f.name.split("_", 1)[1].startswith(obj["kind"].lower() + "-")
        written.append(obj)
    def key(o):
        return (o["kind"], o["metadata"]["name"])
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


def test_the_api_example_script(tmp_path, capsys):
    """examples/api_example.py, the public API end to end, on a multi-workload spec."""
    import runpy
    mod = runpy.run_path(str(ROOT / "examples" / "api_example.py"))
    assert mod["main"](str(ROOT / "examples" / "mixed-a100-h100-mig.yaml"), str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.count("helm upgrade --install") == 4 and out.startswith("helm upgrade --install gpu-platform")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "device-plugin-configs.yaml", "embed-small.values.yaml", "gpu-platform.values.yaml",
        "llama-70b.values.yaml", "mig-parted-config.yaml", "mistral-7b.values.yaml",
        "node-groups.yaml", "node-labels.yaml"]
