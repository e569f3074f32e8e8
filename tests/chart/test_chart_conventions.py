"""Chart conventions (issue 15): server images are values (server.images.<type>, overridden
part by part by server.image), the usual escape hatches of helm create and the
prometheus-community charts work with -f and --set on both helms and render objects the
Kubernetes schemas accept, every `fail` lives in templates/validation.yaml, and the node
DaemonSets share one header helper."""
from __future__ import annotations

import re

import pytest
import yaml

from tests.chart.chartlib import by_kind, k8s_errors, render, template
from tests.conftest import CHART

DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
TEMPLATES = CHART / "templates"


def deployment(objs) -> dict:
    (dep,) = [o for o in by_kind(objs, "Deployment") if o["metadata"]["name"] == "gi-gpu-inference"]
    return dep


def pod_spec(objs) -> dict:
    return deployment(objs)["spec"]["template"]["spec"]


def server(objs) -> dict:
    (c,) = [c for c in pod_spec(objs)["containers"] if c["name"] == "server"]
    return c


# --- images ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stype, extra", [
    ("vllm", {}),
    ("triton", {"model.source": "pvc", "model.pvc.claimName": "repo"}),
])
def test_default_server_image_comes_from_values(helm, stype, extra):
    img = DEFAULTS["server"]["images"][stype]
    assert img["repository"] and img["tag"] and img["tag"] != "latest"
    c = server(render(helm, set_values={"server.type": stype, **extra}))
    assert c["image"] == f"{img['repository']}:{img['tag']}"


def test_per_type_image_and_override_part_by_part(helm):
    c = server(render(helm, set_values={"server.images.vllm.tag": "v0.12.1"}))
    assert c["image"] == "vllm/vllm-openai:v0.12.1"
    c = server(render(helm, set_values={"server.images.vllm.tag": "v0.12.1",
                                        "server.image.repository": "mirror.example.com/vllm"}))
    assert c["image"] == "mirror.example.com/vllm:v0.12.1"
    digest = "sha256:" + "b" * 64
    c = server(render(helm, set_values={"server.images.vllm.digest": digest}))
    assert c["image"] == f"vllm/vllm-openai:v0.33.0@{digest}"


def test_custom_server_image_from_server_images_custom(helm4):
    c = server(render(helm4, set_values={"server.type": "custom", "server.images.custom.repository": "ghcr.io/me/srv",
                                         "server.images.custom.tag": "1.2.3"}))
    assert c["image"] == "ghcr.io/me/srv:1.2.3"


@pytest.mark.parametrize("values, message", [
    ({"server.images.vllm.tag": "latest"}, "server.images.vllm.tag: latest is not allowed"),
    ({"server.type": "custom"}, "is required for server.type=custom"),
    ({"server.type": "custom", "server.images.custom.repository": "ghcr.io/me/srv"},
     "server.image.tag or server.image.digest (or server.images.custom.*) is required"),
])
def test_bad_images_are_refused_on_both_helms(helm, values, message):
    proc = template(helm, set_values=values)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_no_server_image_is_hard_coded_outside_values():
    """The pinned images appear once, in values.yaml (and the generated README table)."""
    pinned = [f"{i['repository']}:{i['tag']}" for i in DEFAULTS["server"]["images"].values() if i["repository"]]
    assert len(pinned) == 2
    for path in [*TEMPLATES.rglob("*"), CHART / "Chart.yaml"]:
        if path.is_file():
            text = path.read_text()
            for ref in pinned:
                repo, tag = ref.split(":")
                assert repo not in text and tag not in text, (path.name, ref)
    readme = (CHART / "README.md").read_text()
    table = readme.split("<!-- parameters:start -->")[1]
    outside = readme.replace(table, "")
    for ref in pinned:
        assert ref.split(":")[1] not in outside, ref


# --- escape hatches -------------------------------------------------------------------------

HATCHES = {
    "podLabels": {"team": "a", "cost-center": "ml"},
    "podAnnotations": {"example.com/owner": "ml-platform"},
    "extraEnv": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
                 {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    "extraEnvFrom": [{"configMapRef": {"name": "server-env"}}, {"secretRef": {"name": "server-secrets", "optional": True}}],
    "extraArgs": ["--max-model-len=8192"],
    "extraVolumes": [{"name": "chat-template", "configMap": {"name": "templates"}}],
    "extraVolumeMounts": [{"name": "chat-template", "mountPath": "/templates", "readOnly": True}],
    "initContainers": [{"name": "wait-for-store", "image": "busybox:1.36.1", "command": ["true"]}],
    "sidecars": [{"name": "log-shipper", "image": "fluent/fluent-bit:3.1.9",
                  "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}],
}


def test_every_escape_hatch_is_rendered_and_valid_kubernetes(helm):
    objs = render(helm, values=HATCHES)
    pod = deployment(objs)["spec"]["template"]
    c = server(objs)
    assert {"team": "a", "cost-center": "ml"}.items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["annotations"]["example.com/owner"] == "ml-platform"
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "server"
    assert c["args"][-1] == "--max-model-len=8192"
    assert c["env"][-2:] == HATCHES["extraEnv"]
    assert c["envFrom"] == HATCHES["extraEnvFrom"]
    assert c["volumeMounts"][-1] == HATCHES["extraVolumeMounts"][0]
    assert pod["spec"]["volumes"][-1] == HATCHES["extraVolumes"][0]
    assert pod["spec"]["initContainers"] == HATCHES["initContainers"]
    assert [x["name"] for x in pod["spec"]["containers"]] == ["server", "log-shipper"]
    # the selector still matches the pods
    sel = deployment(objs)["spec"]["selector"]["matchLabels"]
    assert sel.items() <= pod["metadata"]["labels"].items()
    assert k8s_errors(objs, "1.34") == []


def test_init_containers_follow_the_model_fetch(helm4):
    objs = render(helm4, values={**{k: HATCHES[k] for k in ("initContainers",)},
                                 "model": {"source": "init", "init": {"command": ["fetch"]}}})
    assert [c["name"] for c in pod_spec(objs)["initContainers"]] == ["fetch-model", "wait-for-store"]


def test_set_pod_labels_from_the_command_line(helm):
    objs = render(helm, set_values={"podLabels.team": "a"})
    assert deployment(objs)["spec"]["template"]["metadata"]["labels"]["team"] == "a"


def test_empty_hatches_render_nothing_extra(helm4):
    spec = pod_spec(render(helm4))
    assert "initContainers" not in spec and [c["name"] for c in spec["containers"]] == ["server"]
    assert "envFrom" not in server(render(helm4))


@pytest.mark.parametrize("values, h4, h3", [
    ({"podLabels": {"app.kubernetes.io/instance": "other"}},
     "podLabels.app.kubernetes.io/instance: the chart's selector label", None),
    # a literal credential: refused by the schema ($defs.envVar "not"; gpuvalues words it)
    ({"extraEnv": [{"name": "HF_TOKEN", "value": "hf_x"}]}, "at '/extraEnv/0': 'not' failed",
     "extraEnv.0: Must not validate the schema (not)"),
    ({"extraArgs": ["--gpu-memory-utilization=0.3"],
      "gpu": {"mode": "shared", "shared": {"memoryFraction": 0.3}}}, "server.args/extraArgs: set only one", None),
    ({"sidecars": [{"name": "x"}]}, "/sidecars/0", "sidecars.0"),
    ({"extraVolumeMounts": [{"name": "x", "mountpath": "/x"}]}, "/extraVolumeMounts/0", "extraVolumeMounts.0"),
    ({"extraEnvFrom": [{"configMapref": {"name": "x"}}]}, "/extraEnvFrom/0", "extraEnvFrom.0"),
    ({"podLabels": {"team": {"a": "b"}}}, "/podLabels/team", "podLabels.team"),
])
def test_bad_escape_hatch_values_are_refused(helm, values, h4, h3):
    proc = template(helm, values=values)
    assert proc.returncode != 0, proc.stdout[:300]
    msg = h4 if helm.endswith("/helm") else (h3 or h4)
    assert msg in proc.stderr, proc.stderr


# --- where the rules and headers live -------------------------------------------------------

ACTION = re.compile(r"\{\{-?\s*(?:/\*.*?\*/\s*-?\}\}|(\w+)[^}]*\}\})", re.S)


def defines(text: str) -> dict[str, str]:
    """name -> body of each `define` (matched by nesting if/range/with/define ... end)."""
    out, stack = {}, []
    for m in ACTION.finditer(text):
        word = m.group(1)
        if word in ("if", "range", "with", "define", "block"):
            name = re.search(r'"([^"]+)"', m.group(0)) if word == "define" else None
            stack.append((word, name.group(1) if name else None, m.end()))
        elif word == "end" and stack:
            word, name, start = stack.pop()
            if word == "define":
                out[name] = text[start:m.start()]
    return out


def test_every_fail_is_in_validation_yaml():
    """`fail` only in validation.yaml, or in a `*.validate` define that only validation.yaml
    includes (the serving features keep theirs beside their helpers in _serving.tpl)."""
    texts = {p.name: p.read_text() for p in TEMPLATES.rglob("*") if p.is_file()}
    fails = re.compile(r"\bfail\b\s*[\"(]")
    offenders = []
    for name, text in texts.items():
        if name == "validation.yaml":
            continue
        for define, body in defines(text).items():
            callers = [n for n, t in texts.items() if f'include "{define}"' in t]
            if define.endswith(".validate") and callers == ["validation.yaml"]:
                text = text.replace(body, "")
        if fails.search(text):
            offenders.append(name)
    assert offenders == []
    assert len(re.findall(r"\{\{-? fail", texts["validation.yaml"])) >= 25


def test_the_fail_scan_finds_a_stray_fail():
    """Negative control for the scan above: a fail outside a validate define is found."""
    text = '{{- define "x.helper" -}}{{- if .a }}{{- fail "no" }}{{- end }}{{- end }}'
    assert defines(text) == {"x.helper": '{{- if .a }}{{- fail "no" }}{{- end }}'}
    assert re.search(r"\bfail\b\s*[\"(]", text)


def test_validation_yaml_renders_no_object(helm4):
    proc = template(helm4, set_values={"platform.devicePlugin.enabled": "true"})
    assert proc.returncode == 0, proc.stderr
    assert "# Source: gpu-inference/templates/validation.yaml" not in proc.stdout


def test_the_node_daemonsets_share_one_header():
    daemonsets = [p for p in TEMPLATES.glob("*-daemonset.yaml")]
    assert len(daemonsets) == 6
    for p in daemonsets:
        text = p.read_text()
        assert text.count('include "gpu-inference.platform.daemonSetHeader"') == 1, p.name
        assert "kind: DaemonSet" not in text and "updateStrategy" not in text, p.name
