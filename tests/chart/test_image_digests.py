"""Every image the chart renders can be pinned by digest (issue 25): each image value in
values.yaml takes `digest` (schema pattern sha256:<64 hex>), and with every digest set,
every container of every rendered object (init containers, the fill Job and the helm test
hook included) names its image by that digest, on both helms; a malformed digest is
refused. (model.image.reference, the weights' image volume, is one OCI reference string
that takes `@sha256:` itself.) The reference keeps the tag beside the digest
(`repository:tag@sha256:...`, gpu-inference.imageRef): the runtime pulls by the digest."""
from __future__ import annotations

import hashlib

import pytest
import yaml

from tests.chart.chartlib import HELMS, k8s_errors, render, scenario_file, template
from tests.conftest import CHART, ROOT

DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def image_values(node, path=()) -> list[tuple[str, ...]]:
    """Paths of every image value (a mapping with a repository) in the chart's defaults."""
    out = []
    if isinstance(node, dict):
        if "repository" in node:
            out.append(path)
        for k, v in node.items():
            out += image_values(v, (*path, k))
    return out


IMAGES = image_values(DEFAULTS)


def digest_of(path: tuple[str, ...]) -> str:
    return "sha256:" + hashlib.sha256(".".join(path).encode()).hexdigest()


def with_digests() -> dict:
    values: dict = {}
    for path in IMAGES:
        node = values
        for k in path:
            node = node.setdefault(k, {})
        node["digest"] = digest_of(path)
    return values


def merge(base: dict, patch: dict) -> dict:
    out = dict(base)
    for k, v in patch.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def containers(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    pod = spec if obj["kind"] == "Pod" else (spec.get("template") or {}).get("spec") or {}
    return pod.get("initContainers", []) + pod.get("containers", [])


def test_every_image_value_takes_a_digest():
    assert len(IMAGES) >= 11, IMAGES      # 7 workload images + 4 platform components
    assert {p[0] for p in IMAGES} == {"server", "model", "gateway", "helmTest", "platform"}


# One render with everything on: platform, gateway, remediation, the init model source,
# the helm test hook; then the model cache's fill Job, which excludes the init source.
SCENES = {
    "all": [scenario_file("platform-on"), ROOT / "examples" / "values" / "gateway.yaml"],
    "cache": [ROOT / "examples" / "values" / "model-cache-pvc.yaml"],
}
EXTRA = {"all": {"platform": {"remediation": {"enabled": True}},
                 "model": {"source": "init", "init": {"command": ["fetch"]}}}, "cache": {}}


@pytest.mark.parametrize("helm_name", ["helm", "helm3"])
@pytest.mark.parametrize("scene", sorted(SCENES))
def test_every_rendered_image_is_pinned_by_its_digest(helm_name, scene):
    values = merge(with_digests(), EXTRA[scene])
    objs = render(HELMS[helm_name], *SCENES[scene], values=values)
    digests = {digest_of(p) for p in IMAGES}
    seen = []
    for obj in objs:
        for c in containers(obj):
            ref = c["image"]
            assert "@" in ref and ref.rsplit("@", 1)[1] in digests, (obj["kind"], c["name"], ref)
            seen.append(c["name"])
    assert len(seen) >= (9 if scene == "all" else 2), seen
    assert k8s_errors([o for o in objs if containers(o)], "1.34") == []


@pytest.mark.parametrize("path", IMAGES, ids=[".".join(p) for p in IMAGES])
def test_a_malformed_digest_is_refused(path):
    values: dict = {}
    node = values
    for k in path:
        node = node.setdefault(k, {})
    node["digest"] = "sha256:ABC"
    proc = template(HELMS["helm"], values=values)
    assert proc.returncode != 0 and "digest" in proc.stderr, proc.stderr[-300:]
