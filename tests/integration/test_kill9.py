"""What README promises about outputs, under a real SIGKILL (issue 25).

`values -o DIR --artifacts DIR2` writes every file or none: a real `gpuvalues` process is
killed with SIGKILL (by itself, at a named step of `gpuvalues.io.files`:
GPUVALUES_TEST_CRASH_AT) while it replaces the eight files of an earlier real run. Right
after the kill every file is whole (old or new); the next write into either folder
(`files.recover`, which every write runs first) leaves all eight old (killed before the
journal's commit) or all eight new (after it), and no journal, pointer or temp file. A
`render -o DIR` killed mid-swap leaves the old or the new directory whole, and the next
render removes the `.DIR.new-*` folder. Bounded: 11 killed processes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gpuvalues import cli
from gpuvalues.io import files
from tests.conftest import ROOT

GV = str(ROOT / ".venv" / "bin" / "gpuvalues")
MIXED = ROOT / "examples" / "mixed-a100-h100-mig.yaml"


def _specs(tmp: Path) -> tuple[Path, Path]:
    old = tmp / "old.yaml"
    old.write_text(MIXED.read_text())
    new = tmp / "new.yaml"        # the same fleet at another load: the workloads' values files differ
    new.write_text(MIXED.read_text().replace("peak: ", "peak: 2").replace("base: ", "base: 2"))  # 3 files differ
    return old, new


def _snapshot(*folders: Path) -> dict[str, bytes]:
    return {f"{d.name}/{p.name}": p.read_bytes() for d in folders for p in sorted(d.iterdir())
            if not p.name.startswith(".")}


def _leftovers(*folders: Path) -> list[str]:
    return [p.name for d in folders for p in d.iterdir() if p.name.startswith(".")]


def _values(spec: Path, out: Path, nodes: Path, crash: str | None = None):
    """The runs that are not killed run in this process (the same CLI, without start-up)."""
    argv = ["-q", "values", str(spec), "-o", f"{out}/", "--artifacts", str(nodes)]
    if crash is None:
        return subprocess.CompletedProcess(argv, cli.main(argv))
    env = dict(os.environ, GPUVALUES_TEST_CRASH_AT=crash)
    return subprocess.run([GV, *argv], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """The old and the new eight files, each from a real run into fresh folders."""
    tmp = tmp_path_factory.mktemp("states")
    old, new = _specs(tmp)
    result = {}
    for name, spec in (("old", old), ("new", new)):
        out, nodes = tmp / name / "out", tmp / name / "nodes"
        assert _values(spec, out, nodes).returncode == 0
        result[name] = _snapshot(out, nodes)
    assert len(result["old"]) == 8
    differ = [k for k in result["old"] if result["old"][k] != result["new"][k]]
    assert len(differ) >= 3, differ          # a mix of old and new is visible
    return old, new, result


# journal written; files staged (first, middle, last); committed; renamed (first, middle, last)
POINTS = ["journal", "staged-0", "staged-4", "staged-7", "committed", "renamed-0", "renamed-3", "renamed-7"]


@pytest.mark.parametrize("point", POINTS)
def test_values_killed_at_any_step_is_all_old_or_all_new_after_the_next_write(tmp_path, states, point):
    old_spec, new_spec, want = states
    out, nodes = tmp_path / "out", tmp_path / "nodes"
    assert _values(old_spec, out, nodes).returncode == 0
    before = _snapshot(out, nodes)
    proc = _values(new_spec, out, nodes, crash=point)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)
    now = _snapshot(out, nodes)
    assert now.keys() == before.keys()
    assert all(v in (want["old"][k], want["new"][k]) for k, v in now.items()), "a torn file"
    assert _leftovers(out, nodes), "the kill left no journal: the step was not reached"
    committed = point.startswith(("committed", "renamed"))
    if not committed:
        assert now == before                      # nothing replaced before the commit
    # The next write into either folder finishes the transaction first. Odd points recover
    # through DIR2's pointer alone, even ones through DIR's journal.
    folder = nodes if POINTS.index(point) % 2 else out
    files.recover(folder)
    assert _snapshot(out, nodes) == (want["new"] if committed else want["old"])
    assert _leftovers(out, nodes) == []
    assert _values(new_spec, out, nodes).returncode == 0       # and a real later run is clean
    assert _snapshot(out, nodes) == want["new"] and _leftovers(out, nodes) == []


def test_a_live_write_is_not_recovered_by_another(tmp_path, states):
    """Negative control for the flock: while a writer holds its journal (stopped between
    staging and commit), another process's recover() leaves its temps and journal alone."""
    old_spec, new_spec, _ = states
    out, nodes = tmp_path / "out", tmp_path / "nodes"
    assert _values(old_spec, out, nodes).returncode == 0
    script = ("import os, signal\nfrom gpuvalues.io import files\n"
              "files._step = lambda name: os.kill(os.getpid(), signal.SIGSTOP) if name == 'staged-7' else None\n"
              f"from gpuvalues import cli\ncli.main(['-q', 'values', {str(new_spec)!r}, '-o', {str(out)!r} + '/', "
              f"'--artifacts', {str(nodes)!r}])\n")
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "python"), "-c", script], cwd=ROOT)
    try:
        for _ in range(1200):                            # journal, pointer, eight temps
            if len(_leftovers(out, nodes)) >= 10 or proc.poll() is not None:
                break
            time.sleep(0.05)
        left = sorted(_leftovers(out, nodes))
        assert len(left) == 10, left
        assert files.recover(out) == [] and files.recover(nodes) == []
        assert sorted(_leftovers(out, nodes)) == left
    finally:
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(60) == 0
    assert _leftovers(out, nodes) == []


@pytest.mark.parametrize("point", ["tree-built", "tree-swapped"])
def test_render_killed_mid_swap_leaves_a_whole_directory_and_the_next_render_cleans_up(tmp_path, point):
    spec = ROOT / "examples" / "single-a100.yaml"
    out = tmp_path / "manifests"
    assert cli.main(["-q", "render", str(spec), "-o", str(out)]) == 0
    (out / "gpu-inference_Stale-object.yaml").write_text("kind: Stale\n")   # what the old render had
    marker = files.TREE_MARKER
    before = sorted(os.listdir(out))
    env = dict(os.environ, GPUVALUES_TEST_CRASH_AT=point)
    proc = subprocess.run([GV, "-q", "render", str(spec), "-o", str(out)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    after = sorted(os.listdir(out))
    assert marker in after
    assert after == before if point == "tree-built" else "gpu-inference_Stale-object.yaml" not in after
    assert [n for n in os.listdir(tmp_path) if n.startswith(".manifests.")], "no leftover to clean"
    assert cli.main(["-q", "render", str(spec), "-o", str(out)]) == 0
    assert [n for n in os.listdir(tmp_path) if n != "manifests"] == []
