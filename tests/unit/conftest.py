"""tests/unit is pure: no external process (helm, promtool, the CLI as a process, scripts).
The guard below makes any attempt fail, so the marker's promise is checked, not hoped;
tests that need a process live in tests/integration (or chart, e2e, oracle)."""
from __future__ import annotations

import subprocess

import pytest


@pytest.fixture(autouse=True)
def _no_external_process(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a unit test started an external process: {args[:1]!r}; "
                             "move the test to tests/integration")
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
