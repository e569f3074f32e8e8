"""Fuzz the CLI's bad-input contract (issue 14) with hypothesis, on the real CLI in
subprocesses: hostile specs, values files, inventories and output paths (symlinks, FIFOs,
devices, huge numbers, deep nesting, aliases, bad UTF-8, NUL bytes, long strings).

The contract for every run that fails: exit 2 (validate: 1 for findings), exactly one
stderr line `gpuvalues: error: <file>...` naming the file (with line:col when the problem
is inside a file) -- or, for a validation failure, one such placed line per finding --
no traceback, and nothing written (the output folder is unchanged).
Also the newer readers (issue 25): hostile values in a `--current` layout's node names,
labels and counts, and anywhere in a `kubectl get nodes -o json` list. Every refusal line
ends in a registered `[GVxxx]` code. Bounded: about 65 subprocesses in all.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvalues.errors import CODES
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
        assert all(re.match(r"gpuvalues: error: " + re.escape(shown) + r":\d+:\d+: .*\[GV\d{3}\]", ln)
                   for ln in lines), proc.stderr[:2000]
    assert lines and all(len(line) < 5000 for line in lines)
    assert re.match(r"gpuvalues: error: " + where, lines[0]), lines[0]
    code = re.search(r"\[(GV\d{3})\]", lines[0])
    assert code and code.group(1) in CODES, lines[0]


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
    proc = _run(*args)
    if kind == "dir" and command == "values":
        # `values -o DIR` writes one file per release into an existing folder: exactly those
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert sorted(os.listdir(out)) == ["gpu-platform.values.yaml", "llama-8b.values.yaml"]
        return
    assert proc.returncode == 2, proc.stderr
    _check(proc, str(target), out, before, placed=False)
    if kind in ("full", "link-full"):
        assert os.stat("/dev/full").st_rdev == os.makedev(1, 7)


CURRENT = (ROOT / "examples" / "current" / "mixed-a100-h100-mig.yaml").read_text()
MIXED = ROOT / "examples" / "mixed-a100-h100-mig.yaml"
# Where a hostile value goes in the current layout: a node's name, a label value, its
# pool, its pod count, a MIG count, a device index.
_CURRENT_SLOTS = ["  a100-mig-1:", "      nvidia.com/mig.config: a100-mig\n", "    pool: a100-mig\n",
                  "    pods: 9", "      1g.10gb: 4", "    - 0\n"]


def _current_case(slot: str, value: str) -> str:
    if slot == "  a100-mig-1:":
        return CURRENT.replace(slot, f"  {value}:", 1)
    key = slot.strip().split(":")[0].lstrip("- ")
    indent = slot[:len(slot) - len(slot.lstrip())]
    new = f"{indent}- {value}\n" if slot.strip().startswith("-") else f"{indent}{key}: {value}" + \
        ("\n" if slot.endswith("\n") else "")
    return CURRENT.replace(slot, new, 1)


@settings(SETTINGS, max_examples=10)
@given(slot=st.sampled_from(_CURRENT_SLOTS), value=_VALUES)
def test_hostile_current_layouts(tmp_path_factory, slot, value):
    work = tmp_path_factory.mktemp("current")
    current = work / "current.yaml"
    current.write_text(_current_case(slot, value))
    out = work / "out"
    out.mkdir()
    proc = _run("plan", MIXED, "--current", current, "--mig-parted-out", out / "mig.yaml")
    _check(proc, str(current), out, ["mig.yaml"] if proc.returncode == 0 else [], placed=True)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(10 ** 30), 10 ** 30) | st.floats() |
                     st.text(max_size=30) | st.sampled_from(["1e400", "$(id)", "a" * 300, "x\ny", "-1", "1500m"]),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_NODE_SLOTS = [("metadata", "name"), ("metadata", "labels"), ("metadata", "labels", "nvidia.com/gpu.count"),
               ("metadata", "labels", "nvidia.com/mig-1g.10gb.count"), ("status", "capacity"),
               ("status", "capacity", "nvidia.com/gpu"), ("status", "allocatable", "cpu"), ("spec", "taints"),
               ("spec",), ("status",), ("metadata",)]


@settings(SETTINGS, max_examples=10)
@given(slot=st.sampled_from(_NODE_SLOTS), value=_JSON)
def test_hostile_kubectl_nodes(tmp_path_factory, slot, value):
    import json

    item = {"kind": "Node", "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.count": "4"}},
            "spec": {}, "status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"cpu": "8"}}}
    d = item
    for k in slot[:-1]:
        d = d[k]
    d[slot[-1]] = value
    work = tmp_path_factory.mktemp("nodes")
    nodes = work / "nodes.json"
    nodes.write_text(json.dumps({"kind": "List", "items": [item]}, indent=1))
    out = work / "out"
    out.mkdir()
    proc = _run("inventory", "--inventory", nodes, "-o", out / "inv.yaml")
    _check(proc, str(nodes), out, ["inv.yaml"] if proc.returncode == 0 else [], placed=True)
