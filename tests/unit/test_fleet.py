"""The fleet: one computation of placements, the node side and every release, with every
finding placed at the spec line that causes it."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest

import gpuvalues
from gpuvalues.yamlio.loader import Loaded, load_yaml
from gpuvalues.checks.fleet import build_checked, check_fleet, served_metric_names
from gpuvalues.checks.rules import check_values
from gpuvalues.checks.spec import load_spec, spec_from_text
from gpuvalues.errors import ValidationFailed, errors_only
from gpuvalues.fleet import build_fleet, expected_nodes
from gpuvalues.planners import deviceplugin
from gpuvalues.planners.mig import geometry as mig
from gpuvalues.planners.mig import migparted
from tests.conftest import ROOT
from tests.unit.oracles import replicas_oracle

EXAMPLES = ROOT / "examples"
BUILTIN = ROOT / "gpuvalues" / "data" / "examples" / "a100-small.yaml"


def fleet_of(path):
    return build_checked(load_spec(path))


def test_public_api():
    assert gpuvalues.build_fleet is build_fleet
    assert gpuvalues.check_fleet is check_fleet
    assert gpuvalues.load_spec is load_spec
    assert "build_fleet" in gpuvalues.__all__ and "load_spec" in dir(gpuvalues)
    with pytest.raises(AttributeError):
        gpuvalues.no_such_name  # noqa: B018


def test_builtin_example_whole_gpus():
    fleet = fleet_of(BUILTIN)
    assert [r.name for r in fleet.releases] == ["gpu-platform", "qwen"]
    v = fleet.release("qwen").values
    assert v["gpu"] == {"mode": "whole", "count": 1}
    assert v["server"] == {"type": "vllm"}
    a = v["autoscaling"]
    # base 4 req/s, peak 20 req/s x 1.2 headroom, 4 req/s per replica
    assert a["minReplicas"] == max(2, replicas_oracle(4, 4)) == 3
    assert a["maxReplicas"] == replicas_oracle(24, 4)
    assert a["metrics"][0]["name"] == "vllm:num_requests_waiting"
    assert "NVIDIA-A100-SXM4-80GB" in v["gpuProducts"]
    # the workload's release installs no platform part; the platform release does
    assert not any(p.get("enabled") for k, p in v["platform"].items()
                   if isinstance(p, dict) and k != "alerts")
    assert v["platform"]["alerts"] == {"enabled": True, "gpuRules": False}
    pv = fleet.platform.values
    assert pv["workload"] == {"enabled": False}
    assert pv["platform"]["devicePlugin"]["enabled"] is True
    assert pv["platform"]["prometheusAdapter"]["metrics"] == [{"name": "vllm:num_requests_waiting"}]
    assert fleet.layout.mig_parted is None
    for r in fleet.releases:     # what the fleet returns passes the chart's own schema
        assert errors_only(check_values(Loaded(dict(r.values), "v", "", {}, {}, ()))) == []


def test_max_replicas_capped_by_the_pool_with_a_warning():
    fleet = fleet_of(EXAMPLES / "single-a100.yaml")
    assert replicas_oracle(7.2, 3) > 4                   # the model alone would want more
    r = fleet.release("llama-8b")
    assert r.values["autoscaling"]["maxReplicas"] == 4   # 1 node x 4 GPUs
    assert any("capped at 4" in d for d in r.decisions)
    (w,) = [f for f in fleet.findings if f.code == "GV015"]
    assert w.severity == "warning" and "wants 5 replicas, gets 4" in w.message


def _instances(fleet, pool):
    """Instances per profile and GPUs with MIG on, over the pool's node groups."""
    counts: dict = {}
    gpus = 0
    for g in fleet.layout.groups_of(pool):
        for devs in g.mig_devices or ():
            if devs:
                mig.place("A100-80GB", devs)             # every GPU's layout is placeable
                gpus += g.nodes
            for p, n in (devs or {}).items():
                counts[p] = counts.get(p, 0) + n * g.nodes
    return counts, gpus


def test_mixed_fleet_one_profile_per_workload_and_every_metric_served():
    fleet = fleet_of(EXAMPLES / "mixed-a100-h100-mig.yaml")
    embed, mistral, llama = (fleet.release(n).values for n in
                             ("embed-small", "mistral-7b", "llama-70b"))
    # smallest A100 80GB profiles with the usable memory for 4 GB and 30 GB (+5% headroom)
    assert embed["gpu"] == {"mode": "mig", "count": 1,
                            "mig": {"strategy": "mixed", "profile": "1g.10gb"}}
    assert mistral["gpu"]["mig"]["profile"] == "3g.40gb"
    assert llama["gpu"] == {"mode": "whole", "count": 2}
    assert llama["topology"] == {"values": ["NV8"]}
    cfg = fleet.layout.mig_parted
    migparted.validate_mig_parted_config(cfg, gpu="A100-80GB")
    instances, gpus_used = _instances(fleet, "a100-mig")
    # Peak demand (M/M/c oracle, 20% headroom) and the fewest A100s that can hold it:
    # a GPU has 7 compute and 8 memory slices, and holds at most 2 x 3g.40gb.
    small, medium = replicas_oracle(240, 50), replicas_oracle(19.2, 4)
    assert instances == {"1g.10gb": instances["1g.10gb"], "3g.40gb": instances["3g.40gb"]}
    assert instances["1g.10gb"] >= small and instances["3g.40gb"] >= medium
    assert gpus_used == max(math.ceil((small + 3 * medium) / 7),
                            math.ceil((small + 4 * medium) / 8), math.ceil(medium / 2))
    assert embed["autoscaling"]["maxReplicas"] == small
    assert mistral["autoscaling"]["maxReplicas"] == medium
    # the GPUs the MIG layout leaves free are usable whole GPUs, never `mig-devices: {}`
    for entries in cfg["mig-configs"].values():
        for e in entries:
            assert e["mig-enabled"] is False or e["mig-devices"]
    spare = [g for g in fleet.layout.groups_of("a100-mig") if g.name == "a100-mig-whole"]
    assert spare and spare[0].mig_devices == (None,) * 8
    # one platform release; its one adapter serves every HPA metric of every workload
    served = served_metric_names(fleet.platform)
    for name in ("embed-small", "mistral-7b", "llama-70b"):
        for m in fleet.release(name).values["autoscaling"]["metrics"]:
            assert m["name"].replace(":", "_") in served
    assert {m["name"] for m in fleet.platform.values["platform"]["prometheusAdapter"]["metrics"]} \
        == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "vllm:num_requests_waiting"}
    dp_map = fleet.platform.values["platform"]["devicePlugin"]["config"]["map"]
    assert dp_map["a100-mig"]["flags"]["migStrategy"] == "mixed"
    # the tensor-parallel replicas have whole nodes of their own
    (h100,) = fleet.layout.groups_of("h100")
    assert h100.workloads == ("llama-70b",) and h100.mig_devices is None


def test_explicit_max_replicas_beyond_the_pool_is_one_error():
    s = spec(mig="true", sharing="mig", workload="    memoryGB: 30",
             autoscaling="  maxReplicas: 16")               # 8 GPUs x 2 x 3g.40gb = 16
    assert build_checked(s).release("w").values["autoscaling"]["maxReplicas"] == 16
    with pytest.raises(ValidationFailed) as exc:           # 17 > 16 instances: GV005 alone
        build_checked(spec(mig="true", sharing="mig", workload="    memoryGB: 30",
                           autoscaling="  maxReplicas: 17"))
    assert [f.code for f in exc.value.findings] == ["GV005"]


def test_mig_falls_back_to_a_proportional_split_when_the_peak_does_not_fit():
    # 1 node x 4 A100 80GB; default peak demand 10 replicas each: 3g.40gb needs 5 GPUs,
    # 1g.10gb needs 2 -> 7 > 4. Split (hand-computed): 3 GPUs x 2 x 3g.40gb = 6 instances,
    # 1 GPU x 7 x 1g.10gb = 7 instances; maxReplicas is capped to those.
    text = BASE.format(gpu="A100-80GB", mig="true", label="NV8", kube="1.34.0",
                       workload="    memoryGB: 30\n  - name: small\n    model: m2\n"
                                "    memoryGB: 5", sharing="mig", autoscaling="  engine: hpa")
    fleet = build_checked(spec_from_text(text.replace("gpusPerNode: 8", "gpusPerNode: 4"), "s.yaml"))
    assert fleet.release("w").values["autoscaling"]["maxReplicas"] == 6
    assert fleet.release("small").values["autoscaling"]["maxReplicas"] == 7
    assert any("could not fit the peak" in d for d in fleet.release("w").decisions)
    (entries,) = fleet.layout.mig_parted["mig-configs"].values()
    assert sorted((len(e["devices"]) if isinstance(e["devices"], list) else 4,
                   e["mig-devices"]) for e in entries) == \
        [(1, {"1g.10gb": 7}), (3, {"3g.40gb": 2})]
    assert [f.code for f in fleet.findings if f.code == "GV015"] == ["GV015"]   # a warning


def test_time_slicing_on_rtx_4090_is_renamed_and_keeps_the_product_label():
    fleet = fleet_of(EXAMPLES / "rtx4090-time-slicing.yaml")
    v = fleet.release("phi-mini").values
    # 22.32 GiB usable / (5 GB = 4.66 GiB + 5%) = 4 replicas; vLLM gets 0.9 / 4 -> 0.22
    assert v["gpu"] == {"mode": "shared", "count": 1,
                        "shared": {"resourceName": "nvidia.com/gpu.shared", "memoryFraction": 0.22}}
    cfg = fleet.layout.device_plugin_configs["ts-4"]
    deviceplugin.validate_device_plugin_config(cfg, gpu="RTX-4090")
    ts = cfg["sharing"]["timeSlicing"]
    assert ts["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert ts["renameByDefault"] is True
    # renamed: GFD appends no -SHARED (k8s-device-plugin internal/lm/resource.go)
    assert v["gpuProducts"] == ["NVIDIA-GeForce-RTX-4090"]
    assert not v["autoscaling"]["metrics"][0]["name"].startswith("DCGM_")
    (g,) = fleet.layout.node_groups
    assert (g.name, g.nodes, dict(g.labels)) == ("rtx", 3, {"nvidia.com/device-plugin.config": "ts-4",
                                                           "nvidia.com/gpu.topology": "PCIe"})


def test_tensor_parallel_from_a_topology_file():
    fleet = fleet_of(EXAMPLES / "nvlink-tp8.yaml")
    v = fleet.release("llama-405b-fp8").values
    assert v["gpu"] == {"mode": "whole", "count": 8}
    assert v["topology"] == {"values": ["NV8"]}
    (g,) = fleet.layout.node_groups
    assert g.labels["nvidia.com/gpu.topology"] == "NV8"
    assert v["server"]["image"] == {"repository": "vllm/vllm-openai", "tag": "v0.11.0", "digest": ""}
    assert v["autoscaling"]["minReplicas"] == 1
    assert v["autoscaling"]["maxReplicas"] == 2


def test_keda_example():
    fleet = fleet_of(EXAMPLES / "keda.yaml")
    (r,) = fleet.workloads
    a = r.values["autoscaling"]
    assert a["engine"] == "keda"
    assert a["keda"] == {"serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                         "fallback": {"replicas": 3}}       # minReplicas 3 (base 3 req/s)
    assert fleet.platform.values["platform"]["prometheusAdapter"]["enabled"] is False


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
    def mode(s):
        return build_checked(s).release("w").values["gpu"]
    assert mode(spec(mig="true", workload="    memoryGB: 15"))["mode"] == "mig"
    assert mode(spec(workload="    memoryGB: 15"))["mode"] == "shared"
    assert mode(spec(workload="    memoryGB: 150")) == {"mode": "whole", "count": 2}  # 150 GB > 80 GiB


def test_memory_is_fitted_in_usable_gib_not_the_profile_name():
    # H200 1g.18gb reports 16.00 GiB (nvidia-smi mig -lgip); 17.5 GB = 16.30 GiB does not fit
    s = spec(gpu="H200-141GB", mig="true", sharing="mig", workload="    memoryGB: 17.5")
    fleet = build_checked(s)
    assert fleet.release("w").values["gpu"]["mig"]["profile"] != "1g.18gb"
    fleet = build_checked(spec(gpu="H200-141GB", mig="true", sharing="mig",
                               workload="    memoryGiB: 15"))          # 15 GiB + 5% fits
    assert fleet.release("w").values["gpu"]["mig"]["profile"] == "1g.18gb"


@pytest.mark.parametrize("kw, code, where, words", [
    (dict(gpu="B9000"), "GV100", "s.yaml:6:12:", "unknown GPU model 'B9000'"),
    (dict(sharing="mig", workload="    memoryGB: 10"), "GV014", "s.yaml:12:5:",
     "MIG is off for this pool"),
    (dict(sharing="dra", kube="1.33.0"), "GV009", "s.yaml:2:20:", "needs Kubernetes >= 1.34"),
    (dict(workload="    gpus: 16"), "GV012", "s.yaml:12:5:", "needs 16 GPUs"),
    (dict(mig="true", sharing="mig", workload="    memoryGB: 10",
          autoscaling="  metric: DCGM_FI_DEV_GPU_UTIL"), "GV003", "s.yaml:17:11:",
     "DCGM_FI_DEV_GPU_UTIL"),
    (dict(gpu="A30", mig="true", sharing="{mode: mig, migProfile: 3g.40gb}",
          workload="    memoryGB: 10"), "GV001", "s.yaml:15:34:", "3g.40gb"),
    (dict(mig="true", sharing="{mode: mig, migStrategy: single}", workload="    memoryGB: 10"),
     "GV100", "s.yaml:15:35:", "migStrategy single is not planned"),
])
def test_impossible_specs_are_placed_findings(kw, code, where, words):
    with pytest.raises(ValidationFailed) as exc:
        build_checked(spec(**kw))
    (f,) = exc.value.findings
    assert (f.code, str(f).split(" ")[0]) == (code, where), str(f)
    assert words in f.message


@pytest.mark.parametrize("kw, code", [
    (dict(gpu="RTX-4090", label="PCIe", sharing="{mode: time-slicing, replicasPerGpu: 8}",
          workload="    memoryGB: 6"), "GV007"),                 # 24 GB / 8 = 3 GB < 6 GB
    (dict(label="NV4", workload="    gpus: 8\n    tensorParallel: 8"), "GV006"),
    (dict(autoscaling="  maxReplicas: 9"), "GV005"),             # 8 GPUs in the pool
])
def test_semantic_rules_stop_the_build(kw, code):
    with pytest.raises(ValidationFailed) as exc:
        build_checked(spec(**kw))
    assert [f.code for f in exc.value.findings] == [code]
    assert exc.value.findings[0].source == "s.yaml"


FLEET = """\
apiVersion: gpuvalues/v1
cluster:
  nodePools:
    - {{name: h100, gpu: H100-80GB-SXM, gpusPerNode: 8, nodes: {h100}, mig: true, topology: {{label: NV8}}}}
    - {{name: l40s, gpu: L40S, gpusPerNode: 8, nodes: {l40s}}}
workloads:
  - {{name: tp2, model: big, gpus: 2, tensorParallel: 2, nodePool: h100, sharing: whole}}
  - {{name: small, model: s, memoryGB: 8, nodePool: h100, sharing: mig}}
  - {{name: a, model: a, gpus: 6, nodePool: l40s, sharing: whole}}
  - {{name: b, model: b, gpus: 4, nodePool: l40s, sharing: whole}}
autoscaling: {{engine: hpa, maxReplicas: 2}}
"""


def test_a_fleet_that_cannot_hold_its_tp_and_mig_replicas_fails_with_one_finding_per_cause():
    # h100: 2 x TP2 replicas take 4 GPUs of the one node, the MIG model the rest of it;
    # l40s: 2 x 6 GPUs and 2 x 4 GPUs per replica on 2 nodes of 8: each fits alone, not
    # together.
    fleet = check_fleet(build_fleet(spec_from_text(FLEET.format(h100=1, l40s=2), "f.yaml")))
    shortages = [f for f in fleet.errors if f.code == "GV015"]
    assert [(f.path, f.line) for f in shortages] == [("cluster.nodePools[1]", 5)]
    assert "b wants 2 replicas, gets 0" in shortages[0].message
    assert [f.code for f in fleet.errors] == ["GV015"]
    (g,) = fleet.layout.groups_of("h100")
    assert set(g.workloads) == {"tp2", "small"} and g.mig_devices.count(None) >= 4
    # with room, the same fleet is clean: TP replicas on MIG-disabled GPUs, MIG on the rest
    ok = build_checked(spec_from_text(FLEET.format(h100=2, l40s=3), "f.yaml"))
    groups = ok.layout.groups_of("h100")
    assert sum(g.nodes for g in groups) == 2
    assert [g for g in groups if "tp2" in g.workloads and g.mig_devices.count(None) >= 4]


def test_an_hpa_metric_nothing_serves_is_an_error():
    text = (EXAMPLES / "single-a100.yaml").read_text().replace("prometheusAdapter: true", "prometheusAdapter: false")
    fleet = check_fleet(build_fleet(spec_from_text(text, "s.yaml")))
    (f,) = [f for f in fleet.errors if f.code == "GV016"]
    assert "vllm:num_requests_waiting" in f.message and "would get no data" in f.message


def test_release_names_and_namespaces():
    text = (EXAMPLES / "single-a100.yaml").read_text().replace(
        "  - name: llama-8b\n", "  - name: llama-8b\n    namespace: team-a\n")
    fleet = build_checked(spec_from_text(text, "s.yaml"))
    assert [(r.name, r.namespace) for r in fleet.releases] == [("gpu-platform", "gpu-platform"),
                                                               ("llama-8b", "team-a")]
    clash = (EXAMPLES / "single-a100.yaml").read_text().replace("name: llama-8b", "name: gpu-platform")
    with pytest.raises(ValidationFailed) as exc:
        build_checked(spec_from_text(clash, "s.yaml"))
    assert [f.code for f in exc.value.findings] == ["GV018"]


def test_expected_nodes_for_the_fit_check():
    fleet = fleet_of(EXAMPLES / "rtx4090-time-slicing.yaml")
    inv = expected_nodes(fleet)
    assert [n.name for n in inv.nodes] == ["rtx-001", "rtx-002", "rtx-003"]
    node = inv.nodes[0]
    assert node.allocatable == {"nvidia.com/gpu.shared": 8}        # 2 GPUs x 4 replicas
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-4090"
    assert node.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    fleet = fleet_of(EXAMPLES / "mixed-a100-h100-mig.yaml")
    inv = expected_nodes(fleet)
    a100 = [n for n in inv.nodes if n.name.startswith("a100-mig")]
    assert len(a100) == 2 and len([n for n in inv.nodes if n.name.startswith("h100")]) == 2
    total = sum(n.allocatable.get("nvidia.com/mig-1g.10gb", 0) for n in a100)
    assert total == _instances(fleet, "a100-mig")[0]["1g.10gb"] > 0
    whole = [n for n in a100 if n.name.startswith("a100-mig-whole")]
    assert whole[0].allocatable == {"nvidia.com/gpu": 8}


def test_expected_nodes_label_mps_capable_as_gfd_does():
    # k8s-device-plugin internal/lm/nvml.go newSharingLabeler: "true" only under an MPS
    # config; the chart's MPS control daemon DaemonSet selects nvidia.com/mps.capable=true,
    # so without it the daemon never runs (found by tests/e2e/test_fleet.py)
    mps = expected_nodes(fleet_of(EXAMPLES / "mps-two-models.yaml"))
    assert {n.labels["nvidia.com/mps.capable"] for n in mps.nodes} == {"true"}
    assert {n.labels["nvidia.com/gpu.sharing-strategy"] for n in mps.nodes} == {"mps"}
    for other in ("time-slicing-renamed-and-not.yaml", "mixed-a100-h100-mig.yaml"):
        inv = expected_nodes(fleet_of(EXAMPLES / other))
        assert {n.labels["nvidia.com/mps.capable"] for n in inv.nodes} == {"false"}, other


def test_latency_slo_bounds_the_queue_wait():
    load = "    gpus: 1\n    throughputPerReplica: 1\n    load: {base: 1, peak: 2}\n"
    loose = build_checked(spec(workload=load)).release("w").values["autoscaling"]
    tight = build_checked(spec(workload=load + "    slo: {latencyMs: 10}\n")).release("w").values[
        "autoscaling"]
    # peak 2 req/s x 1.2 headroom at 1 req/s per replica; mean wait <= 1 s vs <= 10 ms
    assert loose["maxReplicas"] == replicas_oracle(2.4, 1) == 5
    assert tight["maxReplicas"] == replicas_oracle(2.4, 1, wait_max=Fraction(1, 100)) == 7


def test_vllm_queue_metric_gets_the_running_companion_when_the_slo_is_known():
    # examples/single-a100.yaml: 3 req/s per replica within a 2 s latency SLO. By Little's
    # law a replica at full rate holds 3 x 2 = 6 requests in flight, so the design target
    # for vllm:num_requests_running lies in [1, 6]; the HPA scales on the larger signal.
    metrics = fleet_of(EXAMPLES / "single-a100.yaml").release("llama-8b").values[
        "autoscaling"]["metrics"]
    assert [m["name"] for m in metrics] == ["vllm:num_requests_waiting", "vllm:num_requests_running"]
    assert 1 <= float(metrics[1]["target"]) <= 6
    # without an SLO latency there is no basis for the running target: the queue alone
    builtin = fleet_of(BUILTIN).release("qwen").values["autoscaling"]["metrics"]
    assert [m["name"] for m in builtin] == ["vllm:num_requests_waiting"]


def test_serving_features_from_the_spec():
    """gateway, scaleToZero, LoRA adapters and model sources become the chart's values."""
    fleet = fleet_of(EXAMPLES / "serving-fleet.yaml")
    lora, image, rare = (fleet.release(n).values for n in
                         ("llama-8b-lora", "qwen-7b-image", "mistral-rare"))
    assert lora["lora"] == {"adapters": [{"name": "sql", "source": "org/llama-3.1-8b-sql-lora"},
                                         {"name": "support", "source": "org/llama-3.1-8b-support-lora"}]}
    assert lora["model"]["pvc"] == {"create": True, "storageClassName": "shared-rwx"}
    assert lora["model"]["sizeGB"] == 16
    assert image["model"]["source"] == "image"
    assert rare["model"]["streamer"] == {"uri": "s3://models/mistral-7b-instruct-v0.3",
                                         "secretName": "s3-models"}
    for v in (lora, image, rare):
        assert v["gateway"] == {"enabled": True, "parentRefs": [
            {"name": "inference-gateway", "namespace": "gateway-system"}]}
    assert rare["autoscaling"]["minReplicas"] == 0 and rare["serviceMonitor"] == {"enabled": True}
    assert rare["autoscaling"]["keda"]["activationThreshold"] == "0"
    assert lora["autoscaling"]["minReplicas"] >= 1


@pytest.mark.parametrize("edit, words", [
    (("gateway: {name: inference-gateway, namespace: gateway-system}\n", ""), "needs the inference gateway"),
    (("engine: keda", "engine: hpa"), "needs autoscaling.engine keda"),
    (('kubernetesVersion: "1.35.0"', 'kubernetesVersion: "1.32.0"'), "modelSource image needs Kubernetes >= 1.33"),
])
def test_serving_features_that_cannot_work_are_placed_errors(edit, words):
    text = (EXAMPLES / "serving-fleet.yaml").read_text().replace(*edit)
    if "engine: hpa" in text:
        text = text.replace("platform:\n  prometheusAdapter: false\n", "")
    with pytest.raises(ValidationFailed) as exc:
        build_checked(spec_from_text(text, "s.yaml"))
    assert any(words in f.message for f in exc.value.findings), exc.value.findings
    assert all(f.source == "s.yaml" and f.line for f in exc.value.findings)


DRA_AND_PLUGIN = """apiVersion: gpuvalues/v1
kubernetesVersion: "1.34.0"
cluster:
  nodePools:
    - {{name: dra, gpu: H100-80GB-SXM, gpusPerNode: 8, nodes: 2, topology: {{label: NV8}}}}
    - {{name: plugin, gpu: L4, gpusPerNode: 4, nodes: 2}}
workloads:
  - {{name: big, model: org/big, nodePool: dra, gpus: 2, sharing: dra, throughputPerReplica: 2, load: {{base: 1, peak: 4}}}}
  - {{name: small, model: org/small, nodePool: {small_pool}, gpus: 1, sharing: whole, throughputPerReplica: 2, load: {{base: 1, peak: 4}}}}
autoscaling: {{engine: hpa, metric: choose}}
"""


def test_dra_pools_opt_out_of_the_device_plugin():
    """NVIDIA's DRA driver and device plugin must not run on one node (both advertise the
    same GPUs): a DRA pool's nodes carry the GPU Operator's opt-out label, which the chart's
    device plugin DaemonSet honours, and offer no extended resources; other pools keep it."""
    fleet = build_checked(spec_from_text(DRA_AND_PLUGIN.format(small_pool="plugin"), "s.yaml"))
    labels = {g.pool: dict(g.labels) for g in fleet.layout.node_groups}
    assert labels["dra"].get(deviceplugin.DEPLOY_LABEL) == "false"
    assert deviceplugin.DEPLOY_LABEL not in labels["plugin"]
    assert fleet.platform.values["platform"]["devicePlugin"]["enabled"] is True
    nodes = expected_nodes(fleet).nodes
    assert {n.name: {k: v for k, v in n.allocatable.items() if k.startswith("nvidia.com/")}
            for n in nodes} == {"dra-001": {}, "dra-002": {}, "plugin-001": {"nvidia.com/gpu": 4},
                                "plugin-002": {"nvidia.com/gpu": 4}}
    # the label the chart's device plugin DaemonSet honours by default is this one
    chart = load_yaml(ROOT / "charts" / "gpu-inference" / "values.yaml").data
    assert chart["platform"]["devicePlugin"]["nodeOptOutLabel"] == deviceplugin.DEPLOY_LABEL
    only_dra = fleet_of(EXAMPLES / "dra-fleet.yaml")
    assert only_dra.platform.values["platform"]["devicePlugin"]["enabled"] is False


def test_dra_and_device_plugin_workloads_in_one_pool_is_a_placed_error():
    with pytest.raises(ValidationFailed) as exc:
        build_checked(spec_from_text(DRA_AND_PLUGIN.format(small_pool="dra"), "s.yaml"))
    (f,) = exc.value.findings
    assert f.code == "GV015" and str(f).startswith("s.yaml:5:7:"), str(f)
    assert "must not run on one node" in f.message and "big" in f.message and "small" in f.message
