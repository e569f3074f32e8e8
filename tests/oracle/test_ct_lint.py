"""`ct lint` (helm/chart-testing, built by ci/oracle/build.sh with its pinned yamllint and
yamale) over the chart with helm 4 and helm 3, every ci/*-values.yaml scenario included.

helm lint reports a template `fail()` as an INFO line (helm 4: `level=INFO msg="funcMap
fail"`, helm 3: `[INFO] Fail:`) and still passes, so a scenario that cannot render would
be skipped silently. The extra args give every scenario what it needs to render (a
non-default namespace, a Kubernetes version with resource.k8s.io/v1), and the test fails
on any such line."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from tests.oracle import oraclelib as ol

EXTRA_ARGS = "--namespace gpu --kube-version 1.34.0"
_FAIL_LINE = re.compile(r'funcMap fail|\[INFO\] Fail:')


@lru_cache(maxsize=None)
def _ct() -> Path:
    proc = subprocess.run(["bash", str(ol.ORACLE_DIR / "build.sh"), "ct"], capture_output=True, text=True)
    assert proc.returncode == 0, f"ci/oracle/build.sh ct failed:\n{proc.stderr[-4000:]}"
    return ol.CACHE / f"ct-{ol.versions()['CHART_TESTING_VERSION']}"


def ct_lint(helm: str, chart: Path, tmp: Path, extra_args: str | None = EXTRA_ARGS) -> tuple[int, str]:
    """Run `ct lint` on one chart with `helm` (helm or helm3 from .tools) as `helm` on PATH."""
    ct = _ct()
    bindir = tmp / f"path-{helm}"
    bindir.mkdir(exist_ok=True)
    link = bindir / "helm"
    if not link.exists():
        link.symlink_to(ol.ROOT / ".tools" / "bin" / helm)
    cmd = [str(ct / "bin" / "ct"), "lint", "--charts", str(chart),
           "--chart-yaml-schema", str(ct / "etc" / "chart_schema.yaml"),
           "--lint-conf", str(ct / "etc" / "lintconf.yaml"),
           # No network (maintainers are checked against GitHub) and no git history here.
           "--validate-maintainers=false", "--check-version-increment=false"]
    if extra_args is not None:
        cmd += ["--helm-lint-extra-args", extra_args]
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ol.ROOT, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def _problems(rc: int, out: str, chart: Path) -> list[str]:
    problems = [f"ct lint exited {rc}"] if rc else []
    problems += [f"a scenario's fail() became an INFO line: {line.strip()}"
                 for line in out.splitlines() if _FAIL_LINE.search(line)]
    linted = set(re.findall(r'Linting chart with values file "([^"]+)"', out))
    scenarios = {str(p.relative_to(ol.ROOT)) if p.is_relative_to(ol.ROOT) else str(p)
                 for p in (chart / "ci").glob("*-values.yaml")}
    if {Path(s).name for s in linted} != {Path(s).name for s in scenarios}:
        problems.append(f"scenarios not linted: {sorted({Path(s).name for s in scenarios} - {Path(s).name for s in linted})}")
    return problems


@pytest.mark.parametrize("helm", ["helm", "helm3"])
def test_ct_lint_every_scenario(helm, tmp_path):
    rc, out = ct_lint(helm, ol.CHART, tmp_path)
    problems = _problems(rc, out, ol.CHART)
    assert not problems, f"ct lint with {helm}:\n" + "\n".join(problems) + f"\n--- output ---\n{out[-6000:]}"


def test_negative_control_without_extra_args_fail_hides_as_info(tmp_path):
    """Plain `ct lint` passes although platform scenarios fail() in the default namespace:
    the check above must, and does, catch it."""
    rc, out = ct_lint("helm", ol.CHART, tmp_path, extra_args=None)
    assert rc == 0
    assert any("INFO line" in p for p in _problems(rc, out, ol.CHART)), out[-3000:]


def test_negative_control_yamllint_error_fails_ct(tmp_path):
    chart = tmp_path / "gpu-inference"
    shutil.copytree(ol.CHART, chart)
    (chart / "ci" / "broken-values.yaml").write_text("replicaCount: 1\nreplicaCount: 2\n")
    rc, out = ct_lint("helm", chart, tmp_path)
    assert rc != 0 and "duplication of key" in out, out[-3000:]
