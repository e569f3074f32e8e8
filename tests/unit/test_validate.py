"""Validation: values files against the chart's schema (coalesced with the chart's
defaults, positions in the user's file) and the semantic rules GV001-GV009."""
from __future__ import annotations

import pytest

from gpuvalues.yamlio.loader import load_text
from gpuvalues.checks.rules import (
    CODES,
    Context,
    Finding,
    ValidationFailed,
    check_values,
    coalesce,
    errors_only,
    schema_findings,
    semantic_findings,
)


def codes(findings):
    return sorted(f.code for f in findings)


def loaded(text: str, name: str = "values.yaml"):
    return load_text(text, name, allow_empty=True)


# ------------------------------------------------------------------ schema layer

def test_values_schema_is_valid_draft_2020_12():
    import json

    from jsonschema import Draft202012Validator

    from gpuvalues.bundle import VALUES_SCHEMA
    Draft202012Validator.check_schema(json.loads(VALUES_SCHEMA.read_text()))


def test_empty_values_file_is_valid_against_the_chart():
    assert errors_only(check_values(loaded(""))) == []


def test_values_schema_errors_point_into_the_users_file():
    text = "gpu:\n  mode: halves\n  count: two\nautoscaling:\n  bogusKey: 1\n"
    found = check_values(loaded(text))
    lines = [str(f) for f in found]
    assert lines[0].startswith('values.yaml:2:9: gpu.mode: "halves" is not one of:')
    assert lines[1].startswith("values.yaml:3:10: gpu.count: expected integer, got string")
    assert lines[2].startswith("values.yaml:5:3: autoscaling.bogusKey: unknown key 'bogusKey'")
    assert len(found) == 3


def test_findings_sorted_by_position_and_deduplicated():
    schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "integer", "minimum": 3}}}
    found = schema_findings(loaded("b: 1\na: x\n"), schema)
    assert [(f.line, f.path) for f in found] == [(1, "b"), (2, "a")]


def test_format_checking_is_on():
    schema = {"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}}}
    (f,) = schema_findings(loaded("ip: 300.1.1.1\n"), schema)
    assert "is not a 'ipv4'" in f.message and (f.line, f.column) == (1, 5)


def test_one_of_reports_the_closest_branch_not_a_dump():
    schema = {"oneOf": [{"type": "string", "enum": ["a", "b"]},
                        {"type": "object", "additionalProperties": False,
                         "properties": {"mode": {"enum": ["a", "b"]},
                                        "size": {"type": "integer", "minimum": 2}}}]}
    (f,) = schema_findings(loaded("mode: a\nsize: 1\n"), schema)
    assert (f.path, f.message, f.line) == ("size", "1 is less than the minimum of 2", 2)
    # (a key named `n` would be the key "false" for Helm: YAML 1.1)


def test_coalesce_like_helm():
    defaults = {"a": {"b": 1, "c": 2}, "l": [1, 2], "d": 1}
    assert coalesce(defaults, {"a": {"b": 5}, "l": [3], "d": None}) == \
        {"a": {"b": 5, "c": 2}, "l": [3]}


def test_finding_format_and_codes_are_stable():
    f = Finding("GV004", "msg", "pdb.minAvailable", "v.yaml", 3, 5, hint="fix it")
    assert str(f) == "v.yaml:3:5: pdb.minAvailable: msg [GV004] (fix: fix it)"
    assert str(Finding("GV010", "m", "a", severity="warning")) == "a: warning: m [GV010]"
    # stable: the first codes never renumbered; later ones (each engineer's range) in order
    assert [f"GV{i:03d}" for i in range(21)] == list(CODES)[:21] and "GV100" in CODES
    assert list(CODES) == sorted(CODES)
    err = ValidationFailed([Finding("GV001", "b", source="x", line=9),
                            Finding("GV002", "a", source="x", line=2)])
    assert str(err) == "x:2:1: (root): a [GV002] (and 1 more)"
    assert err.lines() == ["x:2:1: (root): a [GV002]", "x:9:1: (root): b [GV001]"]


# ------------------------------------------------------------------ semantic rules

def values(**over):
    v = {"gpu": {"mode": "whole", "count": 1}, "autoscaling": {"engine": "hpa",
                                                                "minReplicas": 2,
                                                                "maxReplicas": 4}}
    for k, val in over.items():
        v = coalesce(v, {k: val})
    return v


def test_clean_values_have_no_findings():
    assert semantic_findings(values(), ctx=Context(kube_version="1.34.0",
                                                   gpu_models=("A100-80GB",),
                                                   inventory_gpus=8, gpus_per_node=8)) == []


def test_gv001_profile_not_on_the_gpu():
    v = values(gpu={"mode": "mig", "mig": {"profile": "1g.10gb"}})
    assert codes(semantic_findings(v, ctx=Context(gpu_models=("A100-80GB",)))) == []
    found = semantic_findings(v, ctx=Context(gpu_models=("A30",)))
    assert codes(found) == ["GV001"]
    assert "1g.6gb" in found[0].message      # the catalog lists A30's real profiles
    found = semantic_findings(v, ctx=Context(gpu_models=("RTX-4090",)))
    assert codes(found) == ["GV001"] and "no MIG" in found[0].message


def test_gv001_from_gpu_products_in_the_values_file():
    text = ("gpuProducts: [NVIDIA-A30]\ngpu:\n  mode: mig\n  mig:\n    profile: 3g.40gb\n")
    lv = loaded(text)
    (f,) = semantic_findings(lv.data, loaded=lv)
    assert (f.code, f.line, f.column, f.path) == ("GV001", 5, 14, "gpu.mig.profile")


def test_gv002_more_instances_than_a_node_holds():
    # A100 80GB: at most 2 x 3g.40gb per GPU (MIG user guide), so 2 GPUs hold 4.
    v = values(gpu={"mode": "mig", "count": 5, "mig": {"profile": "3g.40gb"}})
    found = semantic_findings(v, ctx=Context(gpu_models=("A100-80GB",), gpus_per_node=2))
    assert codes(found) == ["GV002"]
    v = values(gpu={"mode": "mig", "count": 4, "mig": {"profile": "3g.40gb"}})
    assert semantic_findings(v, ctx=Context(gpu_models=("A100-80GB",), gpus_per_node=2)) == []


@pytest.mark.parametrize("mode, gpu_extra, metric, bad", [
    ("mig", {"mig": {"profile": "1g.10gb"}}, "DCGM_FI_DEV_GPU_UTIL", True),
    ("mig", {"mig": {"profile": "1g.10gb"}}, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", False),
    ("whole", {}, "DCGM_FI_DEV_GPU_UTIL", False),
    ("whole", {}, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", True),
    ("shared", {}, "DCGM_FI_DEV_GPU_UTIL", True),
    ("shared", {}, "vllm:num_requests_waiting", False),
])
def test_gv003_metric_for_the_mode(mode, gpu_extra, metric, bad):
    v = values(gpu={"mode": mode, **gpu_extra},
               autoscaling={"metrics": [{"name": metric, "target": "1"}]})
    assert codes(semantic_findings(v)) == (["GV003"] if bad else [])


def test_gv003_custom_server_on_shared_gpu_needs_a_metric():
    v = values(gpu={"mode": "shared"}, server={"type": "custom"})
    assert codes(semantic_findings(v)) == ["GV003"]
    v["autoscaling"]["engine"] = "none"
    assert semantic_findings(v) == []


@pytest.mark.parametrize("pdb, engine, bad", [
    ({"maxUnavailable": 0}, "hpa", True),
    ({"maxUnavailable": "0%"}, "hpa", True),
    ({"maxUnavailable": 1}, "hpa", False),
    ({"minAvailable": 2}, "hpa", True),        # minReplicas 2: nothing evictable
    ({"minAvailable": 1}, "hpa", False),
    ({"minAvailable": "100%"}, "hpa", True),
    ({"minAvailable": 2, "enabled": False}, "hpa", False),
])
def test_gv004_pdb_blocking_drains(pdb, engine, bad):
    v = values(pdb=pdb)
    assert codes(semantic_findings(v)) == (["GV004"] if bad else [])


def test_gv005_max_replicas_beyond_inventory():
    v = values(gpu={"count": 2}, autoscaling={"maxReplicas": 5})
    assert codes(semantic_findings(v, ctx=Context(inventory_gpus=10))) == []
    found = semantic_findings(v, ctx=Context(inventory_gpus=9))
    assert codes(found) == ["GV005"] and "10 > 9" in found[0].message
    # MIG: 7 x 1g.10gb per A100 80GB, 2 GPUs -> 14 instances
    v = values(gpu={"mode": "mig", "mig": {"profile": "1g.10gb"}},
               autoscaling={"maxReplicas": 15})
    ctx = Context(gpu_models=("A100-80GB",), inventory_gpus=2)
    assert codes(semantic_findings(v, ctx=ctx)) == ["GV005"]
    v["autoscaling"]["maxReplicas"] = 14
    assert semantic_findings(v, ctx=ctx) == []


def test_gv006_tensor_parallel_wider_than_nvlink():
    v = values(gpu={"count": 8})
    assert semantic_findings(v, ctx=Context(nvlink_group=8)) == []
    (f,) = semantic_findings(v, ctx=Context(nvlink_group=4, nvlink_source="pool x"))
    assert (f.code, f.severity) == ("GV006", "error") and "pool x" in f.message
    (f,) = semantic_findings(v, ctx=Context(nvlink_group=1))
    assert (f.code, f.severity) == ("GV006", "warning")
    # from the values file's own topology values
    v = values(gpu={"count": 8}, topology={"values": ["NV4"]})
    assert codes(semantic_findings(v)) == ["GV006"]


def test_gv007_time_slicing_memory():
    cfg = {"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 4}]}}}
    v = values(gpu={"mode": "shared"}, autoscaling={"metrics": [
        {"name": "vllm:num_requests_waiting", "target": "5"}]},
        platform={"devicePlugin": {"config": {"map": {"ts": cfg}}}})
    ctx = Context(gpu_models=("RTX-4090",), memory_gb=6)     # 24 GB / 4 = 6 GB: fits
    assert semantic_findings(v, ctx=ctx) == []
    ctx = Context(gpu_models=("RTX-4090",), memory_gb=6.5)
    (f,) = semantic_findings(v, ctx=ctx)
    assert f.code == "GV007" and "24 GB / 4 replicas = 6.0 GB" in f.message


def test_gv008_gpu_requests_differ_from_limits():
    v = values(resources={"requests": {"nvidia.com/gpu": 2}})
    assert codes(semantic_findings(v)) == ["GV008"]
    v = values(resources={"requests": {"nvidia.com/gpu": 1}})
    assert semantic_findings(v) == []


def test_gv009_dra_needs_1_34():
    v = values(gpu={"mode": "dra"})
    assert codes(semantic_findings(v, ctx=Context(kube_version="1.33.2"))) == ["GV009"]
    assert semantic_findings(v, ctx=Context(kube_version="1.34.0")) == []


def test_semantic_findings_are_positioned_in_the_file():
    text = "pdb:\n  maxUnavailable: 0\n"
    lv = loaded(text)
    (f,) = semantic_findings(lv.data, loaded=lv)
    assert str(f).startswith("values.yaml:2:19: pdb.maxUnavailable: maxUnavailable 0")
    assert f.hint


@pytest.mark.parametrize("text, bad", [
    ("server:\n  env:\n    - {name: HF_TOKEN, value: hf_AbCdEf0123456789}\n", "server.env[0]"),
    ("extraEnv:\n  - {name: my_api_key, value: x}\n", "extraEnv[0]"),
    ("extraEnv:\n  - {name: DB_PASSWORD, value: x}\n", "extraEnv[0]"),
    ("server:\n  env:\n    - {name: HF_TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}\n", None),
    ("server:\n  env:\n    - {name: LOG_LEVEL, value: debug}\n", None),
])
def test_a_literal_credential_in_env_is_refused_by_the_schema(text, bad):
    # the rule's one home is values.schema.json ($defs.envVar "not"); helm applies the same
    # schema at render (tests/chart/test_workload_negative.py "literal-token-in-env")
    found = errors_only(check_values(loaded(text)))
    if bad is None:
        assert found == []
    else:
        (f,) = found
        assert (f.code, f.path) == ("GV000", bad)
        assert "a literal credential" in f.message and "secretKeyRef" in f.message
