"""Hostile inputs (issue 14, reads): non-regular files refused before opening, a size
limit, Helm's alias-expansion limit, merge keys as Helm reads them, deep nesting, bounded
error lines, spec-relative references, kubeconfig and kubernetesVersion errors. The CLI
runs in-process here (cli.main); real subprocesses are in tests/integration."""
from __future__ import annotations

import json
import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from gpuvalues import cli
from gpuvalues.yamlio.inputs import MAX_INPUT_BYTES, read_input
from gpuvalues.yamlio.loader import check_aliasing, load_text, parse_yaml
from gpuvalues.errors import MAX_MESSAGE, SpecError

SPEC = """\
apiVersion: gpuvalues/v1
kubernetesVersion: "1.34.0"
cluster:
  nodePools:
    - {name: a100, gpu: NVIDIA-A100-SXM4-80GB, gpusPerNode: 4, nodes: 1}
workloads:
  - name: llama-8b
    model: meta-llama/Llama-3.1-8B-Instruct
    server: vllm
    gpus: 1
    memoryGB: 40
    throughputPerReplica: 3
    slo: {latencyMs: 2000}
    load: {base: 1, peak: 6}
sharing: whole
"""


def gv(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gpuvalues: error: ") and "Traceback" not in err
    return lines[0]


def bomb(levels: int = 9, width: int = 9) -> str:
    """The classic "billion laughs": level k is `width` aliases of level k-1."""
    names = "abcdefghijklmnop"
    lines = [f'{names[0]}: &{names[0]} [{", ".join(["lol"] * width)}]']
    for k in range(1, levels):
        refs = ", ".join([f"*{names[k - 1]}"] * width)
        lines.append(f"{names[k]}: &{names[k]} [{refs}]")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- non-regular files
def test_fifo_refused_without_blocking(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result: list = []
    t = threading.Thread(target=lambda: result.append(_catch(read_input, fifo)))
    t.daemon = True
    t.start()
    t.join(5)
    assert result, "reading a FIFO blocked"
    assert str(result[0]).endswith("is a FIFO (named pipe), expected a YAML file (gpuvalues "
                                   "reads only regular files)")


def _catch(fn, *a):
    try:
        fn(*a)
    except SpecError as exc:
        return exc
    return None


def test_devices_refused():
    with pytest.raises(SpecError, match="is a character device"):
        read_input("/dev/zero")


def test_directory_refused(tmp_path):
    with pytest.raises(SpecError, match="is a directory"):
        read_input(tmp_path)


def test_size_limit(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + 1)          # sparse: no 16 MiB written
    with pytest.raises(SpecError, match=r"is 16\.0 MiB; gpuvalues reads files up to 16 MiB"):
        read_input(big)
    ok = tmp_path / "ok.yaml"
    ok.write_text("a: 1\n")
    assert read_input(ok) == (b"a: 1\n", str(ok))   # control


def test_cli_values_on_dev_zero_is_one_line(capsys, tmp_path):
    code, out, err = gv(capsys, "values", "/dev/zero", "-o", tmp_path / "v.yaml")
    assert code == 2 and out == ""
    assert one_error(err) == ("gpuvalues: error: /dev/zero: is a character device, expected a "
                              "YAML file (gpuvalues reads only regular files) [GV019]")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------- aliases
def test_alias_bomb_fails_fast_and_small():
    # memory, not time, is the measure here: the 9x9 bomb expanded would be 9^9 nodes
    tracemalloc.start()
    with pytest.raises(SpecError, match="excessive aliasing") as err:
        load_text(bomb(), "bomb.yaml")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 100 * 2**20, peak
    assert str(err.value).startswith("bomb.yaml:")


def test_alias_limit_is_goyamls_ratio():
    """Below go-yaml's thresholds aliases are fine: 100 alias decodes or 1000 decodes never
    fail (decode.go: aliasCount > 100 && decodeCount > 1000 && ratio > allowed)."""
    small = bomb(levels=3, width=9)           # 9*9*9 = 729 aliased scalars
    assert len(load_text(small, "s.yaml").data["c"]) == 9
    assert check_aliasing is not None
    with pytest.raises(SpecError, match="excessive aliasing"):
        load_text(bomb(levels=5, width=9), "b.yaml")     # 9^5 = 59,049 decodes


def test_parse_yaml_refuses_bombs_too():
    with pytest.raises(SpecError, match="excessive aliasing"):
        parse_yaml(bomb(), source="inv.yaml", error=SpecError)


def test_recursive_anchor_refused_not_hung():
    with pytest.raises(SpecError, match="excessive aliasing|nested more than"):
        load_text("a: &a [*a, *a]\n", "r.yaml")


# ---------------------------------------------------------------------------- merge keys
# What Helm 4.1.4 and 3.17.2 give for this file (`helm template` with `toJson .Values`);
# tests/chart/test_yaml_merge.py re-derives it from the real helm on every run.
MERGE_YAML = """\
base: &b {x: 1, y: 2, z: 3}
other: &o {x: 10, w: 20}
a:
  x: 0
  <<: *b
b:
  <<: *b
  x: 0
c:
  <<: [*o, *b]
d:
  <<: {q: 1}
  q: 2
"""
MERGE_HELM = {"a": {"true": 2, "x": 1, "z": 3}, "b": {"true": 2, "x": 0, "z": 3},
              "base": {"true": 2, "x": 1, "z": 3}, "c": {"true": 2, "w": 20, "x": 10, "z": 3},
              "d": {"q": 2}, "other": {"w": 20, "x": 10}}


def test_merge_keys_as_helm_reads_them():
    assert load_text(MERGE_YAML, "m.yaml").data == MERGE_HELM


def test_merge_of_a_scalar_is_an_error():
    with pytest.raises(SpecError, match="map merge requires map or sequence of maps"):
        load_text("a:\n  <<: 3\n", "m.yaml")


def test_quoted_merge_key_is_a_plain_key():
    assert load_text('"<<": {a: 1}\n', "m.yaml").data == {"<<": {"a": 1}}


def test_spec_with_merge_keys_validates(capsys, tmp_path):
    spec = tmp_path / "spec.yaml"
    text = SPEC
    spec.write_text("x-defaults: &slo {latencyMs: 2000}\n" +
                    text.replace("    slo: {latencyMs: 2000}\n", "    slo: {<<: *slo}\n"))
    code, out, err = gv(capsys, "validate", spec)
    assert "x-defaults" in out              # the anchor holder is an unknown key ...
    assert "<<" not in out                   # ... but the merge itself is accepted


# ---------------------------------------------------------------------------- nesting
def test_deep_json_inventory_is_one_line(capsys, tmp_path):
    deep = tmp_path / "inv.json"
    deep.write_text('{"items": ' + "[" * 10_000 + "]" * 10_000 + "}")
    code, out, err = gv(capsys, "inventory", "--inventory", deep)
    line = one_error(err)
    assert code == 2 and out == "" and str(deep) in line


def test_deep_yaml_spec_is_one_line(capsys, tmp_path):
    deep = tmp_path / "spec.yaml"
    deep.write_text("a: " + "[" * 300 + "]" * 300 + "\n")
    code, out, err = gv(capsys, "validate", deep)
    line = one_error(err)
    assert code == 2 and f"{deep}:1:" in line and "nested" in line


# ---------------------------------------------------------------------------- bounded messages
def test_ten_megabyte_string_makes_a_short_line(capsys, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("server: vllm", "server: " + "x" * 10_000_000))
    code, out, err = gv(capsys, "values", spec, "-o", tmp_path / "v.yaml")
    assert code == 2
    line = one_error(err)
    assert len(line) < MAX_MESSAGE + 200 and "..." in line and f"{spec}:" in line


def test_ten_megabyte_key_makes_a_short_line(capsys, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC + "k" * 10_000_000 + ": 1\n")
    code, out, err = gv(capsys, "values", spec, "-o", tmp_path / "v.yaml")
    line = one_error(err)
    assert code == 2 and len(line) < MAX_MESSAGE + 200


# ---------------------------------------------------------------------------- references
def _spec_with_topology(tmp_path: Path, ref: str) -> Path:
    text = SPEC
    pool = "gpusPerNode: 4, nodes: 1}"
    assert pool in text
    spec = tmp_path / "spec.yaml"
    spec.write_text(text.replace(pool, f"gpusPerNode: 4, nodes: 1, topology: {{file: {json.dumps(ref)}}}}}"))
    return spec


@pytest.mark.parametrize("ref", ["/etc/shadow", "../outside.txt", "/etc/passwd"])
def test_topology_file_outside_the_spec_folder_refused(capsys, tmp_path, ref):
    (tmp_path / "outside.txt").write_text("secret")
    sub = tmp_path / "sub"
    sub.mkdir()
    spec = _spec_with_topology(sub, ref)
    code, out, err = gv(capsys, "values", spec, "-o", sub / "v.yaml")
    line = one_error(err)
    assert code == 2 and "outside the spec's folder" in line
    assert f"{spec}:" in line and "cluster.nodePools[0].topology.file" in line
    assert "secret" not in err and "root:" not in err


def test_topology_symlink_escaping_the_folder_refused(capsys, tmp_path):
    (tmp_path / "topo.txt").symlink_to("/etc/passwd")
    spec = _spec_with_topology(tmp_path, "topo.txt")
    code, out, err = gv(capsys, "validate", spec)
    assert code == 1 and "outside the spec's folder" in out


def test_topology_fifo_refused_not_blocking(capsys, tmp_path):
    os.mkfifo(tmp_path / "topo.txt")
    spec = _spec_with_topology(tmp_path, "topo.txt")
    code, out, err = gv(capsys, "values", spec, "-o", tmp_path / "v.yaml")
    line = one_error(err)
    assert code == 2 and "is not a regular file" in line
    assert not (tmp_path / "v.yaml").exists()


def test_outside_allowed_by_the_option(capsys, tmp_path, monkeypatch):
    """Control: the environment option lifts the folder rule (the file is then read and
    rejected for its content, not its place)."""
    (tmp_path / "outside.txt").write_text("not a topology matrix\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    spec = _spec_with_topology(sub, "../outside.txt")
    monkeypatch.setenv("GPUVALUES_ALLOW_FILES_OUTSIDE_SPEC", "1")
    code, out, err = gv(capsys, "values", spec, "-o", sub / "v.yaml")
    assert "outside the spec's folder" not in err


# ---------------------------------------------------------------------------- kube versions
def test_unsupported_kubernetes_version_is_placed(capsys, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace('"1.34.0"', '"1.999.0"'))
    code, out, err = gv(capsys, "values", spec, "-o", tmp_path / "v.yaml")
    line = one_error(err)
    assert code == 2 and line.startswith(f"gpuvalues: error: {spec}:2:20: kubernetesVersion: "
                                         "Kubernetes 1.999.0 has no bundled API schemas")
    assert not (tmp_path / "v.yaml").exists()
    code, out, err = gv(capsys, "validate", spec)
    assert code == 1 and f"{spec}:2:20: kubernetesVersion:" in out


def test_supported_versions_come_from_kubernetes_validate():
    from importlib import resources

    from gpuvalues import kube
    names = [p.name for p in resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema").iterdir()]
    minors = kube.supported_kube_minors()
    assert minors and all(f"v1.{m}.0-local-strict" in names for m in minors)
    assert kube.unsupported_kube_version(f"1.{minors[-1]}.3") is None
    assert "no bundled API schemas" in kube.unsupported_kube_version(f"1.{minors[-1] + 1}.0")
    with pytest.raises(Exception, match="no bundled API schemas"):
        kube.supported_kube_minor("1.999.0")


# ---------------------------------------------------------------------------- kubeconfig
@pytest.mark.parametrize("content, words", [
    ("clusters: [\n", "invalid YAML"),
    ("- just\n- a list\n", "expected a YAML mapping"),
    ("apiVersion: v1\nclusters: 3\ncontexts: []\nusers: []\ncurrent-context: x\n", "cannot load kubeconfig"),
])
def test_kubeconfig_errors_are_one_line(capsys, tmp_path, content, words):
    kc = tmp_path / "kubeconfig"
    kc.write_text(content)
    code, out, err = gv(capsys, "inventory", "--kubeconfig", kc)
    line = one_error(err)
    assert code == 2 and words in line and str(kc) in line


def test_kubeconfig_fifo_refused(capsys, tmp_path):
    kc = tmp_path / "kubeconfig"
    os.mkfifo(kc)
    code, out, err = gv(capsys, "inventory", "--kubeconfig", kc)
    assert code == 2 and "FIFO" in one_error(err)
