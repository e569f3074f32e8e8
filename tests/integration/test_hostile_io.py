"""The CLI against hostile files, as real subprocesses (issue 14): output paths that are
devices, FIFOs and links; signals mid-write; concurrent `update`s; inputs that are FIFOs,
bombs or huge. Each case checks the contract: exit 2, one stderr line naming the file,
no traceback, nothing written (or the file left as it was)."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.unit.test_hostile_reads import SPEC, bomb

GV = str(ROOT / ".venv" / "bin" / "gpuvalues")
PY = str(ROOT / ".venv" / "bin" / "python")
VALUES = "replicaCount: 1\npodAnnotations: {}\n"


def gv(*args, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([GV, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


def one_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuvalues: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


@pytest.fixture
def inventory_json(tmp_path) -> Path:
    path = tmp_path / "nodes.json"
    path.write_text('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1", "labels": '
                    '{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, "status": {"capacity": '
                    '{"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi", "pods": "110"}}}]}')
    return path


# ---------------------------------------------------------------------------- output paths
@pytest.mark.parametrize("command", ["values", "inventory"])
def test_dev_full_is_enospc_and_stays_a_device(command, spec, inventory_json):
    """The system's /dev/full, as the issue reports it (run as root, the old code turned it
    into a regular file)."""
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode), "precondition: /dev/full is a device"
    args = [spec, "-o", "/dev/full"] if command == "values" else \
        ["--inventory", inventory_json, "-o", "/dev/full"]
    proc = gv(command, *args)
    one_error(proc, "/dev/full: cannot write: no space left on device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert os.stat("/dev/full").st_rdev == os.makedev(1, 7)


def test_symlink_to_stdout_reaches_stdout(tmp_path, inventory_json):
    """A link to /proc/self/fd/1 (what /dev/stdout is) stays a link and the data goes to
    the process's stdout."""
    link = tmp_path / "out"
    link.symlink_to("/proc/self/fd/1")
    proc = gv("inventory", "--inventory", inventory_json, "-o", link, "-q")
    assert proc.returncode == 0, proc.stderr
    assert "name: n1" in proc.stdout
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


def test_fifo_output_is_streamed(tmp_path, inventory_json):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    proc = gv("inventory", "--inventory", inventory_json, "-o", fifo, "-q")
    reader.join(10)
    assert proc.returncode == 0, proc.stderr
    assert got and b"name: n1" in got[0]
    assert stat.S_ISFIFO(fifo.stat().st_mode) and temp_files(tmp_path) == []


def test_dash_is_stdout(inventory_json):
    proc = gv("inventory", "--inventory", inventory_json, "-o", "-")
    assert proc.returncode == 0 and "name: n1" in proc.stdout


_SLOW_WRITE = """
import os, sys, time
from gpuvalues.io import files
real = os.fsync
def slow(fd):
    print("writing", flush=True)
    time.sleep(30)
    real(fd)
os.fsync = slow
{call}
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("what", ["file", "tree"])
def test_signal_mid_write_leaves_no_temp_and_the_old_output(tmp_path, sig, what):
    """A real process is stopped by a real signal while its temp file (or new directory)
    exists; the finally clauses remove it and the old output stays as it was."""
    target = tmp_path / ("out.yaml" if what == "file" else "manifests")
    if what == "file":
        target.write_text("old\n")
        call = f"files.write_atomic({str(target)!r}, 'new' * 1000)"
    else:
        from gpuvalues.io import files
        files.write_tree(target, {"hpa.yaml": "old"})
        call = f"files.write_tree({str(target)!r}, {{'a.yaml': 'A', 'b.yaml': 'B'}})"
    # SIGINT at its default in the child: a suite started as a background job inherits it
    # ignored, and Python then installs no KeyboardInterrupt handler (the case under test).
    proc = subprocess.Popen([PY, "-c", _SLOW_WRITE.format(call=call)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "writing"
    assert any(".tmp" in n or ".new-" in n for n in temp_files(tmp_path))   # mid-write
    proc.send_signal(sig)
    proc.wait(20)
    assert proc.returncode != 0
    if what == "file":
        assert target.read_text() == "old\n"
    else:
        assert sorted(os.listdir(target)) == [".gpuvalues-render", "hpa.yaml"]
    assert temp_files(tmp_path) == []


# ---------------------------------------------------------------------------- update
def test_twelve_concurrent_updates_keep_twelve_keys(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    procs = [subprocess.Popen([GV, "update", str(values), "--no-validate", "--set",
                               f"podAnnotations.k{i}=v{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(12)]
    results = [(p.wait(120), p.stderr.read()) for p in procs]
    assert all(code == 0 for code, _ in results), results
    import yaml
    annotations = yaml.safe_load(values.read_text())["podAnnotations"]
    assert annotations == {f"k{i}": f"v{i}" for i in range(12)}
    assert temp_files(tmp_path) == []


def test_update_keeps_symlinks_hard_links_and_owner(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text(VALUES)
    if os.geteuid() == 0:
        os.chown(real, 4321, 4321)
    link = tmp_path / "link.yaml"
    link.symlink_to("real.yaml")
    hard = tmp_path / "hard.yaml"
    os.link(real, hard)
    assert gv("update", link, "--no-validate", "--set", "replicaCount=2").returncode == 0
    assert link.is_symlink() and "replicaCount: 2" in real.read_text()
    assert gv("update", hard, "--no-validate", "--set", "replicaCount=3").returncode == 0
    assert real.stat().st_ino == hard.stat().st_ino and "replicaCount: 3" in real.read_text()
    if os.geteuid() == 0:
        assert (real.stat().st_uid, real.stat().st_gid) == (4321, 4321)


def test_update_refuses_a_read_only_file(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    os.chmod(values, 0o444)
    proc = gv("update", values, "--no-validate", "--set", "replicaCount=2")
    one_error(proc, f"{values}: is read-only (mode 0444)")
    assert values.read_text() == VALUES and stat.S_IMODE(values.stat().st_mode) == 0o444


# ---------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("command", ["values", "validate", "plan"])
def test_fifo_spec_is_refused_without_blocking(tmp_path, command):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    proc = gv(command, fifo, timeout=30)
    assert time.monotonic() - start < 10
    one_error(proc, f"{fifo}: is a FIFO (named pipe)")


def test_fifo_trace_and_topology_refused(tmp_path):
    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    one_error(gv("simulate", fifo, "--replica-rps", "3", timeout=30), "FIFO")
    one_error(gv("topo", fifo, timeout=30), "FIFO")


def _measured(args) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run the CLI; wall time (s) and the child's peak RSS (MB), from a wrapper process so
    the number is this run's alone."""
    code = textwrap.dedent(f"""
        import resource, subprocess, sys, time, json
        t = time.monotonic()
        p = subprocess.run({[GV, *map(str, args)]!r}, capture_output=True, text=True)
        dt = time.monotonic() - t
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(json.dumps([p.returncode, p.stdout, p.stderr, dt, rss]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    import json
    rc, stdout, stderr, dt, rss = json.loads(out.stdout)
    return subprocess.CompletedProcess(args, rc, stdout, stderr), dt, rss


def test_alias_bomb_fast_and_small(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb())
    proc, dt, rss = _measured(["values", path, "-o", tmp_path / "v.yaml"])
    one_error(proc, "excessive aliasing")
    assert dt < 5 and rss < 150, (dt, rss)    # interpreter and imports included
    assert not (tmp_path / "v.yaml").exists()


def test_fifty_megabyte_spec_refused_fast_and_small(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(SPEC.replace("server: vllm", "server: " + "x" * 50_000_000))
    proc, dt, rss = _measured(["validate", path])
    one_error(proc, "is 47.7 MiB; gpuvalues reads files up to 16 MiB")
    assert dt < 5 and rss < 300, (dt, rss)


def test_fifteen_megabyte_spec_validated_fast_and_small(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(SPEC.replace("server: vllm", "server: " + "x" * 15_000_000))
    proc, dt, rss = _measured(["validate", path])
    assert proc.returncode == 1 and "is not one of" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) < 500
    assert dt < 5 and rss < 300, (dt, rss)


def test_hundred_thousand_keys_refused_fast(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(SPEC + "".join(f"k{i}: {i}\n" for i in range(200_000)))
    proc, dt, rss = _measured(["values", path, "-o", tmp_path / "v.yaml"])
    one_error(proc, "more than 100,000 YAML values")
    assert dt < 5 and rss < 300, (dt, rss)


def test_dev_zero_refused(tmp_path):
    one_error(gv("inventory", "--inventory", "/dev/zero"), "/dev/zero: is a character device")
    one_error(gv("values", "/dev/zero", "-o", tmp_path / "v.yaml"), "/dev/zero")


def test_deep_json_inventory_and_fit(tmp_path):
    deep = tmp_path / "inv.json"
    deep.write_text('{"items": ' + "[" * 10_000 + "]" * 10_000 + "}")
    one_error(gv("inventory", "--inventory", deep), str(deep))
    one_error(gv("fit", "--inventory", deep, "--manifests", deep), str(deep))


def test_unsupported_kubernetes_version(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace('"1.34.0"', '"1.999.0"'))
    one_error(gv("values", path, "-o", tmp_path / "v.yaml"),
              f"{path}:2:20: kubernetesVersion: Kubernetes 1.999.0 has no bundled API schemas")
    assert not (tmp_path / "v.yaml").exists()


def test_unsupported_kube_version_option_on_render(spec):
    """`--kube-version` past the bundled schemas: one line naming the option, not
    kubernetes_validate's VersionNotSupportedError traceback."""
    one_error(gv("render", spec, "--kube-version", "1.999.0", timeout=120),
              "--kube-version: Kubernetes 1.999.0 has no bundled API schemas")
