"""The foundation: pinned tools, the CLI entry point and the idempotent setup."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpuvalues import __version__
from gpuvalues.errors import GpuValuesError, ToolNotFoundError
from gpuvalues.render.tools import find_helm
from tests.conftest import ROOT, run


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


def test_find_helm_order(tmp_path, monkeypatch):
    fake = tmp_path / "myhelm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    other = tmp_path / "envhelm"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("GPUVALUES_HELM", str(other))
    assert find_helm(str(fake)) == str(fake)          # --helm wins
    assert find_helm() == str(other)                  # then $GPUVALUES_HELM
    monkeypatch.delenv("GPUVALUES_HELM")
    assert find_helm() == str(ROOT / ".tools" / "bin" / "helm")   # then .tools/bin
    assert find_helm(major=3) == str(ROOT / ".tools" / "bin" / "helm3")


def test_find_helm_missing_is_a_user_error(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUVALUES_HELM", str(tmp_path / "nope"))
    with pytest.raises(ToolNotFoundError) as exc:
        find_helm()
    assert isinstance(exc.value, GpuValuesError) and isinstance(exc.value, ValueError)
    assert "nope" in str(exc.value)
    # The CLI turns it into one line and exit code 2, no traceback.
    env = dict(os.environ, GPUVALUES_HELM=str(tmp_path / "nope"))
    out = run([str(ROOT / ".venv" / "bin" / "gpuvalues"), "render"], env=env)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_setup_second_run_installs_nothing():
    start = time.monotonic()
    out = run(["bash", str(ROOT / "ci" / "setup.sh")])
    elapsed = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    installs = [l for l in out.stdout.splitlines() if l.startswith("setup:") and "ready:" not in l]
    assert installs == [], installs
    assert elapsed < 30
