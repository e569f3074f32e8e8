"""The values schema (schemas/values.schema.json is the source; the chart's copy is
generated) and the README parameter table (generated from `## @param` lines)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import jsonschema
import pytest
import yaml

from tests.conftest import CHART, ROOT

SOURCE = ROOT / "schemas" / "values.schema.json"
CHART_SCHEMA = CHART / "values.schema.json"
# 2019-09+ keywords that Helm 3.17's draft-07 library silently ignores.
NOT_ON_DRAFT7 = {"unevaluatedProperties", "unevaluatedItems", "prefixItems", "dependentRequired",
                 "dependentSchemas", "$dynamicRef", "$recursiveRef", "minContains", "maxContains"}


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), ROOT / "ci" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def _walk(node, path=""):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}/{i}")


def test_chart_schema_is_generated_from_the_source_without_drift():
    proc = subprocess.run([sys.executable, str(ROOT / "ci" / "sync-schema.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # Same schema, apart from the generated-file note.
    chart = json.loads(CHART_SCHEMA.read_text())
    assert "GENERATED" in chart.pop("$comment")
    assert chart == json.loads(SOURCE.read_text())


def test_drift_is_detected(tmp_path):
    sync = _load_script("sync-schema")
    src = json.loads(SOURCE.read_text())
    src["properties"]["gpu"] = {"type": "object"}
    changed = tmp_path / "s.json"
    changed.write_text(json.dumps(src))
    assert sync.generate(changed) != CHART_SCHEMA.read_text()
    assert sync.generate(SOURCE) == CHART_SCHEMA.read_text()


def test_schema_shape():
    schema = json.loads(SOURCE.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["global"]["type"] == "object"
    assert schema["properties"]["platform"] == {"$ref": "#/$defs/platform"}
    assert "platform" in schema["$defs"]
    for path, node in _walk(schema):
        ref = node.get("$ref")
        if ref is not None:
            assert ref.startswith("#/$defs/"), f"{path}: remote or odd $ref {ref}"
            # draft-07 (Helm 3.17) ignores every keyword beside $ref
            assert set(node) <= {"$ref", "description"}, f"{path}: keywords beside $ref"
        assert not (NOT_ON_DRAFT7 & set(node)), f"{path}: uses {NOT_ON_DRAFT7 & set(node)}"
    # Every workload block is closed (platform blocks belong to the platform part).
    for name, d in schema["$defs"].items():
        if name.startswith("platform"):
            continue
        if d.get("type") == "object" and "properties" in d:
            assert d.get("additionalProperties") is False, name


def test_values_yaml_and_scenarios_satisfy_the_schema():
    v = jsonschema.Draft202012Validator(json.loads(SOURCE.read_text()))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert list(v.iter_errors(values)) == []
    for f in sorted((CHART / "ci").glob("*-values.yaml")):
        if f.name.startswith("platform-"):
            continue
        merged = _merge(yaml.safe_load((CHART / "values.yaml").read_text()), yaml.safe_load(f.read_text()))
        errs = [f"{e.json_path}: {e.message}" for e in v.iter_errors(merged)]
        assert errs == [], f"{f.name}: {errs}"


def _merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, val in over.items():
            out[k] = _merge(base.get(k), val)
        return out
    return over


@pytest.mark.parametrize("bad, where", [
    ({"gpu": {"mode": "whole", "count": 0}}, "/gpu/count"),
    ({"gpu": {"mode": "mig", "count": 1, "mig": {"profile": "1g.10"}}}, "/gpu/mig/profile"),
    ({"resources": {"limits": {"nvidia.com/gpu": 1}}}, "/resources/limits"),
    ({"server": {"type": "vllm", "image": {"tag": "v1 beta"}}}, "/server/image/tag"),
    ({"autoscaling": {"engine": "vpa"}}, "/autoscaling/engine"),
    ({"autoscaling": {"engine": "hpa", "metrics": [{"name": "vllm:num requests", "target": "5"}]}},
     "/autoscaling/metrics/0/name"),
    ({"pdb": {"unhealthyPodEvictionPolicy": "Never"}}, "/pdb/unhealthyPodEvictionPolicy"),
    ({"model": {"source": "s3"}}, "/model/source"),
    ({"server": {"type": "vllm", "surprise": 1}}, "/server"),
    ({"surprise": 1}, ""),
])
def test_python_validator_agrees_on_bad_values(bad, where):
    v = jsonschema.Draft202012Validator(json.loads(SOURCE.read_text()))
    errs = list(v.iter_errors(bad))
    assert errs, bad
    assert any(e.json_path.replace(".", "/").replace("$", "") == where or
               ("/" + "/".join(map(str, e.absolute_path))) == (where or "/") for e in errs), \
        [(e.json_path, e.message) for e in errs]


# --- README parameters -------------------------------------------------------------------

def test_readme_parameter_table_matches_values_yaml():
    proc = subprocess.run([sys.executable, str(ROOT / "ci" / "readme-params.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_readme_generator_finds_missing_and_stale_params():
    gen = _load_script("readme-params")
    text = "## @section S\n## @param a.b First\na:\n  b: 1\n  c: two\n## @param z Gone\n"
    values = yaml.safe_load(text)
    params = gen.parse(text)
    problems = gen.problems(params, values)
    assert any("a.c has no ## @param" in p for p in problems)
    assert any("@param z names no key" in p for p in problems)
    table = gen.table(params, values)
    assert "| `a.b` | First | `1` |" in table and "### S" in table
    # An object-typed @param covers its children.
    text2 = "## @param a [object] All of a\na:\n  b: 1\n"
    assert gen.problems(gen.parse(text2), yaml.safe_load(text2)) == []


def test_every_readme_row_names_a_real_key():
    gen = _load_script("readme-params")
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    section = readme.split(gen.START)[1].split(gen.END)[0]
    keys = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert len(keys) >= 100
    for k in keys:
        assert gen.lookup(values, k) is not gen.MISSING, k


@pytest.mark.parametrize("bad", [
    {"gpu": {"count": 0}},
    {"gpu": {"mig": {"profile": "1g.10"}}},
    {"gpu": {"mode": "DRA"}},
    {"resources": {"limits": {"nvidia.com/gpu": 1}}},
    {"resources": {"requests": {"nvidia.com/gpu": "one"}}},
    {"autoscaling": {"metrics": [{"name": "x"}]}},
    {"autoscaling": {"behavior": {"scaleUp": {"selectPolicy": "Fastest"}}}},
    {"autoscaling": {"maxReplicas": 0}},
    {"pdb": {"maxUnavailable": "110"}},
    {"pdb": {"maxUnavailable": "150%"}},
    {"probes": {"liveness": {"periodSeconds": 0}}},
    {"server": {"modelLoadTimeoutSeconds": 5}},
    {"model": {"token": {"secretName": "hf_Token"}}},
    {"topologySpread": {"whenUnsatisfiable": "Maybe"}},
    {"podAntiAffinity": "strict"},
    {"serviceAccount": {"create": "yes please"}},
])
def test_schema_rejects_the_same_values_on_both_helms_and_python(helm, bad, tmp_path):
    # The one schema must mean the same on Helm 4 (2020-12), Helm 3.17 (draft-07) and Python.
    from tests.chart.chartlib import template
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad))
    proc = template(helm, f)
    assert proc.returncode != 0 and "don't meet the specifications of the schema" in proc.stderr, proc.stderr
    merged = _merge(yaml.safe_load((CHART / "values.yaml").read_text()), bad)
    assert list(jsonschema.Draft202012Validator(json.loads(SOURCE.read_text())).iter_errors(merged))
