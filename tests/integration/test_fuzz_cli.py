"""Fuzz the CLI's bad-input contract (issue 14) with hypothesis, on the real CLI in
subprocesses: hostile specs, values files, inventories and output paths (symlinks, FIFOs,
devices, huge numbers, deep nesting, aliases, bad UTF-8, NUL bytes, long strings).

The contract for every run that fails: exit 2 (validate: 1 for findings), exactly one
stderr line `gpuvalues: error: <file>...` naming the file (with line:col when the problem
is inside a file) -- or, for a validation failure, one such placed line per finding --
no traceback, and nothing written (the output folder is unchanged).
Bounded: about 45 subprocesses in all, so the file runs in about a minute.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.unit.test_hostile_reads import SPEC, bomb

GV = str(ROOT / ".venv" / "bin" / "gpuvalues")
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# Values put where the spec has `peak: 6` / `server: vllm`: numbers and strings that hit
# every limit (range, overflow, length, type).
_VALUES = st.one_of(
    st.sampled_from(["1e308", "1e400", "-1", "1e-300", "0", ".inf", ".nan", "0x7fffffffffffffffff",
                     "99999999999999999999999", "~", "yes", "'x'", "!!binary AAAA", "*nope",
                     "[1, 2]", "{a: 1}", "<<: 3"]),
    st.integers(-(10 ** 30), 10 ** 30).map(str),
    st.text(min_size=1, max_size=40).map(lambda s: '"' + s.replace("\\", "").replace('"', "") + '"'),
    st.integers(10_000, 2_000_000).map(lambda n: "x" * n),
)


def _content_cases():
    """(bytes of a hostile spec, whether the problem has a position in the file)."""
    base = SPEC
    return st.one_of(
        _VALUES.map(lambda v: (base.replace("peak: 6", f"peak: {v}").encode(), True)),
        _VALUES.map(lambda v: (base.replace("server: vllm", f"server: {v}").encode(), True)),
        st.integers(250, 20_000).map(lambda d: (("a: " + "[" * d + "]" * d + "\n").encode(), True)),
        st.integers(5, 9).map(lambda lv: (bomb(levels=lv).encode(), True)),
        st.binary(min_size=1, max_size=3).filter(lambda b: not _utf8(b)).map(
            lambda b: (base.encode()[:40] + b + base.encode()[40:], True)),
        st.integers(0, len(base) - 1).map(lambda i: (base.encode()[:i] + b"\x00" + base.encode()[i:], True)),
        st.integers(1, 5).map(lambda n: ((base + "---\n") * n + base).encode()).map(lambda b: (b, True)),
        st.just((base.replace("sharing: whole", "sharing: whole\nsharing: mig").encode(), True)),
        st.just((b"", True)),
        st.just((b"- a\n- b\n", True)),
    )


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _check(proc: subprocess.CompletedProcess, shown: str, out_dir: Path, before: list[str],
           *, placed: bool, findings_ok: bool = False) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert sorted(os.listdir(out_dir)) == before, "something was written"
    if proc.returncode == 0:
        return
    if findings_ok and proc.returncode == 1:
        return
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if not re.fullmatch(r"\d+ errors?, \d+ warnings?", line)]
    where = re.escape(shown) + (r":\d+(:\d+)?: " if placed else r"(:\d+(:\d+)?)?: ")
    if len(lines) > 1:
        # Validation failures list every finding, one placed line each (`[GVnnn]` codes):
        # the CLI's documented form for ValidationFailed; anything else is one line.
        assert all(re.match(r"gpuvalues: error: " + re.escape(shown) + r":\d+:\d+: .*\[GV\d{3}\]", l)
                   for l in lines), proc.stderr[:2000]
    assert lines and all(len(line) < 5000 for line in lines)
    assert re.match(r"gpuvalues: error: " + where, lines[0]), lines[0]


def _run(*args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([GV, *map(str, args)], capture_output=True, text=True, timeout=timeout)


@settings(SETTINGS, max_examples=25)
@given(case=_content_cases(),
       command=st.sampled_from(["values", "validate", "validate --values", "inventory", "update"]))
def test_hostile_file_contents(tmp_path_factory, case, command):
    """The same hostile bytes as a spec, a values file, an inventory and an update target."""
    data, placed = case
    work = tmp_path_factory.mktemp("spec")
    spec = work / "input.yaml"
    spec.write_bytes(data)
    out = work / "out"
    out.mkdir()
    args = {"values": ["values", spec, "-o", out / "values.yaml"], "validate": ["validate", spec],
            "validate --values": ["validate", "--values", spec],
            "inventory": ["inventory", "--inventory", spec, "-o", out / "inv.yaml"],
            "update": ["update", spec, "--set", "replicaCount=2"]}[command]
    proc = _run(*args)
    if command == "update" and proc.returncode != 0:
        assert spec.read_bytes() == data, "update changed a file it refused"
    _check(proc, str(spec), out, [], placed=placed and command != "inventory",
           findings_ok=command.startswith("validate"))


def _make_path(kind: str, where: Path) -> Path:
    """A hostile input path of the given kind."""
    p = where / "input.yaml"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "zero":
        p.symlink_to("/dev/zero")
    elif kind == "loop":
        p.symlink_to(p.name)
    elif kind == "dangling":
        p.symlink_to("nowhere.yaml")
    elif kind == "unreadable":
        p.write_text(SPEC)
        os.chmod(p, 0)
    elif kind == "missing":
        pass
    return p


_PATH_KINDS = ["fifo", "dir", "zero", "loop", "dangling", "missing"] + \
    (["unreadable"] if os.geteuid() != 0 else [])


@SETTINGS
@given(kind=st.sampled_from(_PATH_KINDS),
       command=st.sampled_from(["values", "validate", "plan", "topo", "simulate", "inventory", "update"]))
def test_hostile_input_paths(tmp_path_factory, kind, command):
    work = tmp_path_factory.mktemp("path")
    out = work / "out"
    out.mkdir()
    path = _make_path(kind, work)
    args = {"values": ["values", path, "-o", out / "v.yaml"], "validate": ["validate", path],
            "plan": ["plan", path], "topo": ["topo", path],
            "simulate": ["simulate", path, "--replica-rps", "3"],
            "inventory": ["inventory", "--inventory", path, "-o", out / "inv.yaml"],
            "update": ["update", path, "--set", "replicaCount=2"]}[command]
    proc = _run(*args, timeout=30)
    assert proc.returncode == 2
    _check(proc, str(path), out, [], placed=False)


@SETTINGS
@given(kind=st.sampled_from(["full", "link-full", "dir", "missing-dir", "file-as-dir"]),
       command=st.sampled_from(["values", "inventory"]))
def test_hostile_output_paths(tmp_path_factory, kind, command):
    work = tmp_path_factory.mktemp("out")
    spec = work / "spec.yaml"
    spec.write_text(SPEC)
    inv = work / "nodes.json"
    inv.write_text('{"kind": "Node", "metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "1"}}}')
    out = work / "out"
    out.mkdir()
    target = {"full": Path("/dev/full"), "link-full": out / "link", "dir": out,
              "missing-dir": out / "no" / "such" / "v.yaml", "file-as-dir": spec / "v.yaml"}[kind]
    if kind == "link-full":
        target.symlink_to("/dev/full")
    before = sorted(os.listdir(out))
    args = ["values", spec, "-o", target] if command == "values" else \
        ["inventory", "--inventory", inv, "-o", target]
    if kind == "dir" and command == "values":
        return                       # `values -o DIR` writes per-workload files: allowed
    proc = _run(*args)
    assert proc.returncode == 2, proc.stderr
    _check(proc, str(target), out, before, placed=False)
    if kind in ("full", "link-full"):
        assert os.stat("/dev/full").st_rdev == os.makedev(1, 7)
