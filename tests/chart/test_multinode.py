"""The chart's multi-node replicas (issue 26): multiNode.nodes > 1 renders a LeaderWorkerSet
(leaderworkerset.x-k8s.io/v1) instead of the Deployment, validated against the upstream CRD
schema (tests/chart/data/crds/leaderworkerset-v1.yaml, from the sigs.k8s.io/lws v0.9.0
module the e2e runs) and every other object against Kubernetes' own schemas."""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

import pytest

from gpuvalues.checks.rules import semantic_findings
from tests.chart.chartlib import HELMS, by_kind, crd_errors, k8s_errors, parse, template

ROOT = Path(__file__).resolve().parents[2]
ROLE = "gpu-inference.io/role"
SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"


@lru_cache(maxsize=None)
def example_values() -> str:
    """The 405B example's workload release values, as `gpuvalues values` writes them."""
    from gpuvalues import build_fleet
    from gpuvalues.checks.spec import load_spec

    fleet = build_fleet(load_spec(ROOT / "examples" / "multi-node-405b.yaml"))
    return json.dumps(fleet.release("llama-405b").values)


def values(**over) -> dict:
    v = json.loads(example_values())
    for k, x in over.items():
        v[k] = {**v.get(k, {}), **x} if isinstance(x, dict) else x
    return v


@lru_cache(maxsize=None)
def _rendered(helm: str, key: str) -> str:
    proc = template(HELMS[helm], values=json.loads(key))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def objs(helm: str = "helm", **over) -> list[dict]:
    return parse(_rendered(helm, json.dumps(values(**over), sort_keys=True)))


def templates(objects) -> tuple[dict, dict]:
    (lws,) = by_kind(objects, "LeaderWorkerSet")
    t = lws["spec"]["leaderWorkerTemplate"]
    return t["leaderTemplate"], t["workerTemplate"]


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_a_leaderworkerset_instead_of_the_deployment_valid_for_its_crd_and_kubernetes(helm):
    o = objs(helm)
    assert by_kind(o, "Deployment") == []
    (lws,) = by_kind(o, "LeaderWorkerSet")
    assert crd_errors(lws) == []
    assert k8s_errors(o, "1.34") == []
    spec = lws["spec"]
    assert "replicas" not in spec                 # the HPA owns it (scale subresource)
    assert spec["leaderWorkerTemplate"]["size"] == 2
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] == \
        "gpu-inference.io/rack"


def test_crd_check_can_fail():
    """Negative control: the CRD schema refuses what the LWS API server would."""
    (lws,) = by_kind(objs(), "LeaderWorkerSet")
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["size"] = "two"
    assert crd_errors(bad)
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    assert crd_errors(bad)
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["groupSize"] = 2
    assert crd_errors(bad)


def test_leader_runs_the_ray_head_and_vllm_workers_join_it():
    from tests.chart.test_serving import VLLM_FLAGS

    leader, worker = templates(objs())
    assert leader["metadata"]["labels"][ROLE] == "leader"
    assert worker["metadata"]["labels"][ROLE] == "worker"
    (lc,) = leader["spec"]["containers"]
    (wc,) = worker["spec"]["containers"]
    # the scripts are constant text: values reach vLLM as "$@" (args), never the script
    assert lc["command"] == ["sh", "-c", f'bash {SCRIPT} leader --ray_cluster_size="$LWS_GROUP_SIZE" '
                             '--ray_port=6379 && exec python3 -m vllm.entrypoints.openai.api_server "$@"',
                             "vllm-leader"]
    assert wc["command"] == ["sh", "-c", f'exec bash {SCRIPT} worker --ray_address="$LWS_LEADER_ADDRESS" '
                             "--ray_port=6379"]
    assert {"--tensor-parallel-size=8", "--pipeline-parallel-size=2",
            "--distributed-executor-backend=ray"} <= set(lc["args"])
    assert {a.split("=", 1)[0] for a in lc["args"] if a.startswith("--")} <= VLLM_FLAGS
    assert "args" not in wc and "ports" not in wc and "startupProbe" not in wc
    assert "ray status" in wc["readinessProbe"]["exec"]["command"][2]
    assert lc["startupProbe"]["httpGet"]["path"] and lc["readinessProbe"]["httpGet"]
    for c in (lc, wc):
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_service_and_autoscalers_see_the_leaders_and_the_scale_subresource():
    o = objs()
    (svc,) = by_kind(o, "Service")
    assert svc["spec"]["selector"][ROLE] == "leader"
    (hpa,) = by_kind(o, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                             "kind": "LeaderWorkerSet", "name": svc["metadata"]["name"]}
    keda = objs(autoscaling={"engine": "keda"})
    (so,) = by_kind(keda, "ScaledObject")
    assert so["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    assert crd_errors(so) == []
    gw = objs(gateway={"enabled": True, "parentRefs": [{"name": "gw"}]})
    (pool,) = by_kind(gw, "InferencePool")
    assert pool["spec"]["selector"]["matchLabels"][ROLE] == "leader"
    # the PDB keeps every pod of the set: one eviction takes a group down, then nothing more
    (pdb,) = by_kind(o, "PodDisruptionBudget")
    assert ROLE not in pdb["spec"]["selector"]["matchLabels"] and pdb["spec"]["maxUnavailable"] == 1


def test_one_node_keeps_the_deployment_and_no_domain_no_annotation():
    o = objs(multiNode={"nodes": 1})
    assert by_kind(o, "LeaderWorkerSet") == [] and len(by_kind(o, "Deployment")) == 1
    (svc,) = by_kind(o, "Service")
    assert ROLE not in svc["spec"]["selector"]
    (lws,) = by_kind(objs(multiNode={"topologyKey": ""}), "LeaderWorkerSet")
    assert "annotations" not in lws["metadata"]


@pytest.mark.parametrize("over", [
    {"gpu": {"mode": "mig", "mig": {"profile": "1g.10gb"}}},
    {"server": {"type": "triton"}, "model": {"source": "pvc", "pvc": {"claimName": "repo"}}},
    {"autoscaling": {"engine": "keda", "minReplicas": 0, "keda": {"activationQuery": "sum(q)"}}},
])
def test_the_chart_and_validate_refuse_groups_they_cannot_run(over):
    v = values(**over)
    proc = template(HELMS["helm"], values=v)
    assert proc.returncode != 0 and "multiNode" in proc.stderr, proc.stderr[-300:]
    assert "GV064" in {f.code for f in semantic_findings(v)}
    assert "GV064" not in {f.code for f in semantic_findings(values())}      # the control

