"""`render -o DIR` through the real helm (issue 14): the directory is swapped in whole, so
a second render leaves none of the first one's objects (an HPA beside a ScaledObject would
make `kubectl apply -f DIR` create two autoscalers for one Deployment), a directory
gpuvalues did not write is refused, and a failed render leaves the old one intact."""
from __future__ import annotations

import os

import pytest

from gpuvalues import cli
from gpuvalues.io.files import TREE_MARKER
from tests.conftest import ROOT

HPA_SPEC = ROOT / "examples" / "single-a100.yaml"
KEDA_SPEC = ROOT / "examples" / "keda.yaml"


@pytest.fixture(autouse=True)
def _helm4(monkeypatch):
    monkeypatch.setenv("GPUVALUES_HELM", str(ROOT / ".tools" / "bin" / "helm"))


def render(capsys, spec, out):
    code = cli.main(["render", str(spec), "-o", str(out)])
    return code, capsys.readouterr()


def kinds(out) -> set[str]:
    """Kinds of the written objects (files are `[<release>_]<kind>-<name>.yaml`)."""
    return {name.split("_", 1)[-1].split("-")[0] for name in os.listdir(out) if name != TREE_MARKER}


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("gpuvalues: error: ")]


def test_second_render_replaces_the_first(capsys, tmp_path):
    out = tmp_path / "manifests"
    code, _ = render(capsys, HPA_SPEC, out)
    assert code == 0 and "horizontalpodautoscaler" in kinds(out)
    code, _ = render(capsys, KEDA_SPEC, out)
    assert code == 0
    assert "scaledobject" in kinds(out) and "horizontalpodautoscaler" not in kinds(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifests"]      # no temp dirs


def test_foreign_directory_refused(capsys, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "deployment.yaml").write_text("keep: me\n")
    code, (stdout, err) = render(capsys, HPA_SPEC, out)
    assert code == 2 and len(errors(err)) == 1
    assert "non-empty directory gpuvalues did not write" in errors(err)[0]
    assert os.listdir(out) == ["deployment.yaml"]


def test_failed_render_keeps_the_old_directory(capsys, tmp_path):
    out = tmp_path / "manifests"
    assert render(capsys, HPA_SPEC, out)[0] == 0
    before = sorted(os.listdir(out))
    bad = tmp_path / "bad.yaml"
    bad.write_text(HPA_SPEC.read_text().replace("server: vllm", "server: nope"))
    code, (_, err) = render(capsys, bad, out)
    assert code == 2 and len(errors(err)) == 1
    assert sorted(os.listdir(out)) == before
