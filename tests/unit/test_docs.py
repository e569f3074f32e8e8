"""README documents what users rely on: every error code, the public API."""
from __future__ import annotations

import gpuvalues
from gpuvalues.errors import CODES
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_lists_every_error_code_as_registered():
    rows = [line for line in README.splitlines() if line.startswith("| GV")]
    assert rows == [f"| {c} | {t} | {h} |" for c, (t, h) in CODES.items()]


def test_every_public_name_resolves_and_the_readme_names_the_entry_points():
    for name in gpuvalues.__all__:
        assert getattr(gpuvalues, name) is not None, name
    for name in ("load_spec", "build_fleet", "check_fleet", "expected_nodes", "render_values"):
        assert f"gpuvalues.{name}" in README, name
