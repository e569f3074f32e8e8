"""Small I/O helpers shared by the CLI and the library: atomic writes, plain YAML data."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gpuvalues.errors import GpuValuesError

# libyaml's reader is about 10x faster than PyYAML's pure-Python one (the catalog alone
# is 19 files read at every CLI start); both build the same plain data.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def parse_yaml(text: str, *, source: str | None = None, error: type[GpuValuesError] = GpuValuesError,
               all_documents: bool = False) -> Any:
    """Plain YAML data (PyYAML safe types) from `text`: one document, or a list of the
    non-empty ones with `all_documents`.

    For data files and tool output (catalog, inventories, manifests, HPA behaviors); spec
    and values files go through `yamlio`, which reads YAML exactly as Helm does. A syntax
    error raises `error` with the file, line and column. The fast libyaml reader runs
    first; on an error the pure-Python reader parses again, so messages are PyYAML's.
    """
    for loader in dict.fromkeys((SAFE_LOADER, yaml.SafeLoader)):
        try:
            if all_documents:
                return [doc for doc in yaml.load_all(text, Loader=loader) if doc]
            return yaml.load(text, Loader=loader)
        except yaml.YAMLError as exc:
            last = exc
    mark = getattr(last, "problem_mark", None)
    raise error(f"invalid YAML: {getattr(last, 'problem', None) or last}", source=source,
                line=mark.line + 1 if mark else None,
                column=mark.column + 1 if mark else None) from None
