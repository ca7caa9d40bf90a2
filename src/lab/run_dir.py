"""Who may write a run dir, and which run `resume=auto` continues.

One process writes a run dir at a time: an exclusive lock on `<run dir>/.lock`, removed when the run ends and
released by the OS when the process dies, so a killed run never leaves a lock that holds. A new run refuses a dir
that holds another run's checkpoints unless it resumes that run or `overwrite=true` says to replace them.
`resume=auto` finds the newest run of the same task and config whose training did not finish (interrupted by a
signal, or killed before it wrote summary.json).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lab.errors import UserError

log = logging.getLogger(__name__)

LOCK = ".lock"
# keys that say how to start or record a run, not what it trains: a resumed run may change them
_NOT_IDENTITY = ("ckpt_path", "resume", "overwrite", "tags", "logger", "callbacks")


@contextlib.contextmanager
def claim(run_dir: Path, resuming_here: bool, overwrite: bool) -> Iterator[None]:
    """Hold `run_dir` for this process; refuse it when another process holds it, or when it holds another run's
    checkpoints that this run neither resumes nor was told to overwrite."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOCK, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(_in_use(run_dir)) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        _refuse_foreign_checkpoints(run_dir, resuming_here, overwrite)
        try:
            yield
        finally:
            (run_dir / LOCK).unlink(missing_ok=True)  # the run dir holds the run's files only; the lock ends here


def check_before_hydra(argv: list[str]) -> None:
    """The same refusals as `claim`, for an explicit `hydra.run.dir=` on the command line, before Hydra writes its
    .hydra/ files there (they would replace those of the run that owns the dir)."""
    overrides = dict(arg.split("=", 1) for arg in argv[1:] if "=" in arg and not arg.startswith("-"))
    if "hydra.run.dir" not in overrides or "-m" in argv or "--multirun" in argv:
        return
    run_dir = Path(overrides["hydra.run.dir"])
    if (run_dir / LOCK).is_file():
        with open(run_dir / LOCK) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(_in_use(run_dir)) from None
    ckpt_path = overrides.get("ckpt_path")
    here = ckpt_path is not None and Path(ckpt_path).resolve().parent == (run_dir / "checkpoints").resolve()
    resuming = here or overrides.get("resume") not in (None, "null")
    _refuse_foreign_checkpoints(run_dir, resuming, overrides.get("overwrite", "false").lower() == "true")


def _in_use(run_dir: Path) -> str:
    holder = (run_dir / LOCK).read_text().strip() or "another process"
    return (
        f"{run_dir} is in use by a running job ({holder}); two runs never share a run dir: leave hydra.run.dir "
        "unset (every run gets its own) or wait for that job to end"
    )


def _refuse_foreign_checkpoints(run_dir: Path, resuming_here: bool, overwrite: bool) -> None:
    existing = sorted(path.name for path in (run_dir / "checkpoints").glob("*.pt"))
    if existing and not resuming_here and not overwrite:
        last = run_dir / "checkpoints" / "last.pt"
        raise UserError(
            f"{run_dir} holds another run's checkpoints ({', '.join(existing)}); continue it with resume={run_dir} "
            f"(or ckpt_path={last}), start in a fresh dir (leave hydra.run.dir unset), or pass overwrite=true "
            "to replace them"
        )


def config_hash(config: Mapping[str, Any]) -> str:
    """What a run trains, as a short hash of its resolved config without the keys that only start or record it."""
    kept = {key: value for key, value in config.items() if key not in _NOT_IDENTITY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def unfinished(run_dir: Path) -> bool:
    """A run whose training stopped early: interrupted by a signal, or killed before it wrote summary.json."""
    if not (run_dir / "checkpoints" / "last.pt").is_file():
        return False
    summary = run_dir / "summary.json"
    if not summary.is_file():
        return True
    try:
        return json.loads(summary.read_text()).get("status") == "interrupted"
    except ValueError:
        return True  # a summary cut short: the run died while writing it


def newest_unfinished(runs_root: Path, wanted_hash: str, exclude: Path) -> Path | None:
    """The newest unfinished run dir under `runs_root` (outputs/<task_name>/) that trains the same config."""
    from lab.checkpointing.files import read  # torch: only when a resume is asked for

    candidates = sorted(
        (d for d in runs_root.iterdir() if d.is_dir() and d != exclude and unfinished(d)),
        key=lambda d: (d / "checkpoints" / "last.pt").stat().st_mtime,
        reverse=True,
    )
    for run_dir in candidates:
        try:
            saved = read(run_dir / "checkpoints" / "last.pt").get("config") or {}
        except UserError as err:
            log.warning("resume=auto skips %s: %s", run_dir, err)
            continue
        if config_hash(saved) == wanted_hash:
            return run_dir
    return None


def continued_run(resume: str | None, fresh_dir: Path, config: Mapping[str, Any]) -> Path | None:
    """The run dir this run continues in, or None for a new run. `resume=auto`: the newest unfinished run of the
    same task and config next to `fresh_dir` (None when there is none); `resume=<run dir>`: that run."""
    if resume is None:
        return None
    if resume == "auto":
        found = newest_unfinished(fresh_dir.parent, config_hash(config), exclude=fresh_dir)
        if found is None:
            log.info("resume=auto: no unfinished run of this config under %s; starting a new run", fresh_dir.parent)
        return found
    run_dir = Path(resume).expanduser()
    if not (run_dir / "checkpoints" / "last.pt").is_file():
        raise UserError(f"resume={resume}: no checkpoints/last.pt there; pass a run dir of scripts/train.py, or auto")
    return run_dir


def move_logs(fresh_dir: Path, run_dir: Path) -> None:
    """Continue the log file in `run_dir` (appending) instead of the dir Hydra made for this start, then remove
    that dir: one run, one dir."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == fresh_dir:
            moved = logging.FileHandler(run_dir / Path(handler.baseFilename).name, mode="a")
            moved.setFormatter(handler.formatter)
            moved.setLevel(handler.level)
            root.removeHandler(handler)
            handler.close()
            root.addHandler(moved)
    shutil.rmtree(fresh_dir, ignore_errors=True)
