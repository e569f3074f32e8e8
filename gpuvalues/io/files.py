"""Writing files safely: atomic replacement of regular files, streams for everything else,
and whole-directory swaps for `render -o DIR`.

The rules (issue 14):
- A regular file (after following symlinks) is replaced atomically: a temp file in the
  target's own folder, fsynced, given the old file's mode and owner, renamed over it, and
  the folder fsynced. A symlink is kept: its final target is what gets replaced.
- A file with several hard links is written through in place (truncate, write, fsync):
  renaming would silently split it from its other names.
- Anything else (`-`, a character device such as /dev/null or /dev/full, a FIFO, a socket,
  `/dev/stdout`) is written as a stream and never replaced or chmod-ed.
- A temp file never outlives the write: try/finally removes it on errors and Ctrl-C, and
  SIGTERM is turned into an exit (143) for the duration of the write so finally runs.
- Every OS failure becomes an `OutputError` (exit 2, one line naming the file).
"""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import sys
import threading
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from gpuvalues.errors import GpuValuesError, OutputError, RenderError
from gpuvalues.render.helm import object_file_name, split_documents

STREAM = "-"
# The file `write_tree` puts in every directory it writes; its presence is what allows a
# later write to replace the directory's contents (a directory without it is the user's).
TREE_MARKER = ".gpuvalues-render"


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) inside the block, so `finally` clauses remove temp
    files (the default action kills the process without unwinding). Main thread only:
    Python delivers signals there; elsewhere the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _os_error(exc: OSError, path: str | os.PathLike) -> OutputError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        reason = "no space left on device (nothing was written)"
    return OutputError(f"cannot write: {reason}", source=str(path))


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8")


def is_stream(path: str | os.PathLike) -> bool:
    """True for `-` and for existing paths that are not regular files after following
    symlinks (devices, FIFOs, sockets, /dev/stdout): those are written, never replaced."""
    if str(path) == STREAM:
        return True
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _os_error(exc, path) from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError("is a directory; expected a file", source=str(path))
    return not stat.S_ISREG(st.st_mode)


def _write_stream(path: str | os.PathLike, data: bytes) -> None:
    try:
        if str(path) == STREAM:
            sys.stdout.flush()
            out = sys.stdout.buffer
            out.write(data)
            out.flush()
            return
        # No O_TRUNC/O_CREAT games: a device or FIFO is opened for writing as it is.
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
    except OSError as exc:
        raise _os_error(exc, "<stdout>" if str(path) == STREAM else path) from None


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass                  # some filesystems cannot fsync a directory; the data is synced
    finally:
        os.close(fd)


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_in_place(target: str, data: bytes) -> None:
    """Truncate and rewrite (hard-linked files keep every name)."""
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` (text or bytes) to `path` following the module's rules.

    A regular file (or a missing one) is replaced atomically through a temp file in the
    same folder, keeping the old mode and owner (a new file gets 0666 minus the umask);
    a symlink keeps pointing where it did and its target is replaced; a hard-linked file
    is written through; `-`, devices and FIFOs are streamed. Raises `OutputError`.
    """
    write_all([(path, data)])


def write_all(outputs: Sequence[tuple[str | os.PathLike, str | bytes]]) -> None:
    """Write several outputs as one, each by `write_atomic`'s rules, all or none even
    under kill -9. The files to be replaced are staged as synced temp files beside their
    targets under a journal (`_Journal`): written first, in the first target's folder
    (with a pointer to it in every other folder), it lists every temp and target, and one
    appended `commit` line is the moment the write happens. Then the temps take their
    targets' places, and journal and pointers go. A failure before the commit (permission,
    a full disk, a read-only filesystem, a directory where a file should be) leaves every
    target as it was; a kill -9 anywhere is finished by the next write into any of those
    folders (`recover`): rolled back before the commit, completed after it. Hard-linked
    files are then rewritten and streams written. Raises `OutputError`."""
    plan: list[tuple[str, Path, os.stat_result | None, bytes, str | os.PathLike]] = []
    later: list[tuple[bool, str | os.PathLike, bytes]] = []   # (stream?, path, data)
    with _terminate_as_exit():
        current: str | os.PathLike = ""
        journal: _Journal | None = None
        try:
            for current, data in outputs:
                raw = _bytes(data)
                if is_stream(current):
                    later.append((True, current, raw))
                    continue
                target = os.path.realpath(current)   # write through symlinks (chains too)
                try:
                    st: os.stat_result | None = os.stat(target)
                except FileNotFoundError:
                    st = None
                if st is not None and st.st_nlink > 1:
                    later.append((False, target, raw))
                    continue
                plan.append((target, Path(target).parent, st, raw, current))
            folders = list(dict.fromkeys(folder for _, folder, *_ in plan))
            for folder in folders:
                recover(folder)
            if plan:
                journal = _Journal(folders, [(t, f) for t, f, *_ in plan])
                for i, (_, _, st, raw, _current) in enumerate(plan):
                    journal.stage(i, raw, st)
                for folder in folders:
                    _fsync_dir(folder)
                journal.commit()
                journal.finish()
            for stream, current, raw in later:
                if stream:
                    _write_stream(current, raw)
                else:
                    _write_in_place(str(current), raw)
        except OSError as exc:
            raise _os_error(exc, current) from None
        finally:
            if journal is not None:
                journal.close()


# The journal of write_all: `.gpuvalues-journal.<id>.tmp` in the first folder, one JSON line
# (the temps and their targets, the pointers) written before anything else, then `commit`;
# `.gpuvalues-pointer.<id>.tmp` (the journal's path) in every other folder, written before
# any temp there; the temps `.gpuvalues-<id>.<n>.tmp`. The writer holds an flock on its
# journal, so `recover` leaves a live write alone (the kernel drops a killed one's lock).
_JOURNAL, _POINTER, _TMP = ".gpuvalues-journal.", ".gpuvalues-pointer.", ".gpuvalues-"
_CRASH_AT = os.environ.get("GPUVALUES_TEST_CRASH_AT")    # tests: SIGKILL at this step


def _step(name: str) -> None:
    """A point where tests/integration/test_kill9.py kills the process (a real SIGKILL)."""
    if _CRASH_AT == name:
        os.kill(os.getpid(), signal.SIGKILL)


class _Journal:
    """One write_all transaction (see write_all and the comment above)."""

    def __init__(self, folders: list[Path], targets: list[tuple[str, Path]]) -> None:
        import fcntl
        import json
        import secrets

        self.id = secrets.token_hex(6)
        self.folders = folders
        self.path = folders[0] / f"{_JOURNAL}{self.id}.tmp"
        self.pointers = [f / f"{_POINTER}{self.id}.tmp" for f in folders[1:]]
        self.pairs = [(str(folder / f"{_TMP}{self.id}.{i}.tmp"), target)
                      for i, (target, folder) in enumerate(targets)]
        self.committed = self.done = False
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        self.made: list[str] = [str(self.path)]
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            record = {"pairs": self.pairs, "pointers": [str(p) for p in self.pointers]}
            _write_fd(self.fd, (json.dumps(record) + "\n").encode())
            os.fsync(self.fd)
            _fsync_dir(folders[0])
            _step("journal")
            for p in self.pointers:
                self.made.append(str(p))
                _write_new(p, str(self.path))
            for f in folders[1:]:
                _fsync_dir(f)
        except BaseException:
            self.close()
            raise

    def stage(self, i: int, raw: bytes, st: os.stat_result | None) -> None:
        _stage(self.pairs[i][0], raw, st)
        _step(f"staged-{i}")

    def commit(self) -> None:
        _write_fd(self.fd, b"commit\n")
        os.fsync(self.fd)
        self.committed = True
        _step("committed")

    def finish(self) -> None:
        for n, (tmp, target) in enumerate(self.pairs):
            os.replace(tmp, target)
            _step(f"renamed-{n}")
        for folder in self.folders:
            _fsync_dir(folder)
        self.done = True

    def close(self) -> None:
        """Remove what this transaction made: before the commit every temp (nothing was
        replaced), after it only once it is done (else the next run completes it)."""
        if not self.committed:
            for tmp, _ in self.pairs:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        elif not self.done:            # SIGTERM or an error after the commit: finish it now
            with contextlib.suppress(OSError):
                for tmp, target in self.pairs:
                    if os.path.exists(tmp):
                        os.replace(tmp, target)
                self.done = True
        if self.done or not self.committed:
            for p in reversed(self.made):      # pointers first: the journal is the authority
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
        os.close(self.fd)


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_new(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        _write_fd(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def recover(folder: str | os.PathLike) -> list[str]:
    """Finish what a killed `write_all` or `write_tree` left in `folder`: a committed journal
    is completed (its temps renamed over their targets), an uncommitted one rolled back (its
    temps removed), then its pointers and journal removed; a live writer's (its flock held)
    is left alone. Returns the targets it completed."""
    import json

    folder = Path(folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    done: list[str] = []
    for name in names:
        path = folder / name
        if name.startswith(_POINTER) and name.endswith(".tmp"):
            try:
                journal = Path(path.read_text())
            except (OSError, UnicodeDecodeError):
                continue
            if journal.exists():
                done += _recover_journal(journal, json)
            if not journal.exists():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        elif name.startswith(_JOURNAL) and name.endswith(".tmp"):
            done += _recover_journal(path, json)
    return done


def _recover_journal(path: Path, json) -> list[str]:
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []                          # a live write: not ours to touch
        lines = os.read(fd, 1 << 24).decode("utf-8", "replace").splitlines()
        try:
            record = json.loads(lines[0])
            pairs, pointers = record["pairs"], record["pointers"]
        except (IndexError, ValueError, KeyError, TypeError):
            pairs, pointers = [], []           # killed while writing it: nothing else exists yet
        completed: list[str] = []
        if lines[1:2] == ["commit"]:           # committed: complete it
            for tmp, target in pairs:
                if os.path.exists(tmp):
                    os.replace(tmp, target)
                    completed.append(target)
            for folder in dict.fromkeys(str(Path(t).parent) for _, t in pairs):
                _fsync_dir(Path(folder))
        else:                                  # not committed: nothing was replaced
            for tmp, _ in pairs:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        for p in pointers:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
        os.unlink(path)
        return completed
    finally:
        os.close(fd)


def _remove_stale_tree(path: Path) -> None:
    """One folder of a killed write_tree (its writer's flock gone)."""
    import fcntl
    import shutil

    if not path.is_dir() or path.is_symlink() or not path.name.startswith("."):
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    finally:
        os.close(fd)
    shutil.rmtree(path, ignore_errors=True)


def _stage(tmp: str, raw: bytes, st: os.stat_result | None) -> None:
    """A synced temp file `tmp` holding `raw`, with the old file's mode and owner (or a new
    file's); the caller renames it into place or removes it."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            if st is not None:
                with contextlib.suppress(PermissionError):   # not ours to give away: keep ours
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
            os.fchmod(f.fileno(), (st.st_mode & 0o7777) if st is not None else _new_file_mode())
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_writable(path: str | os.PathLike) -> None:
    """Refuse, with an OutputError, to edit a file in place that its mode marks read-only
    (no write bit for anyone: 0444), that the process may not write, or that sits on a
    read-only filesystem. Root bypasses permission bits, so the mode is checked itself:
    a 0444 file says "do not edit me" even to root."""
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except OSError as exc:
        raise _os_error(exc, path) from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputError("is not a regular file; update edits a file in place", source=str(path))
    if not st.st_mode & 0o222:
        raise OutputError(f"is read-only (mode {st.st_mode & 0o7777:04o}); make it writable "
                          "(chmod u+w) to update it", source=str(path))
    if not os.access(target, os.W_OK):
        raise OutputError("permission denied: this user may not write it", source=str(path))
    with contextlib.suppress(OSError):
        if os.statvfs(target).f_flag & os.ST_RDONLY:
            raise OutputError("is on a read-only filesystem", source=str(path))


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive fcntl lock on the file at `path` (symlinks followed) for a
    read-modify-write. Concurrent holders run one after another; since `write_atomic`
    replaces the file's inode, a waiter that wakes holding the lock of a replaced inode
    retries on the new one, so no update is lost."""
    import fcntl

    target = os.path.realpath(path)
    while True:
        try:
            fd = os.open(target, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise _os_error(exc, path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(target).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield
                return
        finally:
            os.close(fd)                     # closing releases the lock


# ---------------------------------------------------------------------------- directories
_RENAME_EXCHANGE = 2          # linux/fs.h: swap two paths in one step


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE) (Linux >= 3.15, glibc >=
    2.28); False when the system cannot, so the caller renames in two steps."""
    try:
        import ctypes     # renameat2 only: kept off the CLI's start-up (~50 ms)
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), b)


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", "..") or name == TREE_MARKER or "\0" in name:
        raise GpuValuesError(f"bad file name {name!r} for a directory write")


def write_tree(out_dir: str | os.PathLike, files: Mapping[str, str | bytes]) -> list[Path]:
    """Make the directory `out_dir` hold exactly `files` ({name: contents}), all at once.

    The files are written into a new sibling directory (fsynced), which then takes the
    place of `out_dir` in one atomic exchange (renameat2; two renames where the system has
    no exchange), and the old contents are removed: objects a previous render had and this
    one has not are gone, and an interrupted write leaves the old directory as it was.
    `out_dir` may be missing, empty, or a directory an earlier `write_tree` wrote (it holds
    the TREE_MARKER file); any other non-empty directory is refused with an OutputError, as
    is a path that is not a directory. A symlink to a directory is kept and its target's
    contents swapped. Returns the written paths under `out_dir`, in the given order.
    """
    import shutil
    import tempfile

    for name in files:
        _check_name(name)
    shown = str(out_dir)
    target = Path(os.path.realpath(out_dir))
    old_mode = None
    if target.exists() or target.is_symlink():
        if not target.is_dir():
            raise OutputError("exists and is not a directory; -o takes a directory", source=shown)
        entries = os.listdir(target)
        if entries and TREE_MARKER not in entries:
            raise OutputError(
                f"is a non-empty directory gpuvalues did not write (no {TREE_MARKER} file); "
                "refusing to replace its contents: give an empty or new directory",
                source=shown)
        old_mode = target.stat().st_mode & 0o7777
    parent = target.parent
    with _terminate_as_exit():
        try:
            parent.mkdir(parents=True, exist_ok=True)
            _remove_stale_trees(parent, target.name)
            new = tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=parent)
            lock = _lock_dir(new)          # a concurrent write_tree's cleanup leaves it alone
        except OSError as exc:
            raise _os_error(exc, shown) from None
        try:
            os.chmod(new, old_mode if old_mode is not None else 0o777 & ~_umask())
            for name, data in {TREE_MARKER: "# written by gpuvalues render: the next render "
                                            "into this directory replaces all of it\n", **files}.items():
                fd = os.open(os.path.join(new, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                with os.fdopen(fd, "wb") as f:
                    f.write(_bytes(data))
                    f.flush()
                    os.fsync(f.fileno())
            _fsync_dir(Path(new))
            _step("tree-built")
            if old_mode is None:
                os.rename(new, target)
                new = ""
            elif _exchange(new, str(target)):
                pass                                   # `new` now holds the old contents
            else:
                aside = tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent)
                os.rename(target, os.path.join(aside, "d"))
                os.rename(new, target)
                new = aside
            _fsync_dir(parent)
            _step("tree-swapped")
        except OSError as exc:
            raise _os_error(exc, shown) from None
        finally:
            if new:
                shutil.rmtree(new, ignore_errors=True)
            os.close(lock)
    return [Path(out_dir) / name for name in files]


def _lock_dir(path: str) -> int:
    import fcntl

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _remove_stale_trees(parent: Path, name: str) -> None:
    """The `.<name>.new-*` and `.<name>.old-*` folders (mkdtemp's) that a killed write_tree
    left beside `name`: removed unless their writer still holds its flock."""
    import re

    stale = re.compile(re.escape(f".{name}.") + r"(new|old)-[A-Za-z0-9_]{8}")
    for entry in os.listdir(parent):
        if stale.fullmatch(entry):
            _remove_stale_tree(parent / entry)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_manifests(streams: Mapping[str, str] | str, out_dir: str | os.PathLike) -> list[Path]:
    """Write each rendered object to its own file in `out_dir`, swapping the whole
    directory in at once (`write_tree`): no file of an earlier render survives (so no
    stale autoscaler of an earlier spec beside the new one), and an interrupted or failed
    write leaves the earlier render intact.

    `streams` is one rendered stream, or {release name: stream} for a fleet. Names are
    `<kind>-<name>.yaml` (`<release>_<kind>-<name>.yaml` for a fleet), with `-2`, `-3`...
    when two objects share one. Returns the paths in stream order.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RenderError(f"{out} exists and is not a directory; -o takes a directory")
    if isinstance(streams, str):
        streams = {"": streams}
    contents: dict[str, str] = {}
    for release, text in streams.items():
        for obj, chunk in split_documents(text):
            name = (f"{release}_" if release else "") + object_file_name(obj)
            stem, n = name[:-5], 2
            while name in contents:
                name, n = f"{stem}-{n}.yaml", n + 1
            contents[name] = "---\n" + chunk
    return write_tree(out, contents)
