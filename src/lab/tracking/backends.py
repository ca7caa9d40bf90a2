"""The trackers a run can write to (`logger.backends`), each a small class behind one interface.

A :class:`Backend` is created and started by the Tracker on rank 0 only, with the run's :class:`RunInfo`: the
resolved config, the git provenance, names, the run dir and the tracker's own settings. It then receives every
metric event, the summary, files to attach and checkpoints, and is finished once with the run's status. Only `start`
and `log` must do something; the rest are optional (`check`, a classmethod, refuses bad settings before the run
writes anything). Each backend lives in its own module, imported only when chosen (wandb's is a slow import). A
tracker is its option (a ``TrackerConfig`` subclass in a module of src/lab/config/ or in an extension's options.py,
whose ``backend()`` returns the class) plus that class: nothing else names it (lab.config.trackers).
"""

from __future__ import annotations

import contextlib
import dataclasses
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


GIT_KEYS = ("git_commit", "git_branch", "git_dirty")


@dataclass
class RunInfo:
    """What every backend is told about the run it records."""

    run_dir: Path
    job_type: str = "train"
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config (+ hydra_overrides)
    provenance: dict[str, Any] = field(default_factory=dict)  # git_commit, git_branch, git_dirty, versions, ...
    settings: Any = None  # this tracker's own settings: its option of lab.config.trackers (`logger.<name>`)
    name: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    resume_id: str | None = None  # continue this run (wandb: its run id) instead of starting a new one
    continuing: bool = False  # the run continues in its own run dir: its files are appended to, not started afresh
    resumed_step: int | None = None  # continuing: the global step of the checkpoint it resumed from

    @property
    def git(self) -> dict[str, Any]:
        """Commit, branch and dirty flag of the code that runs."""
        return {key: self.provenance.get(key) for key in GIT_KEYS}


class TrackerStopped(RuntimeError):
    """A tracker that can record no more (its child process died): the run goes on without it."""


class Backend:
    """One tracker. Subclasses set `name` and implement `start` and `log`; the other hooks default to nothing."""

    name = ""
    folder: str | None = None  # the folder of the run dir it writes (checked writable before the run starts)
    keeps_histograms = False  # True: log_histograms records them (computing them costs: asked only then)
    slow_to_start = False  # True: runs in a child process unless logger.child_process=false (see child_process)
    # and started before the others: its child works while they start

    def __init__(self, run: RunInfo) -> None:
        self.run = run

    @classmethod
    def check(cls, run: RunInfo) -> None:
        """Refuse what cannot work (`run.settings`: its settings) before anything is written, as a UserError naming
        the problem and the fix (a bad tracking URI, a server that does not answer). Called by the Tracker
        in the training process: no slow imports here."""

    def start(self) -> None:
        raise NotImplementedError

    def log(self, metrics: Mapping[str, Any], step: int, epoch: int | None) -> None:
        """One event: `step` = global optimizer step, `epoch` = the 1-based epoch it belongs to (None outside one)."""
        raise NotImplementedError

    def log_histograms(self, histograms: Mapping[str, tuple[list[float], list[float]]], step: int) -> None:
        """Distributions at a step, each as (counts, bin edges): only when `keeps_histograms` says so."""

    def summary(self, values: Mapping[str, Any]) -> None:
        """Best and final values (called several times; later values win)."""

    def save_file(self, path: Path) -> None:
        """Attach a file of the run dir (model summary, log, git diff); backends that live in the run dir skip it."""

    def log_checkpoint(self, path: Path, alias: str) -> None:
        """Keep a checkpoint with the run (wandb: a `model` artifact)."""

    def finish(self, status: str) -> dict[str, Any]:
        """Close the record with the run's status; returns entries for summary.json (e.g. wandb's run id)."""
        return {}

    def ref(self) -> dict[str, Any]:
        """How other runs refer to this record (wandb: id and path); {} when the run dir says it all."""
        return {}


def create(name: str, run: RunInfo, child_process: bool = True) -> Backend:
    """The tracker `name` for `run` (`run.settings`: its settings; None: its option's defaults). One that is slow to
    start runs in a child process unless `child_process` is false (`logger.child_process`)."""
    if name not in trackers():
        raise ValueError(f"unknown tracker {name!r}; choose among {', '.join(trackers())}")
    if run.settings is None:
        run = dataclasses.replace(run, settings=tracker_settings(None, name))
    backend_class = run.settings.backend()
    # the child's pipes are passed as POSIX file descriptors (Linux, macOS)
    if backend_class.slow_to_start and child_process and os.name == "posix":
        from lab.tracking.child_process import ChildProcessBackend

        return ChildProcessBackend(name, run, backend_class.keeps_histograms)
    return backend_class(run)


def backend(name: str, logger: Any = None) -> type[Backend]:
    """The Backend class of the tracker `name` (its module imported now), as a `logger` config node sets it up."""
    return tracker_settings(logger, name).backend()


def folder(name: str, logger: Any = None) -> str | None:
    """The run-dir folder the tracker `name` writes into, if any (None for an unknown name: `create` refuses it)."""
    return backend(name, logger).folder if name in trackers() else None


def in_start_order(logger: Any) -> list[str]:
    """The trackers a `logger` config turns on (``lab.config.trackers.chosen``), those slow to start first."""
    names = chosen(logger)
    return sorted(names, key=lambda name: not (name in trackers() and backend(name, logger).slow_to_start))


def plain(value: Any) -> Any:
    """Config and summary values as YAML/CSV/JSON can hold them: containers as dicts and lists, paths and other
    objects as strings, non-finite floats as strings (JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a numpy / torch scalar
        return plain(value.item())
    return str(value)


def number(value: Any) -> float | None:
    """A metric value as a float, or None for what is not a number (strings, tensors with more than one value)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
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
    """A run's own record file (metrics.jsonl, csv/metrics.csv), line-buffered so each event is on disk as it happens.
    One run per file: a new run starts it afresh (the run it replaces in this dir does not stay above it); a
    continuing run appends, after dropping a last line cut short by its previous attempt's end and, given the step
    it resumed from (`resumed_step`; `step_of(line)` reads a line's step), the records after it: its previous attempt
    got further than its last checkpoint, and those steps are logged again."""
    if continuing:
        drop_partial_line(path)
        if resumed_step is not None and step_of is not None:
            drop_records_after(path, resumed_step, step_of)
    return open(path, "a" if continuing else "w", buffering=1, **kwargs)


def drop_records_after(path: Path, step: int, step_of: Callable[[str], int | None]) -> None:
    """Rewrite `path` without the lines whose step is after `step` (lines with no step, a header, are kept)."""
    try:
        with open(path, newline="") as handle:  # newline="": line ends kept as written (csv's \r\n)
            lines = handle.read().splitlines(keepends=True)
    except FileNotFoundError:
        return
    kept = [line for line in lines if (line_step := step_of(line)) is None or line_step <= step]
    if len(kept) == len(lines):
        return
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        handle.write("".join(kept))
    log.info("%s: dropped %d records after step %d, where this run resumes", path, len(lines) - len(kept), step)


def drop_partial_line(path: Path) -> None:
    """Truncate `path` after its last newline: a process killed mid-write leaves a line without one, and the next
    record appended would be glued onto it (one unreadable line instead of two records)."""
    try:
        handle = open(path, "rb+")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, os.SEEK_END)
        keep = end
        while keep > 0:  # backwards, a block at a time: only the tail of a long file is read
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


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Disk-full and permission errors while writing `path` (a file or the folder written into) as one line naming
    it and the fix (lab.files' table)."""
    try:
        yield
    except OSError as err:
        if err.errno not in _FIXES:
            raise
        raise UserError(f"cannot write {path}: {_FIXES[err.errno]}{_make_writable(path)}") from err


def check_writable(folder: Path) -> None:
    """Refuse, before anything is written, a folder of the run dir that exists but cannot be written (a resume into
    a dir made read-only): otherwise the tracker fails at its first write, after the run began."""
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        read_only_mount = os.statvfs(folder).f_flag & os.ST_RDONLY
        fix = _FIXES[errno.EROFS if read_only_mount else errno.EACCES]
        raise UserError(f"cannot write {folder}: {fix}{'' if read_only_mount else _make_writable(folder)}")


def _make_writable(path: Path) -> str:
    """The other fix for an existing path made read-only: make it writable again."""
    if path.exists() and not os.access(path, os.W_OK):
        return f"; or make it writable again: chmod u+w {path}"
    return ""
