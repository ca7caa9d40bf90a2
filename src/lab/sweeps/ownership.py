"""Decide who may write a sweep dir, and what `resume=auto` continues in it, as `lab.run_dir` does for a run dir.

One sweep at a time holds `<sweep dir>/.lock`. A new sweep refuses a dir with an earlier sweep's jobs, whose records
it would overwrite or mix into its summary, unless `resume=auto` continues that sweep: completed jobs are kept, the
others run again in their own dirs, and another job list is refused. Every refusal comes before the sweep writes.
No torch here, since the entry scripts call `check_sweep_dir_before_hydra` before Hydra starts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import run_dir as run_dirs
from lab.errors import UserError
from lab.run_dir import HYDRA_DIR, RUN_RECORDS, SWEEP_CONFIG

log = logging.getLogger(__name__)

JOB_RECORD = "sweep_job.json"  # what became of a job, written to its run dir when it ends (lab.sweeps.summary)
RESUME_KEYS = ("resume", "ckpt_path")  # how a job starts, not which job it is


# ---------------------------------------------------------------------------------------------- the jobs in a dir
@dataclass(frozen=True)
class RecordedJob:
    num: int
    dir: Path
    overrides: tuple[str, ...]  # the job's task overrides, as Hydra recorded them
    record: dict[str, Any] | None  # its sweep_job.json, or None if its process was killed before writing it

    @property
    def status(self) -> str | None:
        return self.record["status"] if self.record else None


def _read_job(job_dir: Path) -> RecordedJob | None:
    try:
        record = json.loads((job_dir / JOB_RECORD).read_text())
    except (OSError, ValueError):  # missing, or cut short by a kill
        record = None
    overrides = run_dirs.hydra_overrides(job_dir)
    if overrides is None:
        overrides = record["overrides"] if record else None
    num = record["job"] if record else None
    if num is None:  # killed before it recorded its end; Hydra's record of its start says which job it was
        _, mode, num = run_dirs.hydra_job(job_dir)
        num = num if mode == "MULTIRUN" else None  # not a single run put here
    if num is None or overrides is None:
        return None
    return RecordedJob(int(num), job_dir, tuple(str(o) for o in overrides), record)


def job_dirs(sweep_dir: Path) -> Iterator[Path]:
    """Yield the job dirs under `sweep_dir`, for any `hydra.sweep.subdir`: dirs with a `.hydra/` or a sweep_job.json,
    whose own subtrees (checkpoints, wandb, ...) are not searched."""
    for folder, subdirs, files in os.walk(sweep_dir):
        if folder != str(sweep_dir) and (HYDRA_DIR in subdirs or JOB_RECORD in files):
            subdirs.clear()
            yield Path(folder)
        else:
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))


def read_jobs(sweep_dir: Path) -> list[RecordedJob]:
    """Return the jobs the sweep in `sweep_dir` started, by number; one killed before Hydra recorded it is lost."""
    jobs = (_read_job(folder) for folder in job_dirs(sweep_dir))
    return sorted((job for job in jobs if job is not None), key=lambda job: job.num)


def identity(overrides: Sequence[str]) -> tuple[str, ...]:
    """Return what makes a job this job: its overrides as Hydra parses them, less the keys that say how it starts."""
    parsed = _parser().parse_overrides(list(overrides))
    return tuple(sorted(o.input_line for o in parsed if o.key_or_group not in RESUME_KEYS))


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


# ---------------------------------------------------------------------------------------------- refusals
def check(sweep_dir: Path, resuming: bool) -> None:
    """Refuse a sweep dir a running sweep holds, or one with an earlier sweep's jobs unless `resuming`. Read-only."""
    if run_dirs.is_held(sweep_dir):
        raise UserError(_in_use(sweep_dir))
    _refuse_earlier_sweep(sweep_dir, resuming)


def _refuse_earlier_sweep(sweep_dir: Path, resuming: bool) -> None:
    runs = [name for name in RUN_RECORDS if name != SWEEP_CONFIG and (sweep_dir / name).exists()]
    if runs:  # a single run's dir, resumed or not; a sweep's job dirs and records never mix with it
        raise UserError(
            f"hydra.sweep.dir={sweep_dir} holds a single run ({', '.join(runs)}); a sweep never writes into a "
            "run's dir: leave hydra.sweep.dir unset (every sweep gets its own), or pick another dir"
        )
    if resuming or not sweep_dir.is_dir():
        return
    earlier = [path.name for path in sweep_dir.iterdir() if path.name == SWEEP_CONFIG or _is_job_dir(path)]
    if earlier:
        jobs = sum(name != SWEEP_CONFIG for name in earlier)
        raise UserError(
            f"{sweep_dir} holds an earlier sweep ({jobs} job dirs); a sweep never writes over another: leave "
            "hydra.sweep.dir unset (every sweep gets its own), pick another dir, or add resume=auto to continue "
            "that sweep (the same command: its completed jobs are kept)"
        )


def _is_job_dir(path: Path) -> bool:
    return path.is_dir() and ((path / HYDRA_DIR).is_dir() or (path / JOB_RECORD).is_file())


def _in_use(sweep_dir: Path) -> str:
    return (
        f"{sweep_dir} is in use by a running sweep ({run_dirs.holder(sweep_dir)}); two sweeps never share a sweep "
        "dir: leave hydra.sweep.dir unset (every sweep gets its own), pick another dir, or wait for that sweep to end"
    )


def check_resumable(sweep_dir: Path, jobs: Sequence[Sequence[str]]) -> dict[int, RecordedJob]:
    """Return, by number, the jobs an earlier run of this sweep started in `sweep_dir`, for `resume=auto`.

    `jobs` is this sweep's list (job n is jobs[n]); `.status` says which completed. A dir whose recorded jobs are
    not this sweep's is refused."""
    recorded = {job.num: job for job in read_jobs(sweep_dir)}
    if not recorded:
        hint = "to continue an earlier sweep, pass its hydra.sweep.dir"
        log.warning("resume=auto: %s holds no job of an earlier run: the sweep starts (%s)", sweep_dir, hint)
    for num, job in recorded.items():
        ran, wanted = identity(job.overrides), identity(jobs[num]) if num < len(jobs) else None
        if ran != wanted:
            if wanted is None:
                differs = f"its job #{num} is not among this sweep's {len(jobs)} jobs"
            else:
                only_ran, only_wanted = [o for o in ran if o not in wanted], [o for o in wanted if o not in ran]
                differs = f"its job #{num} ran {_listed(only_ran)} where this sweep's has {_listed(only_wanted)}"
            raise UserError(
                f"resume=auto: {sweep_dir} holds another sweep ({differs}); continue it with the command that "
                "started it, or leave hydra.sweep.dir unset for a new sweep"
            )
    return recorded


def _listed(overrides: list[str]) -> str:
    return f"`{' '.join(overrides)}`" if overrides else "no other override"


# ---------------------------------------------------------------------------------------------- the lock
@contextlib.contextmanager
def claim(
    sweep_dir: Path, resuming: bool, jobs: Sequence[Sequence[str]] | None = None
) -> Iterator[dict[int, RecordedJob]]:
    """Hold `sweep_dir` for this sweep while the block runs. Yields, when `resuming` with a known job list `jobs`
    (the grid sweeper), the jobs an earlier run of this sweep started, by number; else an empty dict.

    A refusal ends the sweep with one line and exit code 1 before anything is written (a sweeper runs inside Hydra,
    whose report is many lines), and leaves no lock file."""
    try:
        check(sweep_dir, resuming)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        handle = run_dirs.take_lock(sweep_dir)
        if handle is None:
            raise UserError(_in_use(sweep_dir))
    except UserError as err:
        sys.exit(f"error: {err}")
    except OSError as err:  # a read-only outputs dir, a full disk
        sys.exit(
            f"error: hydra.sweep.dir={sweep_dir}: could not write {err.filename or sweep_dir} ({err.strerror}); "
            "choose a writable hydra.sweep.dir (or paths.outputs)"
        )
    try:
        try:
            _refuse_earlier_sweep(sweep_dir, resuming)  # again under the lock, as a sweep may have ended here since
            started = check_resumable(sweep_dir, jobs) if resuming and jobs is not None else {}
        except UserError as err:
            sys.exit(f"error: {err}")
        yield started
    finally:
        run_dirs.release_lock(sweep_dir, handle)


# ---------------------------------------------------------------------------------------------- before Hydra
def check_sweep_dir_before_hydra(argv: list[str]) -> None:
    """Apply `claim`'s refusals to an explicit `hydra.sweep.dir=` of a multirun (read as Hydra reads it), before
    Hydra writes anything. The sweeper's claim still checks every sweep dir, default or set in a config."""
    command = run_dirs.read_command_line(argv)
    if command is None:
        return  # not a valid command line; Hydra reports it
    multirun, values = command
    if multirun and isinstance(values.get("hydra.sweep.dir"), str):
        check(Path(values["hydra.sweep.dir"]).expanduser(), resuming=values.get("resume") == "auto")
