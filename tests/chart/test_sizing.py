"""Sizing from weights, token Secrets and LoRA adapters in the rendered chart (issue 26), with
the real Helm 4 and Helm 3: a spec's weights become the download volume and ephemeral
storage, a TP8 pod's CPU and memory, `HF_TOKEN(_PATH)` from the Secret, `--max-loras` from the
adapters, InferenceObjective names that stay distinct past 63 characters, and adapter
sources vLLM cannot load refused. Every object passes kubernetes-validate strictly and the
custom resources their upstream CRD schemas."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from gpuvalues.checks.spec import spec_from_text
from gpuvalues.fleet import build_fleet
from tests.chart.chartlib import HELMS, by_kind, crd_errors, k8s_errors, parse
from tests.conftest import CHART, ROOT

LORA = yaml.safe_load((ROOT / "examples" / "values" / "lora-adapters.yaml").read_text())
TP8 = ROOT / "examples" / "nvlink-tp8.yaml"


def values_of(spec_path, workload: str) -> dict:
    fleet = build_fleet(spec_from_text(spec_path.read_text(), str(spec_path), spec_path.parent))
    return dict(fleet.release(workload).values)


def run(helm_name: str, values: dict, *, skip_schema: bool = False) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "v.yaml"
        f.write_text(yaml.safe_dump(values))
        cmd = [HELMS[helm_name], "template", "gi", str(CHART), "--namespace", "inference",
               "--kube-version", "1.34.0", "--values", str(f)]
        return subprocess.run(cmd + (["--skip-schema-validation"] if skip_schema else []),
                              capture_output=True, text=True)


def objects(helm_name: str, values: dict) -> list[dict]:
    proc = run(helm_name, values)
    assert proc.returncode == 0, proc.stderr
    return parse(proc.stdout)


def refusal(helm_name: str, values: dict, *, skip_schema: bool = False) -> str:
    proc = run(helm_name, values, skip_schema=skip_schema)
    return proc.stderr if proc.returncode else ""


def server(objs: list[dict]) -> dict:
    (dep,) = [d for d in by_kind(objs, "Deployment") if d["metadata"]["name"] == "gi-gpu-inference"]
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "server"]
    return {"pod": dep["spec"]["template"]["spec"], "container": c}


@pytest.mark.parametrize("helm_name", sorted(HELMS))
def test_a_tp8_spec_renders_its_weights_cpu_memory_and_token(helm_name):
    values = values_of(TP8, "llama-405b-fp8")
    objs = objects(helm_name, values)
    assert k8s_errors(objs, "1.34") == []
    s = server(objs)
    res = s["container"]["resources"]
    # 2 + 2 x 8 CPU, 16 + 16 x 8 GiB; limits twice that
    assert (res["requests"]["cpu"], res["requests"]["memory"]) == ("18", "144Gi")
    assert (res["limits"]["cpu"], res["limits"]["memory"]) == ("36", "288Gi")
    assert res["limits"]["nvidia.com/gpu"] == 8
    # 405.9B x 1 byte (fp8) -> ceil(1.25 x 405.9) = 508Gi download volume; ephemeral storage
    # covers it + the 8Gi cache, 1Gi tmp and 2Gi for the server
    vols = {v["name"]: v for v in s["pod"]["volumes"]}
    assert vols["model"]["emptyDir"]["sizeLimit"] == "508Gi"
    assert res["requests"]["ephemeral-storage"] == "519Gi"
    assert res["limits"]["ephemeral-storage"] == "519Gi"
    # the gated model's token: a Secret file and HF_TOKEN_PATH (huggingface_hub reads it)
    env = {e["name"]: e for e in s["container"]["env"]}
    assert env["HF_TOKEN_PATH"]["value"] == "/var/run/secrets/model-token/token"
    assert vols["model-token"]["secret"] == {"secretName": "hf-token", "defaultMode": 0o440,
                                            "items": [{"key": "token", "path": "token"}]}
    assert "HF_TOKEN" not in env


@pytest.mark.parametrize("helm_name", sorted(HELMS))
def test_a_one_gpu_pod_keeps_the_chart_defaults_and_env_tokens_use_a_secret_key_ref(helm_name):
    spec = (ROOT / "examples" / "single-a100.yaml").read_text().replace(
        "token: {secretName: hf-token}", "token: {secretName: hf, secretKey: HF_TOKEN, mountAs: env}")
    fleet = build_fleet(spec_from_text(spec))
    objs = objects(helm_name, dict(fleet.release("llama-8b").values))
    s = server(objs)
    res = s["container"]["resources"]
    assert (res["requests"]["cpu"], res["requests"]["memory"]) == ("4", "32Gi")
    assert (res["limits"]["cpu"], res["limits"]["memory"]) == ("8", "64Gi")
    env = {e["name"]: e for e in s["container"]["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}
    assert "model-token" not in {v["name"] for v in s["pod"]["volumes"]}


# --- chart-only installs: CPU and memory scale with the pod's GPUs (issue 26) ----------------

CHART_ONLY = {"topology": {"key": ""}}       # no NVLink affinity: the resources are the point


def chart_only(helm_name: str, **values) -> dict:
    objs = objects(helm_name, {**CHART_ONLY, **values})
    assert k8s_errors(objs, "1.34") == []
    res = server(objs)["container"]["resources"]
    return {part: {k: v for k, v in res[part].items() if k in ("cpu", "memory")} for part in ("requests", "limits")}


@pytest.mark.parametrize("helm_name", sorted(HELMS))
@pytest.mark.parametrize("gpus,cpu,memory", [(1, "4", "32Gi"), (2, "6", "48Gi"), (8, "18", "144Gi")])
def test_without_resources_a_chart_only_pod_scales_with_its_gpus(helm_name, gpus, cpu, memory):
    """`helm install` without gpuvalues: 2 CPU / 16 GiB + 2 CPU / 16 GiB per GPU (the fleet's
    rule), limits twice; before, 4 CPU / 32Gi whatever gpu.count."""
    got = chart_only(helm_name, gpu={"count": gpus})
    double = {"cpu": str(2 * int(cpu)), "memory": f"{2 * int(memory[:-2])}Gi"}
    assert got == {"requests": {"cpu": cpu, "memory": memory}, "limits": double}


@pytest.mark.parametrize("helm_name", sorted(HELMS))
def test_a_mig_slice_counts_as_one_gpu_and_explicit_resources_win_key_by_key(helm_name):
    for gpu in ({"mode": "mig", "count": 2, "mig": {"profile": "3g.40gb"}}, {"mode": "shared", "count": 1}):
        assert chart_only(helm_name, gpu=gpu)["requests"] == {"cpu": "4", "memory": "32Gi"}, gpu
    got = chart_only(helm_name, gpu={"count": 3}, resources={"requests": {"cpu": "500m"}, "limits": {"memory": "1Ti"}},
                     resourceDefaults={"memoryGiBPerGpu": 1.5})
    # cpu: the given request, its limit twice it; memory: 16 + 1.5 x 3 GiB, the given limit
    assert got == {"requests": {"cpu": "500m", "memory": "20992Mi"}, "limits": {"cpu": "1", "memory": "1Ti"}}


def test_the_chart_defaults_are_the_fleets_numbers():
    """One rule: gpuvalues' fleet writes these resources for a spec, the chart derives the same
    ones when a user installs it alone (its resourceDefaults); both must agree, number and
    output, or a chart-only pod and a fleet pod of the same model would differ."""
    from gpuvalues.fleet import spec as fleet_spec
    d = yaml.safe_load((CHART / "values.yaml").read_text())["resourceDefaults"]
    assert (d["cpuBase"], d["cpuPerGpu"], d["memoryGiBBase"], d["memoryGiBPerGpu"], d["limitFactor"]) == (
        fleet_spec.POD_CPU_BASE, fleet_spec.POD_CPU_PER_GPU, fleet_spec.POD_MEMORY_GIB_BASE,
        fleet_spec.POD_MEMORY_GIB_PER_GPU, 2)
    w = build_fleet(spec_from_text((ROOT / "examples" / "single-a100.yaml").read_text())).spec.workloads[0]
    for gpus in (1, 2, 8):
        assert chart_only("helm", gpu={"count": gpus}) == w.pod_resources(gpus)


def lora_values(*adapters: tuple[str, str], **lora) -> dict:
    out = {k: v for k, v in LORA.items()}
    out["lora"] = {**{k: v for k, v in LORA["lora"].items() if k != "maxLoras"}, **lora,
                   "adapters": [{"name": n, "source": s} for n, s in adapters]}
    return out


@pytest.mark.parametrize("helm_name", sorted(HELMS))
def test_max_loras_follows_the_adapters(helm_name):
    three = [("sql", "org/a"), ("support", "org/b"), ("summary", "org/c")]
    args = server(objects(helm_name, lora_values(*three)))["container"]["args"]
    assert "--max-loras=3" in args and "--max-loras=1" not in args
    args = server(objects(helm_name, lora_values(*three, maxLoras=2)))["container"]["args"]
    assert "--max-loras=2" in args                       # an explicit value wins
    args = server(objects(helm_name, lora_values(runtimeUpdates=True)))["container"]["args"]
    assert "--max-loras=1" in args                       # runtime loading only: at least 1


@pytest.mark.parametrize("helm_name", sorted(HELMS))
def test_inference_objective_names_stay_distinct_past_63_characters(helm_name):
    prefix = "customer-support-escalation-summaries-in-english"    # 48 characters
    names = [f"{prefix}-v1", f"{prefix}-v2", "sql"]
    objs = objects(helm_name, lora_values(*[(n, f"org/{n}") for n in names]))
    got = {o["metadata"]["labels"]["gpu-inference/lora-adapter"]: o["metadata"]["name"]
           for o in by_kind(objs, "InferenceObjective")}
    assert len(set(got.values())) == 3 and all(len(n) <= 63 for n in got.values())
    assert got["sql"] == "gi-gpu-inference-sql"                       # short names unchanged
    full = f"gi-gpu-inference-{prefix}-v1"
    assert got[f"{prefix}-v1"] == full[:54] + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]
    # negative control: plain truncation (the chart before) made the two one object
    assert len({f"gi-gpu-inference-{n}"[:63].rstrip("-") for n in names[:2]}) == 1
    assert [e for o in by_kind(objs, "InferenceObjective") for e in crd_errors(o)] == []
    assert k8s_errors(objs, "1.34") == []


@pytest.mark.parametrize("helm_name", sorted(HELMS))
@pytest.mark.parametrize("source", ["s3://adapters/sql", "gs://a/b", "org/sql@v2", "./sql",
                                    "/models/../etc/sql"])
def test_adapter_sources_vllm_cannot_load_are_refused_with_and_without_the_schema(helm_name, source):
    values = lora_values(("sql", source))
    assert refusal(helm_name, values)
    why = refusal(helm_name, values, skip_schema=True)
    assert "lora.adapters: sql" in why and "Hugging Face repo id" in why


@pytest.mark.parametrize("helm_name", sorted(HELMS))
def test_absolute_paths_and_repo_ids_render(helm_name):
    values = lora_values(("sql", "/models/adapters/sql"), ("support", "org/support-lora"))
    args = server(objects(helm_name, values))["container"]["args"]
    i = args.index("--lora-modules")
    assert args[i + 1:i + 3] == ["sql=/models/adapters/sql", "support=org/support-lora"]


def test_huggingface_hub_reads_the_token_where_the_pod_mounts_it(tmp_path):
    """The file the chart mounts and the HF_TOKEN_PATH it sets, replayed with the real
    huggingface_hub (it reads HF_TOKEN_PATH at import: constants.py), in a child process
    whose root for the mount is tmp_path."""
    objs = objects("helm", values_of(TP8, "llama-405b-fp8"))
    s = server(objs)
    env = {e["name"]: e.get("value") for e in s["container"]["env"]}
    (mount,) = [m for m in s["container"]["volumeMounts"] if m["name"] == "model-token"]
    (vol,) = [v for v in s["pod"]["volumes"] if v["name"] == "model-token"]
    (item,) = vol["secret"]["items"]
    path = tmp_path / mount["mountPath"].lstrip("/") / item["path"]
    path.parent.mkdir(parents=True)
    path.write_text("hf_example_token\n")
    assert env["HF_TOKEN_PATH"] == f"{mount['mountPath']}/{item['path']}"
    code = "import huggingface_hub; print(huggingface_hub.get_token())"
    for token_path, expected in ((str(path), "hf_example_token"), (str(tmp_path / "none"), "None")):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={"HF_TOKEN_PATH": token_path, "HF_HOME": str(tmp_path / "home"),
                                   "PATH": "/usr/bin:/bin"})
        assert proc.stdout.strip() == expected, proc.stderr     # the second: a negative control
