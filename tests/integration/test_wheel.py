"""The package as users get it: a wheel, installed non-editable into a fresh venv with only
`pip install <wheel>`, run from a folder outside the checkout. Every example renders (the
schemas, the chart and the catalog come from inside the installed package), and the
public API is importable with its typing marker."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, TOOLS

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, gpuvalues entry point) of a venv holding only the built wheel and
    its dependencies."""
    tmp = tmp_path_factory.mktemp("wheel")
    # build from a copy of the checkout's files (as a clean clone has them): setuptools'
    # build/ folder in a working tree could carry files the tree no longer has
    src = tmp / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        path = ROOT / name
        if not (path.exists() or path.is_symlink()):
            continue                      # deleted in the working tree
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            os.symlink(os.readlink(path), src / name)
        else:
            shutil.copy2(path, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(tmp / "dist"), str(src)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp / "dist").glob("gpuvalues-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                              str(wheel)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    return wheel, venv / "bin" / "python", venv / "bin" / "gpuvalues"


def test_the_wheel_carries_schemas_chart_catalog_and_typing(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("gpuvalues/py.typed", "gpuvalues/data/schemas/spec.schema.json",
                   "gpuvalues/data/schemas/values.schema.json", "gpuvalues/data/chart/Chart.yaml",
                   "gpuvalues/data/chart/values.yaml", "gpuvalues/data/chart/templates/deployment.yaml",
                   "gpuvalues/catalog/gpus/a100-80gb.yaml", "gpuvalues/catalog/gpus/index.json",
                   "gpuvalues/data/examples/a100-small.yaml"):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("tests/", "ci/", ".venv"))]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_installed_cli_renders_every_example_from_outside_the_checkout(installed, tmp_path, example):
    _, _, gv = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUVALUES_", "PYTHON"))}
    env["PATH"] = f"{TOOLS}:{env.get('PATH', '')}"     # helm on PATH, as users have it
    spec = tmp_path / example.name
    spec.write_text(example.read_text())
    if (example.parent / "topology").is_dir():
        (tmp_path / "topology").mkdir(exist_ok=True)
        for f in (example.parent / "topology").iterdir():
            (tmp_path / "topology" / f.name).write_text(f.read_text())
    proc = subprocess.run([str(gv), "render", str(spec), "-q", "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "out").glob("*_deployment-*.yaml"))


def test_the_installed_api_is_the_wheel_not_the_checkout(installed, tmp_path):
    _, python, _ = installed
    code = ("import gpuvalues, gpuvalues.bundle as b; "
            "f = gpuvalues.build_checked(gpuvalues.load_spec(str(b.EXAMPLE_SPEC))); "
            "print(gpuvalues.__file__); print(b.chart_dir()); print([r.name for r in f.releases])")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    module, chart, releases = proc.stdout.splitlines()
    assert "site-packages" in module and str(ROOT) not in module
    assert "site-packages" in chart and (Path(chart) / "Chart.yaml").is_file()
    assert releases == "['gpu-platform', 'qwen']"
