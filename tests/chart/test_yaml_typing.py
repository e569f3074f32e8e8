"""The oracle for gpuvalues.yamlio: the real Helm binaries' reading of plain scalars.

A throw-away chart prints `kindOf` and the value of every entry of a values file; each
scalar of the unit test's table must come out of Helm as yamlio says it does.
"""
from __future__ import annotations

import json

import pytest
import yaml

from gpuvalues.errors import SpecError
from gpuvalues.yamlio.loader import load_yaml
from tests.conftest import run
from tests.unit.test_yamlio import HELM_TYPES

TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: typing
data:
  out: {{ .Values.s | toJson | quote }}
  kinds: {{ include "kinds" . | quote }}
"""
HELPERS = """{{- define "kinds" -}}
{{- $out := dict -}}
{{- range $k, $v := .Values.s }}{{ $_ := set $out $k (kindOf $v) }}{{ end -}}
{{- $out | toJson -}}
{{- end -}}
"""


@pytest.fixture(scope="module")
def typing_chart(tmp_path_factory):
    root = tmp_path_factory.mktemp("typing")
    (root / "templates").mkdir()
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: typing\nversion: 0.1.0\n")
    (root / "templates" / "cm.yaml").write_text(TEMPLATE)
    (root / "templates" / "_helpers.tpl").write_text(HELPERS)
    return root


def test_helm_reads_scalars_as_yamlio_says(helm, typing_chart, tmp_path):
    keys = {f"k{i:02d}": text for i, (text, _) in enumerate(HELM_TYPES)}
    values = tmp_path / "v.yaml"
    values.write_text("s:\n" + "".join(f"  {k}: {t}\n" for k, t in keys.items()))
    proc = run([helm, "template", "t", str(typing_chart), "-f", str(values)])
    assert proc.returncode == 0, proc.stderr
    cm = yaml.safe_load(proc.stdout)
    out = json.loads(cm["data"]["out"])
    kinds = json.loads(cm["data"]["kinds"])
    ours = load_yaml(values).data["s"]
    for key, text in keys.items():
        helm_value, kind = out.get(key), kinds[key]
        mine = ours[key]
        if kind == "bool":
            assert mine is helm_value, (text, helm_value, mine)
        elif kind == "float64":          # Helm keeps every number as float64
            assert isinstance(mine, (int, float)) and not isinstance(mine, bool), text
            assert float(mine) == helm_value, (text, helm_value, mine)
        elif kind == "string":
            assert mine == helm_value and isinstance(mine, str), (text, helm_value, mine)
        else:
            assert kind == "invalid" and mine is None, (text, kind, mine)


def test_helm_rejects_what_yamlio_rejects(helm, typing_chart, tmp_path):
    values = tmp_path / "inf.yaml"
    values.write_text("s:\n  a: .inf\n")
    proc = run([helm, "template", "t", str(typing_chart), "-f", str(values)])
    assert proc.returncode != 0 and "Inf" in proc.stderr
    with pytest.raises(SpecError):
        load_yaml(values)
