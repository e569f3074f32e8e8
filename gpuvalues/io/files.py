"""Small I/O helpers shared by the CLI and the library: atomic writes."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpuvalues.errors import RenderError
from gpuvalues.render.helm import object_file_name, split_documents


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` (text or bytes) to `path` through a temp file in the same folder, then rename.

    An interrupted or failed run never leaves a half-written file behind. The file keeps
    the mode of the file it replaces; a new file gets the usual 0666 minus the umask
    (mkstemp's private 0600 would otherwise leak into every file the CLI writes).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_manifests(text: str, out_dir: str | os.PathLike) -> list[Path]:
    """Write each rendered object to its own file in `out_dir` (created if missing).

    Every file is written atomically (temp file, then rename); names are
    `<kind>-<name>.yaml`, with `-2`, `-3`... when two objects share one. Returns the
    paths in stream order.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RenderError(f"{out} exists and is not a directory; -o takes a directory")
    docs = split_documents(text)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    used: set[str] = set()
    for obj, chunk in docs:
        name = object_file_name(obj)
        stem, n = name[:-5], 2
        while name in used:
            name, n = f"{stem}-{n}.yaml", n + 1
        used.add(name)
        path = out / name
        write_atomic(path, "---\n" + chunk)
        paths.append(path)
    return paths
