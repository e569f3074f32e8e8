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

    def _raise(signum, frame):  # noqa: ARG001 - signal handler signature
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
    """Write several outputs as one, each by `write_atomic`'s rules: every file to be
    replaced is first staged as a synced temp file beside its target, and only when all
    are staged do they take their targets' places (then hard-linked files are rewritten
    and streams written). A failure while staging (permission, a full disk, a read-only
    filesystem, a directory where a file should be) leaves every target as it was.
    Raises `OutputError`."""
    staged: list[tuple[str, str, Path, str | os.PathLike]] = []   # (temp, target, folder, path)
    later: list[tuple[bool, str | os.PathLike, bytes]] = []   # (stream?, path, data)
    with _terminate_as_exit():
        current: str | os.PathLike = ""
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
                folder = Path(target).parent
                staged.append((_stage(target, folder, raw, st), target, folder, current))
            for i, (tmp, target, folder, current) in enumerate(staged):
                os.replace(tmp, target)
                staged[i] = ("", target, folder, current)
            for folder in {folder for _, _, folder, _ in staged}:
                _fsync_dir(folder)
            for stream, current, raw in later:
                if stream:
                    _write_stream(current, raw)
                else:
                    _write_in_place(str(current), raw)
        except OSError as exc:
            raise _os_error(exc, current) from None
        finally:
            for tmp, *_ in staged:
                if tmp:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)


def _stage(target: str, folder: Path, raw: bytes, st: os.stat_result | None) -> str:
    """A synced temp file beside `target` holding `raw`, with the old file's mode and
    owner (or a new file's); the caller renames it into place or removes it."""
    import tempfile           # here and in write_tree: only writes need it (start-up)

    fd, tmp = tempfile.mkstemp(prefix=f".{Path(target).name}.", suffix=".tmp", dir=folder)
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
    return tmp


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
            new = tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=parent)
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
        except OSError as exc:
            raise _os_error(exc, shown) from None
        finally:
            if new:
                shutil.rmtree(new, ignore_errors=True)
    return [Path(out_dir) / name for name in files]


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
