"""The spec: schema (all errors, positions, best-match explanations), cross-field rules,
frozen dataclasses with defaults."""
from __future__ import annotations

import dataclasses
import json

import pytest
from jsonschema import Draft202012Validator

from gpuvalues.bundle import SPEC_SCHEMA
from gpuvalues.checks.rules import ValidationFailed
from gpuvalues.checks.spec import load_spec, spec_from_text
from gpuvalues.errors import GpuValuesError, SpecError
from gpuvalues.fleet.spec import Spec
from tests.conftest import ROOT

MINIMAL = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - name: a100
      gpu: A100-80GB
      gpusPerNode: 8
      nodes: 2
workloads:
  - name: m
    model: org/model
    gpus: 1
"""


def test_schema_is_valid_draft_2020_12():
    schema = json.loads(SPEC_SCHEMA.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_minimal_spec_defaults():
    spec = spec_from_text(MINIMAL, "s.yaml")
    assert isinstance(spec, Spec)
    pool = spec.node_pools[0]
    assert (pool.name, pool.gpu.name, pool.gpus_per_node, pool.nodes, pool.mig, pool.gpus) == \
        ("a100", "A100-80GB", 8, 2, False, 16)
    w = spec.workloads[0]
    assert (w.server, w.tensor_parallel, w.gpus, w.memory_gb, w.sharing) == \
        ("vllm", 1, 1, None, None)
    assert spec.sharing.mode == "auto"
    assert (spec.autoscaling.engine, spec.autoscaling.metric) == ("hpa", "choose")
    assert spec.platform.device_plugin and not spec.platform.gpu_operator
    assert spec.kubernetes_version == "1.34.0"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.workloads[0].gpus = 2


def test_full_fields_and_short_kube_version():
    text = MINIMAL.replace("apiVersion: gpuvalues/v1\n", "apiVersion: gpuvalues/v1\n"
                           "kubernetesVersion: v1.33\nsharing: {mode: time-slicing, "
                           "replicasPerGpu: 4}\n")
    text += ("    memoryGB: 12.5\n    tensorParallel: 1\n    throughputPerReplica: 3\n"
             "    load: {base: 1, peak: 9}\n    slo: {latencyMs: 800}\n")
    spec = spec_from_text(text)
    assert spec.kubernetes_version == "1.33.0" and spec.kube_minor == 33
    assert spec.sharing.mode == "time-slicing" and spec.sharing.replicas_per_gpu == 4
    w = spec.workloads[0]
    assert (w.memory_gb, w.throughput_per_replica, w.load.base, w.load.peak,
            w.slo.latency_ms, w.slo.percentile) == (12.5, 3, 1, 9, 800, 95.0)


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_example_is_a_valid_spec(path):
    spec = load_spec(path)
    assert spec.workloads and spec.node_pools


def _errors(text: str) -> list[str]:
    with pytest.raises(ValidationFailed) as exc:
        spec_from_text(text, "s.yaml")
    assert isinstance(exc.value, SpecError) and isinstance(exc.value, GpuValuesError)
    return exc.value.lines()


def test_all_errors_at_once_sorted_with_positions():
    text = MINIMAL.replace("gpusPerNode: 8", "gpusPerNode: eight") \
                  .replace("    gpus: 1\n", "    gpus: 1\n    server: vlm\n    gpuz: 2\n")
    lines = _errors(text)
    assert lines == [
        's.yaml:6:20: cluster.nodePools[0].gpusPerNode: expected integer, got string '
        '"eight" [GV000]',
        's.yaml:12:13: workloads[0].server: "vlm" is not one of: "vllm", "triton", '
        '"custom" [GV000]',
        "s.yaml:13:5: workloads[0].gpuz: unknown key 'gpuz' [GV000] (fix: did you mean "
        "'gpus'?)",
    ]


def test_one_of_is_explained_by_the_closest_alternative():
    text = MINIMAL + "sharing:\n  mode: time-slicing\n  replicasPerGpu: 1\n"
    assert _errors(text) == ["s.yaml:14:19: sharing.replicasPerGpu: 1 is less than the "
                             "minimum of 2 [GV000]"]
    text = MINIMAL + "sharing: timeslicing\n"
    (line,) = _errors(text)
    assert line.startswith('s.yaml:12:10: sharing: "timeslicing" is not one of: "auto"')


def test_any_of_required_names_the_alternatives():
    text = MINIMAL.replace("    gpus: 1\n", "")
    assert _errors(text) == ["s.yaml:9:5: workloads[0]: needs 'gpus' or 'memoryGB' or 'memoryGiB' or 'nodesPerReplica' [GV000]"]


def test_missing_required_and_wrong_api_version():
    text = "apiVersion: v2\ncluster: {nodePools: []}\n"
    lines = _errors(text)
    assert "s.yaml:1:1: (root): missing required key 'workloads' [GV000]" in lines
    assert "s.yaml:1:13: apiVersion: must be 'gpuvalues/v1', got 'v2' [GV000]" in lines
    assert any("cluster.nodePools: 0 items, at least 1 allowed" in ln for ln in lines)


def test_huge_numbers_are_rejected_not_overflowed():
    lines = _errors(MINIMAL.replace("nodes: 2", "nodes: 99999999999999999999999"))
    assert len(lines) == 1 and "cluster.nodePools[0].nodes" in lines[0]
    assert lines[0].startswith("s.yaml:7:14:")


def test_latest_tag_refused():
    (line,) = _errors(MINIMAL + "    image: vllm/vllm-openai:latest\n")
    assert "image tag must be pinned" in line and line.startswith("s.yaml:12:12:")


@pytest.mark.parametrize("change, expected", [
    (lambda t: t + "    nodePool: h100\n", "s.yaml:12:15: workloads[0].nodePool: no node "
     "pool named 'h100'; pools: a100 [GV000] (fix: use a pool name)"),
    (lambda t: t + "    tensorParallel: 4\n", "s.yaml:11:11: workloads[0].gpus: "
     "tensorParallel 4 needs at least that many GPUs, gpus is 1 [GV000] (fix: set gpus >= "
     "tensorParallel)"),
    (lambda t: t + "    load: {base: 5, peak: 2}\n", "s.yaml:12:18: workloads[0].load.base: "
     "base load 5 exceeds peak 2 [GV000] (fix: base <= peak)"),
    (lambda t: t + "autoscaling: {minReplicas: 5, maxReplicas: 3}\n",
     "s.yaml:12:28: autoscaling.minReplicas: minReplicas 5 > maxReplicas 3 [GV011] (fix: "
     "make autoscaling.minReplicas <= autoscaling.maxReplicas)"),
])
def test_cross_field_rules(change, expected):
    assert _errors(change(MINIMAL)) == [expected]


def test_duplicate_names():
    text = MINIMAL.replace("workloads:", "    - name: a100\n      gpu: H100-80GB-SXM\n"
                           "      gpusPerNode: 8\n      nodes: 1\nworkloads:")
    (line,) = _errors(text)
    assert line.startswith("s.yaml:8:13: cluster.nodePools[1].name: duplicate node pool "
                           "name 'a100'")


def test_yaml12_warnings_are_kept_on_the_spec():
    spec = spec_from_text(MINIMAL.replace("nodes: 2", "nodes: 2\n      mig: on"), "s.yaml")
    assert spec.node_pools[0].mig is True
    assert [(w.code, w.line, w.path) for w in spec.warnings] == \
        [("GV010", 8, "cluster.nodePools[0].mig")]


def test_spec_lookup_errors():
    spec = spec_from_text(MINIMAL)
    with pytest.raises(SpecError, match="no workload named 'x'; the spec has: m"):
        spec.workload("x")


@pytest.mark.parametrize("server, key", [("triton", "modelPvc"), ("custom", "image")])
def test_servers_that_need_more(server, key):
    (line,) = _errors(MINIMAL + f"    server: {server}\n")
    assert line == f"s.yaml:9:5: workloads[0]: missing required key '{key}' [GV000]"
    extra = "    modelPvc: repo\n" if key == "modelPvc" else "    image: reg.io/srv:1.0\n"
    w = spec_from_text(MINIMAL + f"    server: {server}\n" + extra).workloads[0]
    assert (w.model_pvc, w.image) == (("repo", None) if key == "modelPvc"
                                      else (None, "reg.io/srv:1.0"))
