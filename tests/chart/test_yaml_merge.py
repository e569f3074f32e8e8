"""The oracle for yamlio's merge keys and alias limit: the real Helm binaries.

A throw-away chart prints `.Values` as JSON. Merge keys (`<<:`) must come out of Helm
exactly as yamlio reads them (including go-yaml v2's order: a merge overrides the keys
written before it), and the alias bomb Helm refuses ("excessive aliasing") yamlio must
refuse too, while a file with a few aliases both accept.
"""
from __future__ import annotations

import json

import pytest
import yaml

from gpuvalues.errors import SpecError
from gpuvalues.yamlio.loader import load_yaml
from tests.conftest import run
from tests.unit.test_hostile_reads import MERGE_HELM, MERGE_YAML, bomb

TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: merge
data:
  out: {{ .Values | toJson | quote }}
"""


@pytest.fixture(scope="module")
def json_chart(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    (root / "templates").mkdir()
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: merge\nversion: 0.1.0\n")
    (root / "templates" / "cm.yaml").write_text(TEMPLATE)
    return root


def _helm_values(helm, chart, path):
    proc = run([helm, "template", "t", str(chart), "-f", str(path)])
    return proc, (json.loads(yaml.safe_load(proc.stdout)["data"]["out"]) if proc.returncode == 0 else None)


MORE_MERGES = """\
defaults: &d {image: {repo: vllm, tag: v1}, replicas: 2}
gpu: &g {count: 1}
a: {<<: [*d, *g], replicas: 3}
b:
  <<: *d
  image: {tag: v2}
"""


@pytest.mark.parametrize("text", [MERGE_YAML, MORE_MERGES], ids=["order", "nested"])
def test_merge_keys_read_as_helm_reads_them(helm, json_chart, tmp_path, text):
    values = tmp_path / "v.yaml"
    values.write_text(text)
    proc, helm_data = _helm_values(helm, json_chart, values)
    assert proc.returncode == 0, proc.stderr
    assert load_yaml(values).data == helm_data


def test_recorded_expectation_is_helms(helm, json_chart, tmp_path):
    """The unit test's MERGE_HELM table is what this helm prints (so the unit test,
    which runs without helm, checks against Helm and not against yamlio)."""
    values = tmp_path / "v.yaml"
    values.write_text(MERGE_YAML)
    _, helm_data = _helm_values(helm, json_chart, values)
    assert helm_data == MERGE_HELM


def test_alias_bomb_refused_by_both(helm, json_chart, tmp_path):
    values = tmp_path / "bomb.yaml"
    values.write_text(bomb())
    proc, _ = _helm_values(helm, json_chart, values)
    assert proc.returncode != 0 and "excessive aliasing" in proc.stderr
    with pytest.raises(SpecError, match="excessive aliasing"):
        load_yaml(values)


def test_small_aliasing_accepted_by_both(helm, json_chart, tmp_path):
    """Negative control: 3 levels of 9 aliases (729 scalars) is fine for Helm and yamlio."""
    values = tmp_path / "small.yaml"
    values.write_text(bomb(levels=3))
    proc, helm_data = _helm_values(helm, json_chart, values)
    assert proc.returncode == 0, proc.stderr
    assert load_yaml(values).data == helm_data
