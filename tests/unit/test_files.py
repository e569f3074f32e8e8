"""Safe writes (gpuvalues.io.files, issue 14): atomic replacement only of regular files,
symlinks and hard links kept, devices/FIFOs/`-` streamed, mode and owner kept, whole-
directory swaps for `render -o DIR`. In-process; the CLI and signal cases run as real
subprocesses in tests/integration/test_hostile_io.py."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from gpuvalues.errors import OutputError
from gpuvalues.io import files


def _no_temp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp") or ".new-" in p.name
            or ".old-" in p.name]


def test_regular_file_replaced_keeping_mode(tmp_path):
    target = tmp_path / "values.yaml"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    inode = target.stat().st_ino
    files.write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode            # replaced by rename, not rewritten
    assert _no_temp_files(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_owner_kept(tmp_path):
    target = tmp_path / "values.yaml"
    target.write_text("old\n")
    os.chown(target, 1234, 2345)
    files.write_atomic(target, "new\n")
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (1234, 2345)


def test_new_file_gets_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        files.write_atomic(tmp_path / "new.yaml", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o644


def test_symlink_kept_and_target_written(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real.name)
    chain = tmp_path / "chain.yaml"
    chain.symlink_to(link.name)
    files.write_atomic(chain, "new\n")
    assert chain.is_symlink() and link.is_symlink()
    assert os.readlink(link) == "real.yaml"
    assert real.read_text() == "new\n"


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.yaml"
    link.symlink_to("made.yaml")
    files.write_atomic(link, "x\n")
    assert link.is_symlink() and (tmp_path / "made.yaml").read_text() == "x\n"


def test_hard_link_written_through(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("old\n")
    b = tmp_path / "b.yaml"
    os.link(a, b)
    files.write_atomic(a, "new\n")
    assert b.read_text() == "new\n"
    assert a.stat().st_ino == b.stat().st_ino and a.stat().st_nlink == 2


@pytest.fixture
def device(tmp_path):
    """A private character device node (the kernel's null or full device) in tmp_path, so
    the test does not depend on a shared /dev that other processes on this machine may have
    clobbered; the system's own nodes when not root (mknod needs root)."""
    def make(name: str, minor: int) -> Path:
        if os.geteuid() != 0:
            return Path("/dev") / name
        node = tmp_path / name
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        return node
    return make


def test_null_device_is_streamed_not_replaced(device):
    null = device("null", 3)
    before = os.stat(null)
    files.write_atomic(null, "anything\n")
    after = os.stat(null)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino
    assert _no_temp_files(null.parent) == []


def test_full_device_gives_enospc_and_stays_a_device(device):
    full = device("full", 7)
    with pytest.raises(OutputError) as err:
        files.write_atomic(full, "x" * 10)
    assert str(err.value) == f"{full}: cannot write: no space left on device (nothing was written)"
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_fifo_is_streamed(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    files.write_atomic(fifo, "through the pipe\n")
    reader.join(10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert _no_temp_files(tmp_path) == []


def test_symlink_to_a_device_is_streamed(tmp_path, device):
    null = device("null", 3)
    link = tmp_path / "stdout"
    link.symlink_to(null)
    files.write_atomic(link, "x")
    assert link.is_symlink() and os.readlink(link) == str(null)
    assert stat.S_ISCHR(os.stat(null).st_mode)


def test_dash_writes_stdout(capfd):
    files.write_atomic("-", "to stdout\n")
    assert capfd.readouterr().out == "to stdout\n"


def test_directory_target_refused(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        files.write_atomic(tmp_path, "x")


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "v.yaml"
    target.write_text("old\n")

    def boom(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OutputError, match="no space left"):
        files.write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert _no_temp_files(tmp_path) == []


# ---------------------------------------------------------------------------- update helpers
def test_check_writable_refuses_0444(tmp_path):
    target = tmp_path / "v.yaml"
    target.write_text("a: 1\n")
    os.chmod(target, 0o444)
    with pytest.raises(OutputError, match=r"is read-only \(mode 0444\)"):
        files.check_writable(target)
    os.chmod(target, 0o644)
    files.check_writable(target)          # control: a writable file passes


def test_locked_serialises_and_follows_replacement(tmp_path):
    """Threads each open their own descriptor, so flock excludes them like processes; each
    read-modify-write replaces the inode, and no increment is lost."""
    target = tmp_path / "n"
    target.write_text("0")

    def bump():
        for _ in range(20):
            with files.locked(target):
                n = int(target.read_text())
                files.write_atomic(target, str(n + 1))
    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert target.read_text() == "80"


# ---------------------------------------------------------------------------- directories
def test_write_tree_new_then_replaces_whole(tmp_path):
    out = tmp_path / "manifests"
    files.write_tree(out, {"a.yaml": "A", "hpa.yaml": "H"})
    assert sorted(p.name for p in out.iterdir()) == [files.TREE_MARKER, "a.yaml", "hpa.yaml"]
    files.write_tree(out, {"a.yaml": "A2", "scaledobject.yaml": "S"})
    assert sorted(p.name for p in out.iterdir()) == [files.TREE_MARKER, "a.yaml",
                                                     "scaledobject.yaml"]
    assert (out / "a.yaml").read_text() == "A2"
    assert _no_temp_files(tmp_path) == []


def test_write_tree_refuses_a_directory_it_did_not_write(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="non-empty directory gpuvalues did not write"):
        files.write_tree(out, {"a.yaml": "A"})
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_write_tree_into_empty_existing_directory_keeps_its_mode(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    os.chmod(out, 0o750)
    files.write_tree(out, {"a.yaml": "A"})
    assert (out / "a.yaml").read_text() == "A"
    assert stat.S_IMODE(out.stat().st_mode) == 0o750


def test_write_tree_through_a_symlinked_directory(tmp_path):
    real = tmp_path / "real"
    files.write_tree(real, {"a.yaml": "A"})
    link = tmp_path / "link"
    link.symlink_to("real")
    files.write_tree(link, {"b.yaml": "B"})
    assert link.is_symlink()
    assert sorted(p.name for p in real.iterdir()) == [files.TREE_MARKER, "b.yaml"]


def test_write_tree_interrupted_leaves_old_directory(tmp_path, monkeypatch):
    out = tmp_path / "m"
    files.write_tree(out, {"a.yaml": "A", "b.yaml": "B"})
    real_open = os.open
    calls = {"n": 0}

    def failing_open(path, flags, *a, **kw):
        if str(path).endswith("y.yaml"):
            raise KeyboardInterrupt       # Ctrl-C half way through the new directory
        calls["n"] += 1
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(os, "open", failing_open)
    with pytest.raises(KeyboardInterrupt):
        files.write_tree(out, {"x.yaml": "X", "y.yaml": "Y", "z.yaml": "Z"})
    monkeypatch.undo()
    assert calls["n"] >= 2                 # the new directory was half written
    assert sorted(p.name for p in out.iterdir()) == [files.TREE_MARKER, "a.yaml", "b.yaml"]
    assert _no_temp_files(tmp_path) == []


def test_write_tree_two_rename_fallback(tmp_path, monkeypatch):
    """Where renameat2 is missing the swap is two renames; the result is the same."""
    out = tmp_path / "m"
    files.write_tree(out, {"a.yaml": "A"})
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    files.write_tree(out, {"b.yaml": "B"})
    assert sorted(p.name for p in out.iterdir()) == [files.TREE_MARKER, "b.yaml"]
    assert _no_temp_files(tmp_path) == []


@pytest.mark.parametrize("name", ["../escape.yaml", "a/b.yaml", "", files.TREE_MARKER])
def test_write_tree_rejects_bad_names(tmp_path, name):
    with pytest.raises(Exception, match="bad file name"):
        files.write_tree(tmp_path / "m", {name: "x"})
    assert not (tmp_path / "escape.yaml").exists()


def test_write_tree_on_a_file_refused(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        files.write_tree(f, {"a.yaml": "A"})
    assert f.read_text() == "x"
