"""The foundation as processes: pinned tools, the CLI entry point, the idempotent setup.
(tests/unit runs none of these: it starts no external process.)"""
from __future__ import annotations

import json
import os
import time

import pytest

from gpuvalues import __version__
from gpuvalues.checks.fleet import build_checked
from gpuvalues.checks.spec import load_spec
from tests.conftest import ROOT, run

GV = str(ROOT / ".venv" / "bin" / "gpuvalues")
EXAMPLE = ROOT / "examples" / "single-a100.yaml"
BAD = ROOT / "tests" / "unit" / "data" / "bad"


@pytest.mark.parametrize("binary, expected", [("helm", "v4.1.4"), ("helm3", "v3.17.2")])
def test_pinned_helm_versions(binary, expected):
    out = run([str(ROOT / ".tools" / "bin" / binary), "version", "--template", "{{.Version}}"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


def test_promtool_installed(promtool):
    out = run([promtool, "--version"])
    assert out.returncode == 0
    assert "promtool, version 2." in out.stdout + out.stderr


def test_cli_version_and_help():
    gv = str(ROOT / ".venv" / "bin" / "gpuvalues")
    out = run([gv, "--version"])
    assert out.returncode == 0 and out.stdout.strip() == f"gpuvalues {__version__}"
    out = run([gv, "--help"])
    assert out.returncode == 0 and "render" in out.stdout


def test_setup_second_run_installs_nothing():
    start = time.monotonic()
    out = run(["bash", str(ROOT / "ci" / "setup.sh")])
    elapsed = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    installs = [ln for ln in out.stdout.splitlines() if ln.startswith("setup:") and "ready:" not in ln]
    assert installs == [], installs
    assert elapsed < 30



def test_missing_helm_is_one_line_exit_2(tmp_path):
    """The CLI turns a missing helm into one line and exit code 2, no traceback."""
    env = dict(os.environ, GPUVALUES_HELM=str(tmp_path / "nope"))
    out = run([str(ROOT / ".venv" / "bin" / "gpuvalues"), "render"], env=env)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_stdin_and_debug_via_the_real_entry_point():
    proc = run([GV, "values", "-", "--output", "json"], input=EXAMPLE.read_text())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {r.name: r.values for r in
                                       build_checked(load_spec(EXAMPLE)).releases}
    proc = run([GV, "validate", "-"], input="apiVersion: [\n")
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpuvalues: error: <stdin>:2:1: invalid YAML")
    proc = run([GV, "values", str(BAD / "wrong-type.yaml"), "--debug"])
    assert proc.returncode == 2 and "Traceback" in proc.stderr


# What each command may not import (issue 15: `--help` and `validate` start in < 150 ms,
# < 250 ms with MIG): jsonschema only to word a schema error, numpy and HiGHS only to plan
# MIG, ruamel.yaml only for a file YAML 1.1 and 1.2 may read differently, PyYAML not for
# `--help`.
_HEAVY = ("jsonschema", "referencing", "numpy", "highspy", "yaml", "ruamel.yaml")


@pytest.mark.parametrize("args, allowed", [
    (["--help"], ()),
    (["validate", "examples/single-a100.yaml", "-q"], ("yaml",)),
    (["validate", "examples/serving-fleet.yaml", "--output", "json"], ("yaml",)),
    (["validate", "examples/mixed-a100-h100-mig.yaml", "-q"], ("yaml", "numpy", "highspy")),
    (["validate", "--values", "examples/values/gateway.yaml", "-q"], ("yaml", "ruamel.yaml")),
    (["validate", "tests/unit/data/bad/wrong-type.yaml", "-q"],
     ("yaml", "ruamel.yaml", "jsonschema", "referencing")),
])
def test_cli_start_up_imports_only_what_the_command_needs(args, allowed):
    code = ("import sys\nfrom gpuvalues.cli import main\nrc = main(sys.argv[1:])\n"
            f"print('\\nIMPORTED', rc, *sorted(m for m in {_HEAVY!r} if m in sys.modules))")
    out = run([str(ROOT / ".venv" / "bin" / "python"), "-c", code, *args], cwd=ROOT)
    line = out.stdout.splitlines()[-1].split()
    assert line[0] == "IMPORTED" and line[1] in ("0", "1"), out.stdout + out.stderr
    assert sorted(set(line[2:]) - set(allowed)) == []
    if "jsonschema" in allowed:     # a schema error: worded by jsonschema, as before
        assert line[1] == "1" and "jsonschema" in line[2:]
