"""The install is what setup.cfg declares and ci/constraints.txt locks (issue 28).

- every third-party module that gpuvalues/ imports (lazy imports inside functions too) comes
  from a distribution that setup.cfg declares, with a minimum version and a reason;
- the venv the tests run in holds exactly the locked versions, nothing more (ci/setup.sh
  installs with the lock as pip's constraints and makes the venv anew when it changes).
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

PACKAGE = ROOT / "gpuvalues"
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_top_modules(files) -> set[str]:
    """Top-level module names of every `import x` / `from x import y` (absolute only)."""
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def declared() -> dict[str, list[tuple[str, str, str]]]:
    """setup.cfg's requirements per section: [(distribution, specifier, comment above)].
    Read as text: configparser drops the comment lines that give each requirement's reason."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    ini_section, key, comment = "", None, ""
    for raw in (ROOT / "setup.cfg").read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            ini_section, key = line, None
            continue
        if raw and not raw[0].isspace():          # a new `key = value` line
            name = line.split("=")[0].strip()
            key = (name if (ini_section, name) == ("[options]", "install_requires")
                   or ini_section == "[options.extras_require]" else None)
            comment = ""
            continue
        if key is None or not line:
            continue
        if line.startswith("#"):
            comment = line
            continue
        m = _REQ.match(line)
        assert m, f"setup.cfg {key}: cannot read requirement {line!r}"
        out.setdefault(key, []).append((m.group(1), m.group(2).strip(), comment))
        comment = ""
    assert {"install_requires", "test"} <= set(out), f"setup.cfg read wrongly: {sorted(out)}"
    return out


def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "ci" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"ci/constraints.txt: {line!r} is not an exact pin"
            pins[_norm(name)] = version.strip()
    return pins


def lock_mismatches(installed: dict[str, str], pins: dict[str, str]) -> list[str]:
    """What differs between the venv and the lock (gpuvalues itself is not locked)."""
    out = []
    for name, version in sorted(installed.items()):
        if name == "gpuvalues":
            continue
        if name not in pins:
            out.append(f"{name}=={version} is installed but not in the lock")
        elif pins[name] != version:
            out.append(f"{name}=={version} is installed; the lock says {pins[name]}")
    return out


def test_every_requirement_has_a_minimum_and_a_reason():
    for section, reqs in declared().items():
        for name, spec, comment in reqs:
            assert spec.startswith(">="), f"setup.cfg [{section}] {name}: give a minimum version (>=)"
            assert comment, f"setup.cfg [{section}] {name}: say in a comment above it why it is needed"


def test_every_imported_package_is_declared():
    dists = md.packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    names = imported_top_modules(PACKAGE.rglob("*.py")) - stdlib - {"gpuvalues"}
    assert names, "the scan found no third-party import: it is broken"
    declared_names = {_norm(n) for reqs in declared().values() for n, _, _ in reqs}
    missing = {}
    for module in sorted(names):
        owners = {_norm(d) for d in dists.get(module, [])}
        if not owners & declared_names:
            missing[module] = sorted(owners) or ["(not installed)"]
    assert not missing, f"imported by gpuvalues/ but not declared in setup.cfg: {missing}"


def test_a_module_nobody_declares_is_caught(tmp_path):
    """Negative control: the scan sees a lazy import inside a function."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    import sortedcontainers\n    from attr import s\n")
    assert {"sortedcontainers", "attr"} <= imported_top_modules([f])


def test_the_venv_holds_exactly_the_locked_versions():
    installed = {_norm(d.metadata["Name"]): d.version for d in md.distributions()}
    assert "pytest" in installed, "no distribution found: the scan is broken"
    assert not lock_mismatches(installed, locked()), (
        "the venv differs from ci/constraints.txt (run ci/setup.sh; refresh the lock with ci/lock.sh): "
        + "; ".join(lock_mismatches(installed, locked())))


def test_a_drift_from_the_lock_is_caught():
    pins = {"numpy": "2.4.6", "pyyaml": "6.0.4"}
    assert lock_mismatches({"numpy": "2.4.6", "pyyaml": "6.0.4", "gpuvalues": "0"}, pins) == []
    assert lock_mismatches({"numpy": "2.5.0"}, pins) == ["numpy==2.5.0 is installed; the lock says 2.4.6"]
    assert lock_mismatches({"left-over": "1"}, pins) == ["left-over==1 is installed but not in the lock"]
