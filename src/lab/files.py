"""Atomic file writes: a crash, a kill or a full disk mid-write never leaves a truncated file where a good one was.

The new content goes to a temp file next to the target, is flushed to disk (fsync), and only then renamed over the
target (`os.replace`, atomic on POSIX); the directory entry is synced too, so a power loss after the rename keeps
the new file rather than neither. Disk-full and permission errors become one UserError naming the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lab.errors import UserError

_FIXES = {
    errno.ENOSPC: "no space left on the device: free space, or write runs elsewhere (hydra.run.dir=...)",
    errno.EDQUOT: "disk quota exceeded: free space, or write runs elsewhere (hydra.run.dir=...)",
    errno.EACCES: "permission denied: choose a writable output dir (hydra.run.dir=...)",
    errno.EPERM: "permission denied: choose a writable output dir (hydra.run.dir=...)",
    errno.EROFS: "read-only file system: choose a writable output dir (hydra.run.dir=...)",
}


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temp path next to `path` to write to; synced and renamed over `path` only when the block succeeds.
    Until then the previous file stays where it was, complete."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(tmp, path)
        _sync_dir(path.parent)
    except BaseException as err:
        tmp.unlink(missing_ok=True)  # a partial file would only take space; the old one is intact
        if isinstance(err, OSError) and err.errno in _FIXES:
            kept = f"; the previous {path.name} is intact" if path.exists() else ""
            raise UserError(f"cannot write {path}: {_FIXES[err.errno]}{kept}") from err
        raise


def remove_stale_temps(folder: Path) -> list[Path]:
    """Temp files a killed writer left behind (`.<name>.tmp`): never complete, safe to delete at start."""
    stale = sorted(folder.glob(".*.tmp")) if folder.is_dir() else []
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


def _sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be opened for fsync
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
