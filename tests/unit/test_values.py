"""The values builder: decisions per sharing mode, the node-side configs, and errors
placed at the spec line that causes them."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest

import gpuvalues
from gpuvalues import yamlio
from gpuvalues.checks.built import build_all, build_values
from gpuvalues.checks.rules import ValidationFailed, check_values, errors_only
from gpuvalues.checks.spec import load_spec, spec_from_text
from gpuvalues.errors import CapacityError, CatalogError, GpuValuesError, PlanError, SpecError
from gpuvalues.planners import deviceplugin, mig, migparted
from tests.conftest import ROOT
from tests.unit.oracles import replicas_oracle

EXAMPLES = ROOT / "examples"
BUILTIN = ROOT / "gpuvalues" / "data" / "examples" / "a100-small.yaml"


def test_build_values_is_exported():
    assert gpuvalues.build_values is build_values


def test_builtin_example_whole_gpus():
    v = build_values(load_spec(BUILTIN))
    assert v.values["gpu"] == {"mode": "whole", "count": 1}
    assert v.values["server"] == {"type": "vllm"}
    a = v.values["autoscaling"]
    # base 4 req/s, peak 20 req/s x 1.2 headroom, 4 req/s per replica
    assert a["minReplicas"] == max(2, replicas_oracle(4, 4)) == 3
    assert a["maxReplicas"] == replicas_oracle(24, 4)
    assert a["metrics"][0]["name"] == "vllm:num_requests_waiting"
    assert "NVIDIA-A100-SXM4-80GB" in v.values["gpuProducts"]
    assert v.values["platform"]["devicePlugin"]["enabled"] is True
    assert v.mig_parted is None
    # what the builder returns passes the chart's own schema (checked again here)
    lv = yamlio.Loaded(v.values, "v", "", {}, {}, ())
    assert errors_only(check_values(lv)) == []


def test_max_replicas_capped_by_the_inventory():
    v = build_values(load_spec(EXAMPLES / "single-a100.yaml"))
    assert replicas_oracle(7.2, 3) > 4                 # the model alone would want more
    assert v.values["autoscaling"]["maxReplicas"] == 4  # 1 node x 4 GPUs
    assert any("capped at 4" in d for d in v.decisions)


def test_mixed_fleet_mig_profiles_and_layout():
    spec = load_spec(EXAMPLES / "mixed-a100-h100-mig.yaml")
    embed, mistral, llama = build_all(spec)
    # smallest A100 80GB profiles holding 4 GB and 30 GB (MIG user guide: 1g.10gb, 3g.40gb)
    assert embed.values["gpu"] == {"mode": "mig", "count": 1,
                                   "mig": {"strategy": "mixed", "profile": "1g.10gb"}}
    assert mistral.values["gpu"]["mig"]["profile"] == "3g.40gb"
    assert llama.values["gpu"] == {"mode": "whole", "count": 2}
    assert llama.values["topology"] == {"values": ["NV8"]}
    cfg = embed.mig_parted
    assert cfg == mistral.mig_parted
    migparted.validate_mig_parted_config(cfg, gpu="A100-80GB")
    # Count what the layout gives, per profile and in GPUs, over the labelled nodes.
    instances = {"1g.10gb": 0, "3g.40gb": 0}
    gpus_used = 0
    for group, entries in cfg["mig-configs"].items():
        nodes = embed.node_groups[group][1]
        for e in entries:
            mig.place("A100-80GB", e["mig-devices"])       # every GPU's layout is placeable
            if e["mig-devices"]:
                gpus_used += len(e["devices"]) * nodes
            for p, n in e["mig-devices"].items():
                instances[p] += n * len(e["devices"]) * nodes
    # Peak demand (M/M/c oracle, 20% headroom) and the fewest A100s that can hold it:
    # a GPU has 7 compute and 8 memory slices, and holds at most 2 x 3g.40gb.
    small, medium = replicas_oracle(240, 50), replicas_oracle(19.2, 4)
    assert instances["1g.10gb"] >= small and instances["3g.40gb"] >= medium
    assert gpus_used == max(math.ceil((small + 3 * medium) / 7),
                            math.ceil((small + 4 * medium) / 8), math.ceil(medium / 2))
    assert embed.values["autoscaling"]["maxReplicas"] == small
    assert mistral.values["autoscaling"]["maxReplicas"] == medium
    assert embed.node_labels == {"a100-mig": {"nvidia.com/mig.config": "a100-mig",
                                              "nvidia.com/device-plugin.config": "a100-mig"}}
    # MIG scales on GR_ENGINE_ACTIVE; the GPU platform is installed by the first release only
    assert mistral.values["autoscaling"]["metrics"][0]["name"] == \
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert embed.values["platform"]["devicePlugin"]["enabled"] is True
    dp_map = embed.values["platform"]["devicePlugin"]["config"]["map"]
    assert dp_map["a100-mig"]["flags"]["migStrategy"] == "mixed"
    assert mistral.values["platform"]["devicePlugin"]["enabled"] is False


def test_mig_explicit_max_replicas_beyond_the_layout():
    s = spec(mig="true", sharing="mig", workload="    memoryGB: 30",
             autoscaling="  maxReplicas: 16")               # 8 GPUs x 2 x 3g.40gb = 16
    assert build_values(s).values["autoscaling"]["maxReplicas"] == 16
    with pytest.raises(ValidationFailed) as exc:           # 17 > 16 instances: GV005
        build_values(spec(mig="true", sharing="mig", workload="    memoryGB: 30",
                          autoscaling="  maxReplicas: 17"))
    assert [f.code for f in exc.value.findings] == ["GV005"]


def test_mig_falls_back_to_a_proportional_split_when_the_peak_does_not_fit():
    # 1 node x 4 A100 80GB; default peak demand 10 replicas each: 3g.40gb needs 5 GPUs,
    # 1g.10gb needs 2 -> 7 > 4. Split (hand-computed): 3 GPUs x 2 x 3g.40gb = 6 instances,
    # 1 GPU x 7 x 1g.10gb = 7 instances; maxReplicas is capped to those.
    text = BASE.format(gpu="A100-80GB", mig="true", label="NV8", kube="1.34.0",
                       workload="    memoryGB: 30\n  - name: small\n    model: m2\n"
                                "    memoryGB: 5", sharing="mig", autoscaling="  engine: hpa")
    s = spec_from_text(text.replace("gpusPerNode: 8", "gpusPerNode: 4"), "s.yaml")
    big, small = build_all(s)
    assert big.values["autoscaling"]["maxReplicas"] == 6
    assert small.values["autoscaling"]["maxReplicas"] == 7
    assert any("could not fit the peak" in d for d in big.decisions)
    (entries,) = big.mig_parted["mig-configs"].values()
    assert sorted((len(e["devices"]) if isinstance(e["devices"], list) else 4,
                   e["mig-devices"]) for e in entries) == \
        [(1, {"1g.10gb": 7}), (3, {"3g.40gb": 2})]


def test_time_slicing_on_rtx_4090():
    v = build_values(load_spec(EXAMPLES / "rtx4090-time-slicing.yaml"))
    # vLLM would pre-allocate 90% of the GPU in every one of the 4 replicas sharing it;
    # each gets 0.9 / 4 = 0.225 -> 0.22 of the 24 GB (5.3 GB >= the 5 GB it needs)
    assert v.values["gpu"] == {"mode": "shared", "count": 1, "shared": {"memoryFraction": 0.22}}
    cfg = v.device_plugin_configs["ts-4"]                  # 24 GB // 5 GB = 4
    deviceplugin.validate_device_plugin_config(cfg, gpu="RTX-4090")
    ts = cfg["sharing"]["timeSlicing"]
    assert ts["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert ts["renameByDefault"] is True
    assert v.values["gpuProducts"] == ["NVIDIA-GeForce-RTX-4090-SHARED"]
    assert not v.values["autoscaling"]["metrics"][0]["name"].startswith("DCGM_")
    assert v.node_labels == {"rtx": {"nvidia.com/device-plugin.config": "ts-4",
                                     "nvidia.com/gpu.topology": "PCIe"}}


def test_tensor_parallel_from_a_topology_file():
    v = build_values(load_spec(EXAMPLES / "nvlink-tp8.yaml"))
    assert v.values["gpu"] == {"mode": "whole", "count": 8}
    assert v.values["topology"] == {"values": ["NV8"]}
    assert v.node_labels["hgx-h100"]["nvidia.com/gpu.topology"] == "NV8"
    assert v.values["server"]["image"] == {"repository": "vllm/vllm-openai", "tag": "v0.11.0",
                                           "digest": ""}
    assert v.values["autoscaling"]["minReplicas"] == 1
    assert v.values["autoscaling"]["maxReplicas"] == 2


def test_keda_example():
    v = build_values(load_spec(EXAMPLES / "keda.yaml"))
    a = v.values["autoscaling"]
    assert a["engine"] == "keda"
    assert a["keda"] == {"serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                         "fallback": {"replicas": 3}}       # minReplicas 3 (base 3 req/s)
    assert v.values["platform"]["prometheusAdapter"]["enabled"] is False


BASE = """\
apiVersion: gpuvalues/v1
kubernetesVersion: "{kube}"
cluster:
  nodePools:
    - name: pool
      gpu: {gpu}
      gpusPerNode: 8
      nodes: 1
      mig: {mig}
      topology: {{label: {label}}}
workloads:
  - name: w
    model: m
{workload}
sharing: {sharing}
autoscaling:
{autoscaling}
"""


def spec(gpu="A100-80GB", mig="false", label="NV8", workload="    gpus: 1",
         sharing="auto", autoscaling="  engine: hpa", kube="1.34.0"):
    return spec_from_text(BASE.format(gpu=gpu, mig=mig, label=label, workload=workload,
                                      sharing=sharing, autoscaling=autoscaling, kube=kube),
                          "s.yaml")


def test_auto_sharing_decisions():
    # a small model: MIG when the pool allows it, else time-slicing; a big one: whole GPUs
    assert build_values(spec(mig="true", workload="    memoryGB: 15")).values["gpu"]["mode"] \
        == "mig"
    assert build_values(spec(workload="    memoryGB: 15")).values["gpu"]["mode"] == "shared"
    big = build_values(spec(workload="    memoryGB: 150"))
    assert big.values["gpu"] == {"mode": "whole", "count": 2}     # ceil(150 / 80)


@pytest.mark.parametrize("kw, exc_type, where, words", [
    (dict(gpu="B9000"), CatalogError, "s.yaml:6:12:", "unknown GPU model 'B9000'"),
    (dict(sharing="mig", workload="    memoryGB: 10"), PlanError, "s.yaml:12:5:",
     "MIG is off for this pool"),
    (dict(sharing="dra", kube="1.33.0"), SpecError, "s.yaml:2:20:", "[GV009]"),
    (dict(workload="    gpus: 16"), PlanError, "s.yaml:12:5:", "needs 16 GPUs"),
    (dict(mig="true", sharing="mig", workload="    memoryGB: 10",
          autoscaling="  metric: DCGM_FI_DEV_GPU_UTIL"), CapacityError, "s.yaml:17:11:",
     "[GV003]"),
    (dict(gpu="A30", mig="true", sharing="{mode: mig, migProfile: 3g.40gb}",
          workload="    memoryGB: 10"), CatalogError, "s.yaml:15:34:", "[GV001]"),
    (dict(mig="true", sharing="{mode: mig, migStrategy: single}", workload="    memoryGB: 10"),
     SpecError, "s.yaml:15:35:", "migStrategy single is not planned"),
])
def test_impossible_specs_are_placed_errors(kw, exc_type, where, words):
    with pytest.raises(exc_type) as exc:
        build_values(spec(**kw))
    assert isinstance(exc.value, GpuValuesError)
    assert str(exc.value).startswith(where), str(exc.value)
    assert words in str(exc.value)


@pytest.mark.parametrize("kw, code", [
    (dict(gpu="RTX-4090", label="PCIe", sharing="{mode: time-slicing, replicasPerGpu: 8}",
          workload="    memoryGB: 6"), "GV007"),                 # 24 GB / 8 = 3 GB < 6 GB
    (dict(label="NV4", workload="    gpus: 8\n    tensorParallel: 8"), "GV006"),
    (dict(autoscaling="  maxReplicas: 9"), "GV005"),             # 8 GPUs in the pool
])
def test_semantic_rules_stop_the_build(kw, code):
    with pytest.raises(ValidationFailed) as exc:
        build_values(spec(**kw))
    assert [f.code for f in exc.value.findings] == [code]
    assert exc.value.findings[0].source == "s.yaml"


def test_several_workloads_need_a_name():
    s = load_spec(EXAMPLES / "mixed-a100-h100-mig.yaml")
    with pytest.raises(SpecError, match="3 workloads"):
        build_values(s)
    assert build_values(s, "llama-70b").workload == "llama-70b"


def test_spec_inventory_for_the_fit_check():
    from gpuvalues.fleet.builder import spec_inventory
    ts = build_values(load_spec(EXAMPLES / "rtx4090-time-slicing.yaml"))
    inv = spec_inventory(load_spec(EXAMPLES / "rtx4090-time-slicing.yaml"), ts)
    assert [n.name for n in inv.nodes] == ["rtx-001", "rtx-002", "rtx-003"]
    node = inv.nodes[0]
    assert node.allocatable == {"nvidia.com/gpu.shared": 8}        # 2 GPUs x 4 replicas
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-4090-SHARED"
    assert node.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    spec = load_spec(EXAMPLES / "mixed-a100-h100-mig.yaml")
    embed = build_all(spec)[0]
    inv = spec_inventory(spec, embed)
    a100 = [n for n in inv.nodes if n.name.startswith("a100-mig")]
    assert len(a100) == 2 and len([n for n in inv.nodes if n.name.startswith("h100")]) == 2
    total = sum(n.allocatable.get("nvidia.com/mig-1g.10gb", 0) for n in a100)
    expected = sum(e["mig-devices"].get("1g.10gb", 0) * len(e["devices"]) *
                   embed.node_groups[g][1]
                   for g, entries in embed.mig_parted["mig-configs"].items() for e in entries)
    assert total == expected > 0


def test_latency_slo_bounds_the_queue_wait():
    load = "    gpus: 1\n    throughputPerReplica: 1\n    load: {base: 1, peak: 2}\n"
    loose = build_values(spec(workload=load)).values["autoscaling"]
    tight = build_values(spec(workload=load + "    slo: {latencyMs: 10}\n")).values[
        "autoscaling"]
    # peak 2 req/s x 1.2 headroom at 1 req/s per replica; mean wait <= 1 s vs <= 10 ms
    assert loose["maxReplicas"] == replicas_oracle(2.4, 1) == 5
    assert tight["maxReplicas"] == replicas_oracle(2.4, 1, wait_max=Fraction(1, 100)) == 7


def test_vllm_queue_metric_gets_the_running_companion_when_the_slo_is_known():
    # examples/single-a100.yaml: 3 req/s per replica within a 2 s latency SLO. By Little's
    # law a replica at full rate holds 3 x 2 = 6 requests in flight, so the design target
    # for vllm:num_requests_running lies in [1, 6]; the HPA scales on the larger signal.
    v = build_values(load_spec(ROOT / "examples" / "single-a100.yaml"))
    metrics = v.values["autoscaling"]["metrics"]
    assert [m["name"] for m in metrics] == ["vllm:num_requests_waiting", "vllm:num_requests_running"]
    assert 1 <= float(metrics[1]["target"]) <= 6
    # without an SLO latency there is no basis for the running target: the queue alone
    builtin = build_values(load_spec(BUILTIN)).values["autoscaling"]["metrics"]
    assert [m["name"] for m in builtin] == ["vllm:num_requests_waiting"]

