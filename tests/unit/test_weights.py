"""Sizing from weights, token Secrets and LoRA sources in a spec (issue 26): GV055, GV056,
GV057, `Workload.weights_gb`, host resources per GPU."""
from __future__ import annotations

import json

import pytest
import yaml
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from gpuvalues import cli
from gpuvalues.checks import weights
from gpuvalues.checks.spec import check_spec, spec_from_text
from gpuvalues.errors import ValidationFailed
from gpuvalues.fleet import build_fleet
from gpuvalues.fleet.spec import DTYPE_BYTES, weights_gb
from gpuvalues.yamlio.loader import load_text
from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "schemas" / "spec.schema.json").read_text())
CHART_VALUES = yaml.safe_load((ROOT / "charts" / "gpu-inference" / "values.yaml").read_text())


def spec_text(pools: str = "{name: h100, gpu: H100-80GB-SXM, gpusPerNode: 8, nodes: 2}",
              **w) -> str:
    workload = {"name": "m", "model": "microsoft/Phi-3-mini-4k-instruct", "gpus": 1,
                "throughputPerReplica": 2, "load": {"peak": 2}, **w}
    return yaml.safe_dump({"apiVersion": "gpuvalues/v1", "cluster": {"nodePools": [yaml.safe_load(pools)]},
                           "workloads": [workload], "sharing": "whole"}, sort_keys=False)


def findings(text: str) -> list:
    return check_spec(load_text(text, "s.yaml"))


def codes(text: str, code: str) -> list:
    return [f for f in findings(text) if f.code == code]


# ------------------------------------------------------------------ weights

def test_dtype_bytes_cover_the_schema_enum_exactly():
    assert sorted(SCHEMA["$defs"]["workload"]["properties"]["dtype"]["enum"]) == sorted(DTYPE_BYTES)


@pytest.mark.parametrize("size, params, dtype, expected", [
    (None, 8, None, 16.0),            # bf16 by default
    (None, 70.6, "bf16", 141.2),
    (None, 405.9, "fp8", 405.9),
    (None, 8, "int8", 8.0),
    (None, 8, "fp32", 32.0),
    (None, 8, "int4", 8 * (0.5 + 2 / 128)),
    (None, 16, "nvfp4", 16 * 0.5625),
    (None, 32, "mxfp4", 32 * 0.53125),
    (20, 8, "bf16", 20.0),            # modelSizeGB wins
    (None, None, "fp8", None),        # a dtype alone states nothing
])
def test_weights_gb(size, params, dtype, expected):
    got = weights_gb(size, params, dtype)
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_the_fleet_sizes_the_model_volume_from_parameters():
    spec = spec_from_text(spec_text(model="meta-llama/Llama-3.1-70B-Instruct", gpus=2,
                                    tensorParallel=2, parameters=70.6))
    assert spec.workloads[0].weights_gb == pytest.approx(141.2)
    values = build_fleet(spec).release("m").values
    assert values["model"]["sizeGB"] == 141.2
    # negative control: without the weights the chart keeps its default volume
    bare = build_fleet(spec_from_text(spec_text(model="meta-llama/Llama-3.1-70B-Instruct", gpus=2,
                                                tensorParallel=2))).release("m").values
    assert "sizeGB" not in bare["model"]


# ------------------------------------------------------------------ GV055

def test_memory_below_the_weights_is_refused_with_its_position():
    text = spec_text(memoryGB=5, parameters=3.82)
    (f,) = codes(text, "GV055")
    assert f.severity == "error" and f.path == "workloads[0].memoryGB"
    assert (f.line, f.column) == (text.splitlines().index("  memoryGB: 5") + 1, 13)
    assert "7.64 GB" in f.message and "8.64 GB" in f.message
    with pytest.raises(ValidationFailed):
        spec_from_text(text)


@pytest.mark.parametrize("memory, refused", [(8.63, True), (8.64, False), (10, False)])
def test_the_kv_floor_boundary(memory, refused):
    # 3.82B x 2 bytes = 7.64 GB, floor max(1, 0.764) = 1 GB: 8.64 GB
    assert bool(codes(spec_text(memoryGB=memory, parameters=3.82), "GV055")) == refused


def test_the_floor_is_ten_percent_of_large_weights():
    assert weights.kv_floor_gb(141.2) == pytest.approx(14.12)
    assert weights.kv_floor_gb(2) == 1.0
    # 70B in bf16 on 2 GPUs: memoryGB 150 holds 141.2 GB but not the 14.12 GB floor
    text = spec_text(model="meta-llama/Llama-3.1-70B-Instruct", gpus=2, memoryGB=150, parameters=70.6)
    assert codes(text, "GV055")
    assert not codes(text.replace("memoryGB: 150", "memoryGB: 156"), "GV055")


def test_memory_gib_and_model_size_gb_are_checked_too():
    (f,) = codes(spec_text(memoryGiB=7, modelSizeGB=7.64), "GV055")
    assert f.path == "workloads[0].memoryGiB" and "modelSizeGB" in f.message
    assert not codes(spec_text(memoryGiB=8.1, modelSizeGB=7.64), "GV055")    # 8.70 GB


def test_the_cli_refuses_it_in_one_line_with_exit_1_and_2(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(spec_text(memoryGB=5, parameters=3.82))
    assert cli.main(["validate", str(f)]) == 1
    out = capsys.readouterr().out
    assert "[GV055]" in out and "s.yaml:" in out
    assert cli.main(["values", str(f), "-o", str(tmp_path / "v.yaml")]) == 2
    err = capsys.readouterr().err
    assert "GV055" in err and "Traceback" not in err
    assert not (tmp_path / "v.yaml").exists()


# ------------------------------------------------------------------ GV056

@pytest.mark.parametrize("model, extra, warned", [
    ("meta-llama/Llama-3.1-70B-Instruct", {}, True),
    ("meta-llama/Llama-3.1-405B-Instruct-FP8", {}, True),
    ("Qwen/Qwen2.5-32B-Instruct", {}, True),
    ("meta-llama/Llama-3.1-70B-Instruct", {"parameters": 70.6}, False),
    ("meta-llama/Llama-3.1-70B-Instruct", {"modelSizeGB": 141}, False),
    ("meta-llama/Llama-3.1-8B-Instruct", {}, False),          # small: the default volume holds it
    ("deepseek-ai/DeepSeek-V3", {"gpus": 8, "tensorParallel": 8}, True),   # several GPUs
    ("deepseek-ai/DeepSeek-V3", {"gpus": 8, "modelSizeGB": 690}, False),
])
def test_large_models_without_stated_weights_are_warned(model, extra, warned):
    got = codes(spec_text(model=model, **extra), "GV056")
    assert bool(got) == warned
    assert all(f.severity == "warning" and f.path == "workloads[0].model" for f in got)


@pytest.mark.parametrize("model, expected", [
    ("meta-llama/Llama-3.1-70B-Instruct", 70), ("Qwen/Qwen2.5-0.5B-Instruct", 0.5),
    ("meta-llama/Llama-3.1-405B-Instruct-FP8", 405), ("BAAI/bge-large-en-v1.5", None),
    ("google/gemma-2-9b-it", 9), ("org/b100-model", None), ("7b/tiny", None),
])
def test_named_parameters(model, expected):
    assert weights.named_parameters_b(model) == expected


# ------------------------------------------------------------------ GV057

@pytest.mark.parametrize("source, extra, refused", [
    ("s3://adapters/sql", {}, True),
    ("gs://adapters/sql", {"modelPvc": "weights"}, True),
    ("org/llama-sql-lora", {}, False),
    ("org/llama-sql-lora@v2", {}, True),                    # no revisions in --lora-modules
    ("/models/adapters/sql", {"modelPvc": "weights"}, False),
    ("/models/adapters/sql", {"modelSource": {"type": "cache", "storageClassName": "nfs"},
                              "modelSizeGB": 16}, False),
    ("/models/adapters/sql", {}, True),                      # a download cache: nothing puts it there
    ("/etc/adapters/sql", {"modelPvc": "weights"}, True),    # not a volume of the pod
    ("/models/../etc", {"modelPvc": "weights"}, True),
])
def test_lora_sources_are_what_vllm_loads(source, extra, refused):
    got = codes(spec_text(lora=[{"name": "sql", "source": source}], **extra), "GV057")
    assert bool(got) == refused, got
    assert all(f.path == "workloads[0].lora[0].source" for f in got)


def test_an_s3_adapter_message_says_what_to_do():
    (f,) = codes(spec_text(lora=[{"name": "sql", "source": "s3://adapters/sql"}]), "GV057")
    assert "s3://" in f.message and "get_adapter_absolute_path" in f.message
    assert "Hugging Face" in f.hint and "/models" in f.hint


@pytest.mark.parametrize("text", [
    "org/model", "model", "a/b.c-d_e", "org/model--x", "org/..x", "org/model.git", "a/b/c",
    "-org/model", "org/model-", "x" * 96 + "/m", "x" * 97 + "/m", "org/mödel", "org/mo del",
    "s3://b/k", "org/m@rev", "_o/_m_", ".org/m",
])
def test_repo_ids_agree_with_huggingface_hub(text):
    """The Hub client's own validate_repo_id judges (upstream code, not a copy)."""
    try:
        validate_repo_id(text)
        upstream = True
    except HFValidationError:
        upstream = False
    assert weights.is_hf_repo_id(text) == upstream, text


# ------------------------------------------------------------------ host resources, token

def test_host_resources_scale_with_the_pod_s_gpus():
    text = spec_text(model="meta-llama/Llama-3.1-405B-Instruct-FP8", gpus=8, tensorParallel=8,
                     parameters=405.9, dtype="fp8")
    tp8 = build_fleet(spec_from_text(text)).release("m").values["resources"]
    one = build_fleet(spec_from_text(spec_text(memoryGB=10, parameters=3.82))).release("m").values["resources"]
    assert tp8 == {"requests": {"cpu": "18", "memory": "144Gi"}, "limits": {"cpu": "36", "memory": "288Gi"}}
    # one GPU: the chart's own default for one GPU (its resourceDefaults, the same rule:
    # tests/chart/test_sizing.py renders both), so 1-GPU pods are unchanged
    d = CHART_VALUES["resourceDefaults"]
    assert one == {"requests": {"cpu": f"{d['cpuBase'] + d['cpuPerGpu']:g}", "memory": f"{d['memoryGiBBase'] + d['memoryGiBPerGpu']:g}Gi"},
                   "limits": {"cpu": f"{2 * (d['cpuBase'] + d['cpuPerGpu']):g}",
                              "memory": f"{2 * (d['memoryGiBBase'] + d['memoryGiBPerGpu']):g}Gi"}}
    custom = build_fleet(spec_from_text(spec_text(gpus=4, memoryGB=10, parameters=3.82,
                                                  resources={"cpuPerGpu": 4, "memoryGiBPerGpu": 8.5})))
    assert custom.release("m").values["resources"]["requests"] == {"cpu": "18", "memory": "50Gi"}


def test_mig_and_shared_pods_get_the_one_gpu_share():
    text = spec_text(memoryGB=10, parameters=3.82).replace("sharing: whole", "sharing: time-slicing")
    values = build_fleet(spec_from_text(text)).release("m").values
    assert values["gpu"]["mode"] == "shared"
    assert values["resources"]["requests"] == {"cpu": "4", "memory": "32Gi"}


@pytest.mark.parametrize("token, expected", [
    ({"secretName": "hf-token"}, {"secretName": "hf-token", "secretKey": "token", "mountAs": "file"}),
    ({"secretName": "hf", "secretKey": "HF_TOKEN", "mountAs": "env"},
     {"secretName": "hf", "secretKey": "HF_TOKEN", "mountAs": "env"}),
])
def test_a_token_secret_reaches_the_chart_values(token, expected):
    text = spec_text(model="meta-llama/Llama-3.1-8B-Instruct", memoryGB=40,
                     modelSource={"type": "download", "token": token})
    assert build_fleet(spec_from_text(text)).release("m").values["model"]["token"] == expected
    assert "token" not in build_fleet(spec_from_text(spec_text(memoryGB=40))).release("m").values["model"]


def test_a_literal_token_is_refused_by_the_schema():
    text = spec_text(memoryGB=40, modelSource={"type": "download", "token": {"secretName": "hf", "value": "hf_x"}})
    assert [f.code for f in findings(text)] == ["GV000"]


def test_every_gated_example_names_a_token_secret():
    gated = ("meta-llama/", "google/gemma", "mistralai/Mistral-7B")
    for f in sorted((ROOT / "examples").glob("*.yaml")):
        for w in yaml.safe_load(f.read_text())["workloads"]:
            src = w.get("modelSource", {})
            if w["model"].startswith(gated) and src.get("type") != "streamer":
                assert src.get("token", {}).get("secretName"), (f.name, w["name"])


def test_the_warning_names_the_download_volume_only_when_the_model_downloads():
    (dl,) = codes(spec_text(model="meta-llama/Llama-3.1-70B-Instruct"), "GV056")
    (pvc,) = codes(spec_text(model="meta-llama/Llama-3.1-70B-Instruct", modelPvc="weights"), "GV056")
    assert "64Gi" in dl.message and "64Gi" not in pvc.message and "memoryGB" in pvc.message
