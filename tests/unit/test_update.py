"""Round-trip edits of a user's values.yaml: comments, order and quoting kept; validated
before an atomic write; a failed validation leaves the file byte-for-byte untouched."""
from __future__ import annotations

import os

import pytest

from gpuvalues.yamlio.loader import load_yaml
from gpuvalues.checks.rules import ValidationFailed
from gpuvalues.errors import SpecError
from gpuvalues.io.update import apply_updates, parse_path, parse_value, update_values

USER = """\
# Production values for the llama release.
server:
  type: vllm   # OpenAI-compatible server
gpu:
  mode: whole
  count: 1

autoscaling:
  engine: 'hpa'        # single quotes kept
  maxReplicas: 4
  metrics:
    - name: "vllm:num_requests_waiting"
      target: "5"
tolerations:
  - key: team
    operator: Exists
"""


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(USER)
    return path


def test_edit_keeps_comments_order_and_quoting(user_file):
    update_values(user_file, {"autoscaling.maxReplicas": 12, "autoscaling.engine": "keda",
                              "autoscaling.metrics[0].target": "8"})
    expected = (USER.replace("maxReplicas: 4", "maxReplicas: 12")
                .replace("engine: 'hpa'  ", "engine: 'keda' ")
                .replace('target: "5"', 'target: "8"'))
    assert user_file.read_text() == expected


def test_new_keys_and_list_items(user_file):
    update_values(user_file, {"model.name": "meta-llama/Llama-3.1-8B-Instruct",
                              "tolerations[1].key": "gpu", "tolerations[1].operator": "Exists",
                              'commonAnnotations."example.com/owner"': "ml-team"})
    text = user_file.read_text()
    assert text.startswith(USER)           # nothing before the additions moved
    assert text[len(USER):] == ("  - key: gpu\n    operator: Exists\n"
                                "model:\n  name: meta-llama/Llama-3.1-8B-Instruct\n"
                                "commonAnnotations:\n  example.com/owner: ml-team\n")
    data = load_yaml(user_file).data
    assert data["tolerations"][1] == {"key": "gpu", "operator": "Exists"}
    assert data["commonAnnotations"] == {"example.com/owner": "ml-team"}
    assert data["model"]["name"] == "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize("text, expected", [
    # Helm's --set typing (helm/helm pkg/strvals/parser.go typedVal)
    ("true", True), ("FALSE", False), ("null", None), ("0", 0), ("12", 12), ("-3", -3),
    ("yes", "yes"), ("0755", "0755"), ("1.5", "1.5"), ("1e3", "1e3"), ("on", "on"),
    ("[1, 2]", [1, 2]), ("{a: 1}", {"a": 1}),
])
def test_set_values_are_typed_like_helm_set(text, expected):
    got = parse_value(text)
    assert got == expected and type(got) is type(expected)


def test_strings_helm_would_retype_are_quoted(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("commonAnnotations: {}\n")
    update_values(path, {"commonAnnotations.a": "yes", "commonAnnotations.b": "0755",
                         "commonAnnotations.c": "1e3", "commonAnnotations.d": "plain"})
    data = load_yaml(path).data["commonAnnotations"]
    assert data == {"a": "yes", "b": "0755", "c": "1e3", "d": "plain"}
    assert '"yes"' in path.read_text() and "d: plain" in path.read_text()


def _snapshot(path):
    return path.read_bytes(), os.stat(path).st_mtime_ns, sorted(os.listdir(path.parent))


@pytest.mark.parametrize("change, words", [
    ({"gpu.mode": "halves"}, 'gpu.mode: "halves" is not one of'),
    ({"pdb.maxUnavailable": 0}, "[GV004]"),
    ({"autoscaling.metrics[0].name": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}, "[GV003]"),
    ({"gpu.count": "two"}, "gpu.count: expected integer"),
])
def test_failed_validation_leaves_the_file_untouched(user_file, change, words):
    before = _snapshot(user_file)
    with pytest.raises(ValidationFailed) as exc:
        update_values(user_file, change)
    assert words in str(exc.value)
    assert str(exc.value).startswith(f"{user_file}:")
    assert _snapshot(user_file) == before


def test_bad_paths_and_shapes(user_file):
    before = _snapshot(user_file)
    with pytest.raises(SpecError, match="not a mapping"):
        update_values(user_file, {"gpu.mode.x": 1})
    with pytest.raises(SpecError, match=r"no list item \[5\]"):
        update_values(user_file, {"tolerations[5].key": "a"})
    with pytest.raises(SpecError, match="bad path"):
        update_values(user_file, {"a..b": 1})
    assert _snapshot(user_file) == before


def test_malformed_file_gives_a_positioned_error(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("gpu:\n  mode: [whole\n")
    with pytest.raises(SpecError) as exc:
        update_values(path, {"gpu.count": 2})
    assert exc.value.line == 3 and str(exc.value).startswith(f"{path}:3:1:")
    assert path.read_text() == "gpu:\n  mode: [whole\n"


def test_stdin_cannot_be_updated():
    with pytest.raises(SpecError, match="cannot read stdin"):
        update_values("-", {"a": 1})


def test_indentation_styles_are_kept():
    flush = "a:\n- x: 1\n  y: 2\n"
    assert apply_updates(flush, {"a[0].y": 3}) == "a:\n- x: 1\n  y: 3\n"
    indented = "a:\n    - x: 1\n      y: 2\n"
    assert apply_updates(indented, {"a[0].y": 3}) == "a:\n    - x: 1\n      y: 3\n"


def test_parse_path():
    assert parse_path("a.b[2].c") == ("a", "b", 2, "c")
    assert parse_path('x."prometheus.io/scrape"') == ("x", "prometheus.io/scrape")
    assert parse_path(r"x.prometheus\.io/port") == ("x", "prometheus.io/port")
    assert parse_path("l[0][1]") == ("l", 0, 1)


def test_no_validate_still_checks_types(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("gpu: {mode: whole}\n")
    update_values(path, {"gpu.mode": "anything"}, validate=False)
    assert load_yaml(path).data == {"gpu": {"mode": "anything"}}


SHARED = """\
server:
  type: vllm
gpu:
  mode: shared
  count: 1
  shared:
    resourceName: nvidia.com/gpu.shared
"""


def test_a_number_the_schema_asks_for_is_written_as_a_number(tmp_path):
    # `--set gpu.shared.memoryFraction=0.3`: Helm's --set would pass the string "0.3"; the
    # values file gets what the chart's schema types the field as (null or a number)
    from gpuvalues import cli
    path = tmp_path / "v.yaml"
    path.write_text(SHARED)
    assert cli.main(["update", str(path), "--set", "gpu.shared.memoryFraction=0.3"]) == 0
    assert load_yaml(path).data["gpu"]["shared"]["memoryFraction"] == 0.3
    assert "memoryFraction: 0.3\n" in path.read_text()
    # where the schema takes a string, a number-like text stays a string
    update_values(path, {"commonAnnotations.note": "0.3"})
    assert load_yaml(path).data["commonAnnotations"] == {"note": "0.3"}


def test_string_flag_keeps_the_text_and_the_schema_refuses_it(tmp_path):
    from gpuvalues import cli
    path = tmp_path / "v.yaml"
    path.write_text(SHARED)
    before = path.read_bytes()
    assert cli.main(["update", str(path), "--string", "--set", "gpu.shared.memoryFraction=0.3"]) == 2
    assert path.read_bytes() == before
