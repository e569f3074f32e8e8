"""Property: any spec either becomes values that the real helm renders and
kubernetes-validate accepts, or fails with a GpuValuesError whose message is one clear
line; never any other exception.

2,000 generated specs (derandomized, so CI is reproducible). Most of them stop in-process
(YAML reading, spec schema, planners, the chart's values schema, semantic rules): that
is where almost every defect is caught, and it is cheap. Helm cannot render many values
files in one process, so only a bounded sample goes through `helm template` plus
kubernetes-validate: the successful builds whose spec text hashes into a fixed 1-in-
RENDER_EVERY bucket (about 50 renders), plus the first fleet of each (gpu mode, engine)
shape not seen yet (the choice depends on the spec and the order hypothesis derandomized
gives, so a failure replays).
"""
from __future__ import annotations

import collections
import hashlib
import re
import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvalues import catalog
from gpuvalues.yamlio.loader import load_text
from gpuvalues.checks.fleet import build_checked
from gpuvalues.checks.spec import parse_spec
from gpuvalues.errors import GpuValuesError
from gpuvalues.render import helm

EXAMPLES = 2000
RENDER_EVERY = 16
RENDER_BUDGET = 80

GPUS = catalog.known_gpus() + ["NVIDIA GeForce RTX 4090", "NVIDIA-H100-80GB-HBM3", "Z100"]
PROFILES = ["1g.10gb", "3g.40gb", "1g.6gb", "2g.20gb", "7g.80gb", "1g.24gb"]
METRICS = ["choose", "choose", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
           "vllm:num_requests_waiting", "nv_inference_queue_duration_us"]
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                 st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                 st.lists(st.integers(), max_size=2), st.just({"x": 1}))
names = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=6).map(
    lambda s: "w" + s)


@st.composite
def pools(draw):
    pool = {"name": draw(st.sampled_from(["pa", "pb"])), "gpu": draw(st.sampled_from(GPUS)),
            "gpusPerNode": draw(st.sampled_from([1, 2, 4, 8])),
            "nodes": draw(st.integers(1, 6)), "mig": draw(st.booleans())}
    topo = draw(st.sampled_from([None, "NV8", "NV4", "NV2", "PCIe"]))
    if topo:
        pool["topology"] = {"label": topo}
    return pool


@st.composite
def workloads(draw, pool_names):
    w = {"name": draw(names), "model": "org/model",
         "server": draw(st.sampled_from(["vllm", "vllm", "triton", "custom"]))}
    if w["server"] == "custom" and draw(st.integers(0, 9)) < 9:  # mostly with its image
        w["image"] = "registry.example.com/team/server:1.2.3"
    if w["server"] == "triton" and draw(st.integers(0, 9)) < 9:  # mostly with its repository
        w["modelPvc"] = "model-repo"
    need = draw(st.sampled_from(["gpus", "memory", "both"]))
    if need in ("gpus", "both"):
        w["gpus"] = draw(st.sampled_from([1, 1, 2, 4, 8, 16]))
    if need in ("memory", "both"):
        w["memoryGB"] = draw(st.sampled_from([2, 5, 9.5, 20, 30, 45, 79, 150, 700]))
    if draw(st.booleans()):
        tps = [t for t in (1, 2, 4, 8) if t <= w.get("gpus", 8)]
        if draw(st.integers(0, 9)) == 9:
            tps = [1, 2, 4, 8]                    # sometimes more than gpus: an error
        w["tensorParallel"] = draw(st.sampled_from(tps))
    if draw(st.booleans()):
        w["throughputPerReplica"] = draw(st.sampled_from([0.5, 2, 10, 100]))
        peak = draw(st.sampled_from([1, 10, 100, 5000]))
        w["load"] = {"peak": peak, "base": draw(st.sampled_from([0, 1, peak]))}
    if draw(st.integers(0, 3)) == 3:
        w["nodePool"] = draw(st.sampled_from(pool_names * 4 + ["nope"]))
    if draw(st.integers(0, 3)) == 3:
        w["sharing"] = draw(sharing())
    return w


@st.composite
def sharing(draw):
    mode = draw(st.sampled_from(["auto", "whole", "mig", "time-slicing", "mps", "dra"]))
    if draw(st.booleans()):
        return mode
    out = {"mode": mode}
    if draw(st.booleans()):
        out["replicasPerGpu"] = draw(st.sampled_from([2, 3, 8, 48]))
    if mode == "mig" and draw(st.booleans()):
        out["migProfile"] = draw(st.sampled_from(PROFILES))
    return out


@st.composite
def specs(draw):
    ps = draw(st.lists(pools(), min_size=1, max_size=2, unique_by=lambda p: p["name"]))
    spec = {"apiVersion": "gpuvalues/v1",
            "kubernetesVersion": f"1.{draw(st.integers(29, 37))}.0",
            "cluster": {"nodePools": ps},
            "workloads": draw(st.lists(workloads([p["name"] for p in ps]), min_size=1,
                                       max_size=2, unique_by=lambda w: w["name"])),
            "sharing": draw(sharing())}
    auto = {"engine": draw(st.sampled_from(["hpa", "hpa", "keda", "none"])),
            "metric": draw(st.sampled_from(METRICS))}
    if draw(st.integers(0, 3)) == 3:
        auto["maxReplicas"] = draw(st.sampled_from([1, 3, 50]))
    if draw(st.integers(0, 3)) == 3:
        auto["minReplicas"] = draw(st.sampled_from([1, 2, 4]))
    spec["autoscaling"] = auto
    if draw(st.booleans()):
        spec["platform"] = {"gpuOperator": draw(st.booleans()),
                            "prometheusAdapter": draw(st.booleans())}
    # One in four specs gets a random leaf replaced by junk (wrong type, huge, null...).
    if draw(st.integers(0, 3)) == 3:
        _corrupt(spec, draw)
    return spec


def _corrupt(node, draw):
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        keys = keys[1:] + keys[:1]     # hypothesis favours the first: not apiVersion
        key = draw(st.sampled_from(keys))
        child = node[key]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            node = child
            continue
        node[key] = draw(JUNK)
        return


class Tally:
    cases = 0
    built = 0
    failed = 0
    rendered = 0
    shapes: set = set()          # (gpu mode, engine) pairs that went through helm
    errors: collections.Counter = collections.Counter()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(spec=specs(), style=st.sampled_from(["block", "flow"]))
def _one_spec(spec, style, helm4):
    Tally.cases += 1
    text = yaml.safe_dump(spec, default_flow_style=(style == "flow"), sort_keys=False)
    try:
        loaded = load_text(text, "gen.yaml")
        parsed = parse_spec(loaded)
        built = build_checked(parsed).releases
    except GpuValuesError as exc:
        Tally.failed += 1
        message = str(exc)
        Tally.errors[re.sub(r"\d+", "N", message.split(": ", 1)[-1])[:70]] += 1
        assert message.strip() and "\n" not in message, message
        assert "Traceback" not in message
        if exc.source == "gen.yaml" and exc.line is not None:
            assert message.startswith(f"gen.yaml:{exc.line}:")
        return
    Tally.built += 1
    shapes = {(b.values["gpu"]["mode"], b.values["autoscaling"]["engine"]) for b in built
              if not b.is_platform}
    # the hash bucket, plus the first fleet of each (gpu mode, engine) shape: MIG fleets
    # are rare among generated specs, and each shape must go through helm at least once
    if hashlib.sha256(text.encode()).digest()[0] % RENDER_EVERY and shapes <= Tally.shapes:
        return
    Tally.rendered += 1                 # one spec: its platform and workload releases
    for b in built:
        if not b.is_platform:
            Tally.shapes.add((b.values["gpu"]["mode"], b.values["autoscaling"]["engine"]))
        # RenderError here would be a builder bug: values passed every check, helm or
        # kubernetes-validate still refused them. It must not happen.
        helm.render_values(dict(b.values), helm=helm4, kube_version=parsed.kubernetes_version,
                           release=b.name, namespace=b.namespace)


def test_any_spec_gives_valid_manifests_or_a_clear_error(helm4):
    """The property over the generated specs, then: the run exercised successes, failures
    and the helm sample (one test, so it never depends on another test's state)."""
    _one_spec(helm4=helm4)
    print(f"property run: {Tally.cases} specs, {Tally.built} built, {Tally.failed} clear "
          f"errors, {Tally.rendered} rendered by helm, shapes {sorted(Tally.shapes)}")
    for message, n in Tally.errors.most_common(12):
        print(f"  {n:5d}  {message}")
    assert Tally.cases >= EXAMPLES
    assert Tally.built >= 200 and Tally.failed >= 200, vars(Tally)
    assert 25 <= Tally.rendered <= RENDER_BUDGET, vars(Tally)
    # the helm sample spans the GPU modes and autoscaling engines
    assert {"whole", "mig", "shared"} <= {m for m, _ in Tally.shapes}, Tally.shapes
    assert {"hpa", "keda", "none"} <= {e for _, e in Tally.shapes}, Tally.shapes
