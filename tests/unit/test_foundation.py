"""The foundation: helm lookup order (process-level checks: tests/integration/test_processes.py)."""
from __future__ import annotations


import pytest

from gpuvalues.errors import GpuValuesError, ToolNotFoundError
from gpuvalues.render.tools import find_helm
from tests.conftest import ROOT


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


