"""Write files atomically, so a crash, kill or full disk never leaves a truncated file where a good one was.

New content goes to a temp file next to the target, is fsynced, and only then renamed over the target (atomic on
POSIX). The directory is synced too, so a power loss after the rename keeps the new file. A failed write (disk full,
no permission, read-only, `ulimit -f`) becomes one UserError naming the path, the cause and the fix. That holds
whether the writer raised an OSError or torch's C++ writer raised a RuntimeError, which may keep no errno at all.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import sys
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
    errno.EFBIG: "file too large for this process's file size limit (ulimit -f) or the file system: raise the limit",
}
# torch's C++ writer (torch.save, torch.export.save) raises RuntimeError with one of these. The OSError, if any, is
# in its __context__ (for a Python file object) or gone (for a path, as the C++ stream keeps no errno).
_TORCH_WRITE_FAILED = re.compile(r"PytorchStreamWriter|inline_container|cannot be opened|iostream error")
_LOW_SPACE = 1 << 20  # bytes; a disk this close to full explains a failed write


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path next to `path`; it is synced and renamed over `path` only if the block succeeds."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    in_flight = sys.exc_info()[1]  # a failure being handled as we write (summary.json) is not this write's
    try:
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(tmp, path)
        _sync_dir(path.parent)
    except BaseException as err:
        # before the clean-up, since the disk is full only while the temp file is there
        cause = write_error(err, path.parent, in_flight)
        try:
            tmp.unlink(missing_ok=True)  # a partial file only takes space; the old one is intact
            left = ""
        except OSError:  # the folder became unwritable or vanished mid-write; still report the cause first
            left = f"; remove the partial {tmp}"
        if cause is None:
            raise
        kept = f"; the previous {path.name} is intact" if path.exists() else ""
        raise UserError(f"cannot write {path}: {_fix(cause)}{kept}{left}") from err


@contextlib.contextmanager
def staged(folder: str | Path, name: str) -> Iterator[Path]:
    """Yield a fresh staging folder `<folder>/.<name>.tmp/` for a writer of several files that name each other.

    An example is an ONNX model and its external weights. They are written there under their final names, checked,
    and then moved into `folder` with `publish`. Whatever is still staged when the block ends is removed; after a
    kill, `remove_stale_temps` removes it. A failed write is one UserError naming the path, as in `atomic_path`."""
    folder = Path(folder)
    stage = folder / f".{name}.tmp"
    in_flight = sys.exc_info()[1]
    try:
        _remove(stage)  # a killed run's leftovers, never verified
        stage.mkdir(parents=True)
        yield stage
    except BaseException as err:
        cause = write_error(err, stage if stage.is_dir() else folder, in_flight)
        if cause is None:
            raise
        raise UserError(f"cannot write {folder / name}: {_fix(cause)}") from err
    finally:
        with contextlib.suppress(OSError):  # the next run's clean-up removes what is left
            _remove(stage)


def publish(files: list[Path], folder: Path) -> list[Path]:
    """Move staged `files` (main file first in the list) into `folder`, synced.

    The companions move first and the main file last, so its final name appears only once all it needs is there."""
    try:
        for staged_file in [*files[1:], files[0]]:
            with open(staged_file, "rb+") as written:
                os.fsync(written.fileno())
            os.replace(staged_file, folder / staged_file.name)
        _sync_dir(folder)
    except OSError as err:
        raise UserError(f"cannot write {folder / files[0].name}: {_fix(err)}") from err
    return [folder / f.name for f in files]


def write_error(err: BaseException, folder: Path, in_flight: BaseException | None = None) -> OSError | None:
    """Return the OSError behind a failed write, or None if `err` is no I/O failure (a bug, Ctrl-C).

    That is `err`, the OSError behind torch's RuntimeError, or, if torch kept no errno, what `folder` and this
    process's limits show (read-only, full, a file size limit). The search stops at `in_flight`, the exception
    handled when the write began, since (say) a dead worker's broken pipe is not the write's fault."""
    if isinstance(err, UserError) or not isinstance(err, (OSError, RuntimeError)):
        return None  # a UserError already says what went wrong
    seen: BaseException | None = err
    while seen is not None and seen is not in_flight:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    if not _TORCH_WRITE_FAILED.search(str(err)):
        return None
    first = str(err).strip().splitlines()[0]
    return _probe(folder) or OSError(errno.EIO, f"the writer failed ({first})")


def _probe(folder: Path) -> OSError | None:
    try:
        fs = os.statvfs(folder)
    except OSError as err:  # the folder is gone or unreadable
        return err
    if fs.f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, "read-only file system")
    if not os.access(folder, os.W_OK):
        return OSError(errno.EACCES, "permission denied")
    if (fs.f_bfree if os.geteuid() == 0 else fs.f_bavail) * fs.f_frsize < _LOW_SPACE:
        return OSError(errno.ENOSPC, "no space left on device")
    import resource

    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return OSError(errno.EFBIG, "file too large")
    return None


def _fix(err: OSError) -> str:
    return _FIXES.get(err.errno or 0, f"{err.strerror or err} (write elsewhere: hydra.run.dir=...)")


def remove_stale_temps(folder: Path) -> list[Path]:
    """Remove the temp files and staging folders (`.<name>.tmp`) a killed writer left; they were never verified."""
    stale = sorted(folder.glob(".*.tmp")) if folder.is_dir() else []
    for tmp in stale:
        _remove(tmp)
    return stale


def _remove(tmp: Path) -> None:
    """Remove a temp file, or a staging folder and the files a writer put in it."""
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp)
    else:
        tmp.unlink(missing_ok=True)


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
