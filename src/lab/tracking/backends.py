"""Define the interface of the trackers a run can write to (`logger.backends`), one small class each.

The Tracker creates and starts a `Backend` on rank 0 only. Each backend lives in its own module, imported only when
chosen, since wandb's import is slow. A tracker is its option (a `TrackerConfig` subclass whose `backend()` returns
the class) plus that class; nothing else names it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lab.config.trackers import chosen, tracker_settings, trackers
from lab.errors import UserError
from lab.files import _FIXES, atomic_path

log = logging.getLogger(__name__)


@dataclass
class RunInfo:
    """What every backend is told about the run it records."""

    run_dir: Path
    job_type: str = "train"
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config, plus hydra_overrides
    provenance: dict[str, Any] = field(default_factory=dict)  # git_commit, git_branch, git_dirty, versions, ...
    settings: Any = None  # this tracker's option of lab.config.trackers (`logger.<name>`)
    name: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    resume_id: str | None = None  # the record to continue (a wandb run id) instead of starting a new one
    continuing: bool = False  # the run continues in its own dir, so its files are appended to
    resumed_step: int | None = None  # when continuing, the global step of the checkpoint resumed from

    @property
    def git(self) -> dict[str, Any]:
        """Return the commit, branch and dirty flag of the code that runs."""
        return {key: self.provenance.get(key) for key in ("git_commit", "git_branch", "git_dirty")}


class TrackerStopped(RuntimeError):
    """A tracker can record no more because its child process died. The run goes on without it."""


class Backend:
    """One tracker. Subclasses set `name` and implement `start` and `log`; the other hooks do nothing by default."""

    name = ""
    folder: str | None = None  # the run-dir folder it writes, checked writable before the run starts
    keeps_histograms = False  # True if log_histograms records them; only then are they computed, as that costs
    # A slow tracker runs in a child process unless logger.child_process=false, and starts before the others so
    # its child works while they start.
    slow_to_start = False

    def __init__(self, run: RunInfo) -> None:
        self.run = run

    @classmethod
    def check(cls, run: RunInfo) -> None:
        """Raise a UserError naming the problem and fix if `run.settings` cannot work, before anything is written.

        Say, a bad tracking URI or a server that does not answer. It runs in the training process, so no slow
        imports here."""

    def start(self) -> None:
        raise NotImplementedError

    def log(self, metrics: Mapping[str, Any], step: int, epoch: int | None) -> None:
        """Log one event at global optimizer `step` and 1-based `epoch` (None outside an epoch)."""
        raise NotImplementedError

    def log_histograms(self, histograms: Mapping[str, tuple[list[float], list[float]]], step: int) -> None:
        """Log distributions at a step as (counts, bin edges). Called only if `keeps_histograms` is set."""

    def summary(self, values: Mapping[str, Any]) -> None:
        """Record best and final values. It may be called several times; later values win."""

    def save_file(self, path: Path) -> None:
        """Attach a run-dir file (model summary, log, git diff). Backends that live in the run dir skip it."""

    def log_checkpoint(self, path: Path, alias: str) -> None:
        """Keep a checkpoint with the run, as wandb does with a `model` artifact."""

    def finish(self, status: str) -> dict[str, Any]:
        """Close the record with the run's status. Return entries for summary.json, such as wandb's run id."""
        return {}

    def ref(self) -> dict[str, Any]:
        """Return how other runs refer to this record (wandb's id and path), or {} if the run dir says it all."""
        return {}


def backend(name: str, logger: Any = None) -> type[Backend]:
    """Import and return the Backend class of the tracker `name`, as the `logger` config node sets it up."""
    return tracker_settings(logger, name).backend()


def in_start_order(logger: Any) -> list[str]:
    """Return the trackers a `logger` config turns on, those slow to start first."""
    names = chosen(logger)
    return sorted(names, key=lambda name: not (name in trackers() and backend(name, logger).slow_to_start))


def plain(value: Any) -> Any:
    """Convert config and summary values to what YAML, CSV and JSON can hold.

    Containers become dicts and lists. Paths, other objects and non-finite floats become strings (JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a numpy or torch scalar
        return plain(value.item())
    return str(value)


def number(value: Any) -> float | None:
    """Return a metric value as a float, or None for strings and tensors with more than one value."""
    if isinstance(value, (int, float)):  # bool too
        return float(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return number(value.item())
    return None


def open_record(
    path: Path,
    continuing: bool,
    resumed_step: int | None = None,
    step_of: Callable[[str], int | None] | None = None,
    **kwargs: Any,
) -> IO:
    """Open a run's record file (metrics.jsonl, csv/metrics.csv), line-buffered so each event reaches disk at once.

    A new run starts the file afresh, so a replaced run does not stay above it. A continuing run appends. First it
    drops a last line cut short by the last attempt, and the records after `resumed_step` (`step_of(line)` reads a
    line's step): the last attempt got past its last checkpoint, and those steps are logged again."""
    if continuing:
        _drop_unrecorded(path, resumed_step, step_of)
    return open(path, "a" if continuing else "w", buffering=1, **kwargs)


def _drop_unrecorded(path: Path, step: int | None, step_of: Callable[[str], int | None] | None) -> None:
    """Truncate `path` after its last newline, so the next record is not glued onto a line a kill cut short. Then
    rewrite it without the lines after `step`; lines with no step, such as a header, are kept."""
    try:
        handle = open(path, "rb+")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, os.SEEK_END)
        keep = end
        while keep > 0:  # backwards a block at a time: a long run's record is not read whole to find its last line
            start = max(0, keep - 65536)
            handle.seek(start)
            newline = handle.read(keep - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            keep = start
        if keep < end:
            handle.truncate(keep)
            log.warning("%s: dropped a last line cut short (%d bytes) by the previous attempt's end", path, end - keep)
    if step is None or step_of is None:
        return
    with open(path, newline="") as text:  # keep line ends as written (csv's \r\n)
        lines = text.read().splitlines(keepends=True)
    kept = [line for line in lines if (line_step := step_of(line)) is None or line_step <= step]
    if len(kept) == len(lines):
        return
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as rewritten:
        rewritten.write("".join(kept))
    log.info("%s: dropped %d records after step %d, where this run resumes", path, len(lines) - len(kept), step)


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn disk-full and permission errors while writing `path` into one line naming it and the fix."""
    try:
        yield
    except OSError as err:
        if err.errno not in _FIXES:
            raise
        raise UserError(f"cannot write {path}: {_FIXES[err.errno]}{_make_writable(path)}") from err


def check_writable(folder: Path) -> None:
    """Refuse an existing run-dir folder that cannot be written (say, on a resume) now, not at a write mid-run."""
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        read_only_mount = os.statvfs(folder).f_flag & os.ST_RDONLY
        fix = _FIXES[errno.EROFS if read_only_mount else errno.EACCES]
        raise UserError(f"cannot write {folder}: {fix}{'' if read_only_mount else _make_writable(folder)}")


def _make_writable(path: Path) -> str:
    """Return the other fix for an existing read-only path: make it writable again."""
    if path.exists() and not os.access(path, os.W_OK):
        return f"; or make it writable again: chmod u+w {path}"
    return ""
