"""Input policy: what gpuvalues agrees to read, before any parsing.

Only regular files (a FIFO, device, socket or directory is refused on the open descriptor,
opened non-blocking, so nothing blocks), at most MAX_INPUT_BYTES unless the caller sets a
limit, UTF-8 text without NUL bytes; `-` is stdin. Files a spec names stay inside the
spec's folder (`resolve_reference`). Every refusal is one placed error (GV019 for the file
itself)."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


from gpuvalues.errors import GpuValuesError, SpecError

STDIN = "-"

# Inputs larger than this are refused before parsing: values files and specs are KBs;
# a 50 MB "spec" is an accident or an attack, and parsing it would take a minute and GBs.
MAX_INPUT_BYTES = 16 * 1024 * 1024


def line_col(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, col


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _too_big(size: int, limit: int = MAX_INPUT_BYTES) -> str:
    what = " (specs and values files are kilobytes)" if limit == MAX_INPUT_BYTES else ""
    return f"is {size / 2**20:.1f} MiB; gpuvalues reads files up to {limit // 2**20} MiB{what}"


def read_input(path: str | Path, *, error: type[GpuValuesError] = SpecError,
               expected: str = "a YAML file", max_bytes: int | None = None) -> tuple[bytes, str]:
    """The bytes of the regular file at `path` (`-`: stdin), and its display name.

    Refused with one `error` naming the file, before reading anything: a missing file, a
    directory, a FIFO, a device or a socket (a FIFO would block, /dev/zero never ends),
    and more than `max_bytes` (default MAX_INPUT_BYTES). The file is opened non-blocking
    and checked on the open descriptor, so a path swapped for a FIFO after a check cannot
    block either.
    """
    limit = max_bytes or MAX_INPUT_BYTES
    if str(path) == STDIN:
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise error(f"standard input is more than {limit // 2**20} MiB; "
                        "gpuvalues reads inputs up to that size", source="<stdin>", code="GV019")
        return data, "<stdin>"
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error("file not found", source=source, code="GV019") from None
    except IsADirectoryError:
        raise error(f"is a directory, expected {expected}", source=source, code="GV019") from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", source=source, code="GV019") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise error(f"is {kind}, expected {expected} (gpuvalues reads only regular files)",
                        source=source, code="GV019")
        if st.st_size > limit:
            raise error(_too_big(st.st_size, limit), source=source, code="GV019")
        chunks, size = [], 0
        while True:                       # read to EOF, never past the limit (growing files)
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise error(_too_big(size, limit), source=source, code="GV019")
        return b"".join(chunks), source
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", source=source, code="GV019") from None
    finally:
        os.close(fd)


def read_source(path: str | Path) -> tuple[bytes, str]:
    """Read a file (or stdin for `-`); returns (bytes, display name). See read_input."""
    return read_input(path)


def resolve_reference(reference: str, base_dir: Path, *, source: str = "", field: str | None = None,
                      allow_outside: bool = False, error: type[GpuValuesError] = SpecError) -> Path:
    """The path a spec names (`topology.file` and the like), resolved against `base_dir`
    (the spec's folder) and checked.

    The rule: a reference must stay inside the spec's folder after following `..` and
    symlinks, unless `allow_outside` (an explicit option of the caller); an absolute path
    is outside unless it resolves into the folder. So a spec received from someone else
    cannot make gpuvalues read /etc/shadow or ~/.kube/config into an error message. The
    file itself must then pass read_input (a regular file, within the size limit).
    """
    if "\0" in reference:
        raise error("a path cannot contain a NUL byte", source=source, field=field)
    base = Path(os.path.realpath(base_dir))
    target = Path(os.path.realpath(base / reference))
    if not allow_outside and target != base and base not in target.parents:
        raise error(f"{reference!r} is outside the spec's folder ({base}); put the file beside "
                    "the spec (paths are relative to the spec file)", source=source, field=field)
    return target


def decode(data: bytes, source: str) -> str:
    """UTF-8 (with or without BOM) text, or a SpecError at the first bad byte."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        good = data[:exc.start].decode("utf-8")
        line, col = line_col(good, len(good))
        raise SpecError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                        f"{exc.start}); save the file as UTF-8",
                        source=source, line=line, column=col) from None
    bad = text.find("\x00")
    if bad >= 0:
        line, col = line_col(text, bad)
        raise SpecError("binary data (NUL byte), expected YAML text",
                        source=source, line=line, column=col)
    return text


def read_text(path: str | Path) -> str:
    """The text of a file (`-` reads stdin): UTF-8, or a placed SpecError (missing file,
    directory, bad byte, NUL) instead of an OSError or UnicodeDecodeError."""
    data, source = read_source(path)
    return decode(data, source)
