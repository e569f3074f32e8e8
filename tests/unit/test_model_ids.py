"""The schemas' Hugging Face repo id rule agrees with huggingface_hub's validate_repo_id
(utils/_validators.py) on generated ids, and model paths carry nothing a shell reads."""
from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from gpuvalues.schemas import load_schema
from tests.conftest import ROOT

VALUES = load_schema(ROOT / "schemas" / "values.schema.json")
SPEC = load_schema(ROOT / "schemas" / "spec.schema.json")


def ok(schema: dict, defs: dict, value: str) -> bool:
    return jsonschema.Draft202012Validator({**schema, "$defs": defs}).is_valid(value)


HF_VALIDATOR = jsonschema.Draft202012Validator({"$ref": "#/$defs/hfRepoId", "$defs": VALUES["$defs"]})


def hub_ok(value: str) -> bool:
    try:
        validate_repo_id(value)
        return True
    except HFValidationError:
        return False


HF = {"$ref": "#/$defs/hfRepoId"}
# ASCII only: the Hub's client takes Unicode word characters (Python's \w), the Hub's
# own names do not, and neither does our rule (a documented narrowing).
ALPHABET = "aZ09_.-/"


@settings(max_examples=1000, deadline=None)
@given(st.text(ALPHABET, min_size=1, max_size=12)
       | st.builds(lambda a, n, b: a + "x" * n + b, st.text(ALPHABET, max_size=3),
                   st.integers(90, 100), st.text(ALPHABET, max_size=3)))
def test_hf_rule_agrees_with_the_hub_client(value):
    assert HF_VALIDATOR.is_valid(value) == hub_ok(value), value


@pytest.mark.parametrize("value", ["foo", "foo/bar", "123", "Foo-BAR_foo.bar123",
                                   "datasets/foo/bar", ".repo_id", "foo--bar", "foo.git",
                                   "other..repo..id", "a" * 96, "a" * 97, "ns/" + "b" * 96])
def test_hub_docstring_cases(value):
    """validate_repo_id's own docstring examples and the 96-character edge."""
    assert ok(HF, VALUES["$defs"], value) == hub_ok(value), value


@pytest.mark.parametrize("schema, defs", [({"$ref": "#/$defs/modelPath"}, VALUES["$defs"]),
                                          ({"$ref": "#/$defs/modelPath"}, SPEC["$defs"])])
@pytest.mark.parametrize("value", ["a b", "a;b", "$(X)", "a`b`", "a'b", 'a"b', "a\nb", "a*",
                                   "/abs", "a/../b", "a//b", "~a", "a|b", "a&b", "a>b"])
def test_model_paths_refuse_shell_syntax(schema, defs, value):
    assert not ok(schema, defs, value)


def test_model_paths_take_ids_and_nested_paths():
    for value in ("meta-llama/Llama-3.1-8B-Instruct", "models/llama/v1.2", "resnet50", "a_b/c.d"):
        assert ok({"$ref": "#/$defs/modelPath"}, SPEC["$defs"], value), value


LABEL_ALPHABET = "aZ09-_./ $"


@settings(max_examples=500, deadline=None)
@given(st.text(LABEL_ALPHABET, max_size=8) | st.builds(lambda n: "a" * n, st.integers(60, 66)))
def test_schema_label_rules_agree_with_gpuvalues_kube(text):
    """The values schema's labelKey/labelValue and gpuvalues.kube's rules are one rule."""
    from gpuvalues import kube
    key = jsonschema.Draft202012Validator({"$ref": "#/$defs/labelKey", "$defs": VALUES["$defs"]})
    value = jsonschema.Draft202012Validator({"$ref": "#/$defs/labelValue", "$defs": VALUES["$defs"]})
    assert value.is_valid(text) == kube.is_label_value(text), text
    assert key.is_valid(text) == kube.is_label_key(text), text
