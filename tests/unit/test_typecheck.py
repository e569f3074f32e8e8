"""ci/typecheck.py, the mypy ratchet: its reading of mypy's output and its verdicts."""
from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

_spec = importlib.util.spec_from_file_location("typecheck", ROOT / "ci" / "typecheck.py")
typecheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(typecheck)

OUTPUT = """\
gpuvalues/a.py:3: error: Missing type arguments for generic type "dict"  [type-arg]
gpuvalues/a.py:9:5: error: Function is missing a type annotation  [no-untyped-def]
gpuvalues/a.py:9: note: Use "-> None" if function does not return a value
gpuvalues/b/c.py:1: error: Returning Any  [no-any-return]
Found 3 errors in 2 files (checked 2 source files)
"""


def test_counts_errors_per_file_and_not_notes():
    assert typecheck.counts(OUTPUT) == {"gpuvalues/a.py": 2, "gpuvalues/b/c.py": 1}


def test_a_file_over_its_ceiling_or_new_fails_and_one_below_is_named():
    worse, better = typecheck.compare({"gpuvalues/a.py": 2, "gpuvalues/new.py": 1},
                                      {"gpuvalues/a.py": 1, "gpuvalues/b.py": 4})
    assert worse == ["gpuvalues/a.py: 2 strict-mode errors, the ratchet allows 1",
                     "gpuvalues/new.py: 1 strict-mode errors, the ratchet allows 0"]
    assert better == ["gpuvalues/b.py: 0 (ratchet 4)"]


def test_the_committed_ratchet_reads_and_names_real_files():
    ceilings = typecheck.read_ratchet()
    assert ceilings and all(n > 0 for n in ceilings.values())
    missing = [f for f in ceilings if not (ROOT / f).is_file()]
    assert not missing, f"ci/mypy-ratchet.txt names files that do not exist: {missing}"


def test_strict_files_fail_on_any_error_and_may_not_be_ratcheted():
    """STRICT (the base and catalog files at 0) admits no error and no ratchet entry; a file
    outside it still gets its ceiling (negative control)."""
    assert typecheck.strict("gpuvalues/errors.py") and typecheck.strict("gpuvalues/catalog/__init__.py")
    assert not typecheck.strict("gpuvalues/operations/rollout.py")
    worse, _ = typecheck.compare({"gpuvalues/catalog/__init__.py": 1, "gpuvalues/io/files.py": 3},
                                 {"gpuvalues/io/files.py": 3})
    assert worse == ["gpuvalues/catalog/__init__.py: 1 strict-mode errors, the ratchet allows 0"]
    worse, _ = typecheck.compare({}, {"gpuvalues/kube.py": 2})
    assert worse == ["gpuvalues/kube.py: strict (ci/typecheck.py STRICT), so ci/mypy-ratchet.txt may not list it"]
    assert not [f for f in typecheck.read_ratchet() if typecheck.strict(f)]
