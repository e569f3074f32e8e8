"""Shared fixtures. Each test directory is a marker group: tests/unit -> unit,
tests/chart -> chart, tests/integration -> integration, tests/e2e -> e2e, tests/oracle -> oracle, so
`pytest -m chart` runs one group and a plain `pytest` runs them all."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools" / "bin"
CHART = ROOT / "charts" / "gpu-inference"
GROUPS = ("unit", "chart", "integration", "e2e", "oracle")


def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(ROOT / "tests")
        group = rel.parts[0]
        if group in GROUPS:
            item.add_marker(getattr(pytest.mark, group))


def _tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run ci/setup.sh")
    return str(path)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def chart_dir() -> Path:
    return CHART


@pytest.fixture(scope="session")
def helm4() -> str:
    """The pinned Helm 4.1.4 binary."""
    return _tool("helm")


@pytest.fixture(scope="session")
def helm3() -> str:
    """The pinned Helm 3.17.2 binary."""
    return _tool("helm3")


@pytest.fixture(scope="session", params=["helm", "helm3"])
def helm(request) -> str:
    """Each pinned helm in turn (Helm 4, then Helm 3): chart tests run on both."""
    return _tool(request.param)


@pytest.fixture(scope="session")
def promtool() -> str:
    return _tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _tool("prometheus")


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a command, capturing text output, without raising on failure."""
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def write_kubeconfig(path: Path, server: str, *, token: str | None = "x", name: str = "x",
                     insecure: bool = False) -> Path:
    """A kubeconfig at `path` whose one context points at `server` (with a bearer `token`,
    or no credentials when None): what tests that stand up a loopback API server hand
    the code under test."""
    cluster: dict = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": cluster}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": {"token": token} if token is not None else {}}]}))
    return path
