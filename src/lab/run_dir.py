"""Decide who may write a run dir, which run `resume=` continues, and undo a refused start.

A run dir is the user's record of a run: nothing here deletes or rewrites what another run, or the user, put there.
Before Hydra writes, `check` refuses a dir that cannot be written, that a running job holds, or that holds another run
or a sweep. While a run writes, `claim` holds `<run dir>/.lock`. `undone_on_refusal` removes what Hydra wrote for a
start refused after it wrote, never with rmtree. `continued_run` decides which run `resume=auto`, a SLURM requeue or a
torchrun restart continues. docs/architecture.md ("Run dirs are owned") has the rules in full.

No torch import at module level: the entry scripts call this before Hydra starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import yaml

from lab import upstream
from lab.errors import UserError

log = logging.getLogger(__name__)

LOCK = ".lock"
HYDRA_DIR = ".hydra"
TORCHRUN_RECORD = "torchrun.json"  # the torchrun job (its rendezvous id) that runs in this dir: restarts continue it
SWEEP_CONFIG = "multirun.yaml"  # a sweep dir's record of its sweep, written by the sweeper before the first job
# any of these marks a dir as holding a run (or a sweep)
RUN_RECORDS = (
    HYDRA_DIR,
    "checkpoints",
    "summary.json",
    "metrics.jsonl",
    "sweep_job.json",
    TORCHRUN_RECORD,
    SWEEP_CONFIG,
)
# keys that say how to start or record a run, not what it trains: a resumed run may change them
_NOT_IDENTITY = ("ckpt_path", "resume", "overwrite", "tags", "logger", "callbacks")


# ---------------------------------------------------------------------------------------------- before Hydra
@dataclass(frozen=True)
class _Before:
    """What a run dir held before Hydra wrote into it: its entries and the size of each file Hydra may write."""

    existed: bool
    entries: frozenset[str] = frozenset()
    sizes: dict[str, int] = field(default_factory=dict)
    dirs: frozenset[str] = frozenset()
    records: dict[str, tuple[int, int]] = field(default_factory=dict)  # the run's own files: (size, mtime_ns)


_before: dict[Path, _Before] = {}  # explicit run dirs, by resolved path; a dir not here was new (a timestamped one)
hydra_dirs: list[Path] = []  # the run dirs Hydra made or used for this process (noted by lab.cli), to undo


def check(run_dir: Path, script: str, config: Mapping[str, Any]) -> str | None:
    """Refuse a run dir that `script` may not write, before Hydra writes `.hydra/` into it.

    `run_dir` is the dir as Hydra resolved it, whatever the spelling, and `config` the composed config. Returns the
    subdir for this attempt's Hydra config when training continues a run in place, else None."""
    _require_writable(run_dir)
    _before[run_dir.resolve()] = _snapshot(run_dir)
    if is_held(run_dir):
        raise UserError(_in_use(run_dir))
    held = [name for name in RUN_RECORDS if (run_dir / name).exists()]
    if not held:
        return None
    if script == "export" and _killed_export(run_dir, held, config.get("overrides") or ()):
        return attempt_subdir(run_dir)
    if script != "train":
        raise UserError(
            f"hydra.run.dir={run_dir} holds a run ({', '.join(held)}); {script} writes a run dir of its own and "
            "never into another run's: leave hydra.run.dir unset, or name a new dir"
        )
    if SWEEP_CONFIG in held:
        raise UserError(
            f"hydra.run.dir={run_dir} is a sweep dir ({SWEEP_CONFIG}); a single run never writes into a sweep: "
            "leave hydra.run.dir unset, or continue the sweep with its own command and resume=auto"
        )
    if _continues_in_place(run_dir, config):
        return attempt_subdir(run_dir)
    if config.get("overwrite") is True or str(config.get("overwrite")).lower() == "true":
        return None
    raise UserError(_foreign_run(run_dir, held, config.get("resume")))


def read_command_line(argv: list[str]) -> tuple[bool, dict[str, Any]] | None:
    """Parse an entry script's command line as Hydra will, so `'quoted'` values and `+`/`++` prefixes name the same
    key; None when Hydra will refuse it (it says why). Returns whether it is a multirun (`-m`, hydra.mode=MULTIRUN
    or a hparams_search, which sets it) and the value of each key that is not swept (the last wins, as in Hydra)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        args = upstream.hydra_args_parser().parse_args(argv[1:])
        parsed = OverridesParser.create().parse_overrides(args.overrides)
    except (SystemExit, HydraException):
        return None
    values = {o.key_or_group: o.value() for o in parsed if not o.is_delete() and not o.is_sweep_override()}
    multirun = args.multirun or str(values.get("hydra.mode", "")).upper() == "MULTIRUN"
    return multirun or values.get("hparams_search") is not None, values


def _continues_in_place(run_dir: Path, overrides: Mapping[str, Any]) -> bool:
    resume, ckpt_path = overrides.get("resume"), overrides.get("ckpt_path")
    job = _restarted_job()
    if job is not None and _torchrun_job_of(run_dir) == job:
        return True  # a torchrun restart of the job there (same rendezvous id), with or without a last.pt
    if resume == "auto" or requeued():
        return unfinished(run_dir) or never_saved(run_dir)
    if resume is not None:
        return _same(Path(str(resume)), run_dir)
    return ckpt_path is not None and _same(Path(str(ckpt_path)).parent, run_dir / "checkpoints")


def _killed_export(run_dir: Path, held: list[str], overrides: Sequence[str]) -> bool:
    """Whether `run_dir` holds an export by this same command stopped before it finished: no manifest, and no
    summary.json or one that says `interrupted` (`lab.workflows.export` removes the staging folders)."""
    if not set(held) <= {HYDRA_DIR, "metrics.jsonl", "summary.json"} or (run_dir / "export_manifest.json").exists():
        return False
    if "summary.json" in held and _status(run_dir) != "interrupted":
        return False
    recorded = hydra_overrides(run_dir)
    if hydra_job(run_dir)[0] != "export" or recorded is None:
        return False  # no readable record of what ran there, so not known to be this export
    earlier = read_command_line(["export.py", *recorded])
    ours = read_command_line(["export.py", *overrides])  # this run's task overrides, as Hydra records them
    return earlier is not None and ours is not None and earlier[1] == ours[1]


def hydra_job(run_dir: Path) -> tuple[Any, Any, Any]:
    """Return the entry config, mode and job number in `run_dir/.hydra/hydra.yaml`; Nones if it cannot be read."""
    try:
        hydra = yaml.safe_load((run_dir / HYDRA_DIR / "hydra.yaml").read_text())["hydra"]
        return hydra["job"].get("config_name"), hydra.get("mode"), hydra["job"].get("num")
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None, None, None


def hydra_overrides(run_dir: Path) -> list[str] | None:
    """Return the task overrides in `run_dir/.hydra/overrides.yaml`, or None if it cannot be read."""
    try:
        return [str(o) for o in yaml.safe_load((run_dir / HYDRA_DIR / "overrides.yaml").read_text()) or []]
    except (OSError, yaml.YAMLError, TypeError):
        return None


def _same(a: Path, b: Path) -> bool:
    return a.expanduser().resolve() == b.expanduser().resolve()


def attempt_subdir(run_dir: Path) -> str:
    """Return where Hydra writes this attempt's config; `.hydra/` holds the first attempt's."""
    earlier = list((run_dir / HYDRA_DIR).glob("attempt-*"))
    return f"{HYDRA_DIR}/attempt-{len(earlier) + 2}"


def forget_replaced(run_dir: Path) -> None:
    """Drop what Hydra kept of a run that `overwrite=true` replaces: its `.hydra/attempt-<n>/` configs, and its
    lines at the head of a log that existed before this process."""
    for attempt in (run_dir / HYDRA_DIR).glob("attempt-*"):
        for file in attempt.iterdir():
            file.unlink()
        attempt.rmdir()
    before = _before.get(run_dir.resolve(), _Before(existed=False))
    for name, size in before.sizes.items():
        if name.endswith(".log") and "/" not in name:
            with open(run_dir / name, "r+b") as log_file:  # in place, as the log handler keeps appending to it
                log_file.seek(size)
                ours = log_file.read()
                log_file.seek(0)
                log_file.write(ours)
                log_file.truncate()


def _foreign_run(run_dir: Path, held: list[str], resume: Any) -> str:
    last = run_dir / "checkpoints" / "last.pt"
    if resume == "auto":
        state = "has finished" if last.is_file() else "has no checkpoints/last.pt to continue from"
        return (
            f"hydra.run.dir={run_dir} holds a run that {state}, so resume=auto has nothing to continue there: start "
            "in a fresh dir (leave hydra.run.dir unset), or pass overwrite=true to replace that run"
        )
    how = f"continue it with resume={run_dir}, " if last.is_file() else ""
    return (
        f"{run_dir} holds another run ({', '.join(held)}); {how}start in a fresh dir (leave hydra.run.dir unset), "
        "or pass overwrite=true to replace it"
    )


def _require_writable(run_dir: Path) -> None:
    """Refuse a run dir Hydra cannot create or write, in one line instead of Hydra's traceback."""
    path = run_dir.absolute()
    existing = next(p for p in (path, *path.parents) if os.path.lexists(p))  # lexists: False on a name too long
    if not existing.is_dir():
        raise UserError(f"hydra.run.dir={run_dir}: {existing} is a file, not a directory; choose another hydra.run.dir")
    name_max = os.pathconf(existing, "PC_NAME_MAX")
    too_long = next((part for part in run_dir.parts if len(os.fsencode(part)) > name_max), None)
    if too_long is not None or len(os.fsencode(str(run_dir.absolute()))) >= os.pathconf(existing, "PC_PATH_MAX"):
        name = f"the name {too_long[:40]}... is over {name_max} bytes" if too_long else "the path is too long"
        raise UserError(f"hydra.run.dir={run_dir}: {name}, more than the file system allows; choose a shorter one")
    if not os.access(existing, os.W_OK):
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
        why = "is on a read-only file system" if read_only else "is not writable (permission denied)"
        raise UserError(f"hydra.run.dir={run_dir}: {existing} {why}; choose a writable hydra.run.dir")


def _snapshot(run_dir: Path) -> _Before:
    if not run_dir.is_dir():
        return _Before(existed=False)
    sizes, dirs = _hydra_files(run_dir)
    return _Before(True, frozenset(p.name for p in run_dir.iterdir()), sizes, dirs, _records(run_dir))


# files a run writes itself, not Hydra: if one changed, the run got as far as writing its own records
_OWN_RECORDS = ("summary.json", "metrics.jsonl", "sweep_job.json", "checkpoints/last.pt", "checkpoints/best.pt")


def _records(run_dir: Path) -> dict[str, tuple[int, int]]:
    stats = {name: (run_dir / name).stat() for name in _OWN_RECORDS if (run_dir / name).is_file()}
    return {name: (stat.st_size, stat.st_mtime_ns) for name, stat in stats.items()}


def _hydra_files(run_dir: Path) -> tuple[dict[str, int], frozenset[str]]:
    """Return the size of each file Hydra writes (`.hydra/**`, top-level logs) and the dirs under `.hydra/`."""
    hydra = run_dir / HYDRA_DIR
    inside = sorted(hydra.rglob("*")) if hydra.is_dir() else []
    files = [p for p in inside if p.is_file()] + [p for p in run_dir.glob("*.log") if p.is_file()]
    sizes = {str(p.relative_to(run_dir)): p.stat().st_size for p in files}
    dirs = frozenset(str(p.relative_to(run_dir)) for p in [hydra, *inside] if p.is_dir())
    return sizes, dirs


# ------------------------------------------------------------------------------------- a refused start, undone
@contextlib.contextmanager
def undone_on_refusal() -> Iterator[None]:
    """Remove what Hydra wrote if the script exits non-zero (a refusal, Ctrl-C) before the run wrote records."""
    try:
        yield
    except SystemExit as stop:
        if stop.code not in (0, None):
            for run_dir in hydra_dirs:
                discard_hydra_files(run_dir)
        raise


def discard_hydra_files(run_dir: Path) -> bool:
    """Remove what Hydra wrote into `run_dir` for this process, if the dir holds nothing else new; True if done."""
    if not run_dir.is_dir():
        return False
    before = _before.get(run_dir.resolve(), _Before(existed=False))
    sizes, dirs = _hydra_files(run_dir)
    new_entries = {p.name for p in run_dir.iterdir()} - before.entries - {HYDRA_DIR, LOCK}
    if any(not name.endswith(".log") for name in new_entries) or _records(run_dir) != before.records:
        return False  # the run wrote records of its own (perhaps into a continued run's files), so keep them
    for name, size in sizes.items():
        path = run_dir / name
        if name not in before.sizes:
            path.unlink(missing_ok=True)
        elif size > before.sizes[name]:
            os.truncate(path, before.sizes[name])  # cut the lines appended to a log that was there
    for name in sorted(dirs - before.dirs, key=len, reverse=True):
        with contextlib.suppress(OSError):
            (run_dir / name).rmdir()
    if not before.existed:
        with contextlib.suppress(OSError):  # never rmtree, so a dir that is not empty stays
            run_dir.rmdir()
    return True


# -------------------------------------------------------------------------------------------- while a run writes
def is_held(folder: Path) -> bool:
    """Whether a running process holds `<folder>/.lock` (a run or sweep dir's). A lock file left by a dead process
    does not hold."""
    if not (folder / LOCK).is_file():
        return False
    with open(folder / LOCK) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def holder(folder: Path) -> str:
    try:
        return (folder / LOCK).read_text().strip() or "another process"
    except OSError:
        return "another process"


def take_lock(folder: Path) -> IO | None:
    """Lock `<folder>/.lock` with our pid in it; None if another process holds it. Retries if a holder that ended
    removed the file meanwhile."""
    path = folder / LOCK
    while True:
        handle = open(path, "a+")  # noqa: SIM115 (held open, as the lock lives as long as it)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None  # the lock file is the holder's, not ours to remove
        try:
            same = os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}\n")
            handle.flush()
            return handle
        handle.close()


def release_lock(folder: Path, handle: IO) -> None:
    """Remove `<folder>/.lock` while holding it (a waiting `take_lock` retries on a new file), then release it."""
    (folder / LOCK).unlink(missing_ok=True)
    handle.close()


@contextlib.contextmanager
def claim(run_dir: Path, resuming_here: bool, overwrite: bool) -> Iterator[None]:
    """Hold `run_dir` for this process, refusing it if another process holds it or it holds another run's
    checkpoints that this run neither resumes nor overwrites. A refused claim leaves no lock file."""
    _refuse_foreign_checkpoints(run_dir, resuming_here, overwrite)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = take_lock(run_dir)
    if lock is None:
        raise UserError(_in_use(run_dir))
    _held.append(lock)
    try:
        _refuse_foreign_checkpoints(run_dir, resuming_here, overwrite)  # again, now no one else writes
        yield
    finally:
        if lock in _held:
            _held.remove(lock)
        release_lock(run_dir, lock)


# The run-dir locks this process holds. A forked child (a DataLoader worker) shares the lock's open file, and flock
# holds while any process has it open. After a SIGKILL (say, by the OOM killer) the workers notice only at their
# next status check (5 s), and until then they would keep the dir "in use" and refuse the resume.
_held: list[Any] = []


def _release_in_child() -> None:
    for lock in _held:
        lock.close()  # the child's copy only; the parent's file and lock stay open
    _held.clear()


os.register_at_fork(after_in_child=_release_in_child)


def _in_use(run_dir: Path) -> str:
    return (
        f"{run_dir} is in use by a running job ({holder(run_dir)}); two runs never share a run dir: leave "
        "hydra.run.dir unset (every run gets its own) or wait for that job to end"
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


# ----------------------------------------------------------------------------------------- which run continues
def config_hash(config: Mapping[str, Any]) -> str:
    """Hash what a run trains: its resolved config without the keys that only start or record it."""
    kept = {key: value for key, value in config.items() if key not in _NOT_IDENTITY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def record_torchrun_job(run_dir: Path) -> None:
    """On rank 0, note the torchrun job's id in the run dir, so its restarted workers find the run to continue."""
    from lab.distributed import env

    job = env.torchrun_job()
    if job is not None and _torchrun_job_of(run_dir) != job:
        (run_dir / TORCHRUN_RECORD).write_text(json.dumps({"rdzv_id": job}) + "\n")


def _torchrun_job_of(run_dir: Path) -> str | None:
    try:
        return str(json.loads((run_dir / TORCHRUN_RECORD).read_text())["rdzv_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _restarted_job() -> str | None:
    """Return the torchrun job this process restarts: torchrun restarted its workers, or a requeued SLURM job runs
    torchrun again under the same rendezvous id (`--rdzv-id=$SLURM_JOB_ID`, docs/distributed.md); else None."""
    from lab.distributed import env

    job = env.torchrun_job()
    return job if job is not None and (env.torchrun_restart() > 0 or requeued()) else None


def restarted_run(run_dir: Path, siblings: bool = True) -> Path | None:
    """Return the run dir of the torchrun job this process restarts: `run_dir` itself (an explicit hydra.run.dir),
    else the newest dir next to the timestamped one Hydra made for this attempt that records the job; else None."""
    job = _restarted_job()
    if job is None:
        return None
    if _torchrun_job_of(run_dir) == job:
        return run_dir
    if siblings and run_dir.parent.is_dir():
        found = [d for d in run_dir.parent.iterdir() if d.is_dir() and d != run_dir and _torchrun_job_of(d) == job]
        if found:
            return max(found, key=lambda d: (d / TORCHRUN_RECORD).stat().st_mtime)
    log.warning("restarted torchrun job %s: no run dir records it; starting a new run", job)
    return None


def requeued() -> bool:
    """Whether this is a SLURM job started again after a preemption or time limit (it continues in its own dir)."""
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0


def unfinished(run_dir: Path) -> bool:
    """Whether `run_dir` has a `last.pt` whose training did not complete: interrupted, failed (its last.pt is
    good), or killed before it wrote summary.json."""
    return (run_dir / "checkpoints" / "last.pt").is_file() and _status(run_dir) in (None, "interrupted", "failed")


def never_saved(run_dir: Path) -> bool:
    """Whether `run_dir` held a training run stopped before it saved a checkpoint or finished, which `resume=auto`
    or a requeue starts again there as the same run (its first attempt's `.hydra/` and log kept)."""
    before = _before.get(run_dir.resolve())
    if before is None or HYDRA_DIR not in before.entries:
        return False  # Hydra made this dir for this process, or no run of the command line wrote it
    if (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir()):
        return False
    # not a sweep job's; without a record we can read, not ours to start again
    a_training_run = hydra_job(run_dir)[:2] == ("train", "RUN")
    return a_training_run and _status(run_dir) in (None, "interrupted", "failed")


def _status(run_dir: Path) -> str | None:
    """Return the status in a run's summary.json, or None if it is missing or cut short."""
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def training_left(progress: Mapping[str, Any], max_epochs: int, max_steps: int) -> bool:
    """Whether a checkpoint at `progress` has epochs and steps left. `max_steps` <= 0 sets no step limit."""
    return progress["epoch"] < max_epochs and (max_steps <= 0 or progress["global_step"] < max_steps)


def newest_unfinished(runs_root: Path, config: Mapping[str, Any], exclude: Path) -> Path | None:
    """Return the newest unfinished run under `runs_root` (outputs/<task_name>/) of this config, with training left."""
    from lab.checkpointing.storage import read  # torch: only when a resume is asked for

    wanted = config_hash(config)
    candidates = sorted(
        (d for d in runs_root.iterdir() if d.is_dir() and d != exclude and unfinished(d)),
        key=lambda d: (d / "checkpoints" / "last.pt").stat().st_mtime,
        reverse=True,
    )
    for run_dir in candidates:
        try:
            saved = read(run_dir / "checkpoints" / "last.pt")
        except UserError as err:
            log.warning("resume=auto skips %s: %s", run_dir, err)
            continue
        limits = config["trainer"]["max_epochs"], config["trainer"]["max_steps"]
        if config_hash(saved.get("config") or {}) == wanted and training_left(saved["progress"], *limits):
            return run_dir
    return None


def continued_run(resume: str | None, run_dir: Path, config: Mapping[str, Any], siblings: bool = True) -> Path | None:
    """Return the run dir this run continues in, or None for a new run. `run_dir` is the one Hydra made.

    A restarted torchrun worker continues its own job's dir; `resume=auto` and a requeued SLURM job the unfinished
    run in `run_dir`, else (`resume=auto` with `siblings`) the newest unfinished run of this config next to it.
    With no last.pt there yet, a run starts over in its dir. `resume=<run dir>` continues that run."""
    found = restarted_run(run_dir, siblings)
    if found is None and (resume == "auto" or requeued()) and (unfinished(run_dir) or never_saved(run_dir)):
        found = run_dir
    if found is not None:
        if (found / "checkpoints" / "last.pt").is_file():
            _require_same_config(found, config)
        return found
    if resume is None:
        return None
    if resume == "auto":
        nearby = siblings and run_dir.parent.is_dir()
        found = newest_unfinished(run_dir.parent, config, exclude=run_dir) if nearby else None
        if found is None:
            log.info("resume=auto: no unfinished run of this config under %s; starting a new run", run_dir.parent)
        return found
    resumed = Path(resume).expanduser()
    if not (resumed / "checkpoints" / "last.pt").is_file():
        raise UserError(f"resume={resume}: no checkpoints/last.pt there; pass a run dir of scripts/train.py, or auto")
    return resumed


def _require_same_config(run_dir: Path, config: Mapping[str, Any]) -> None:
    """Refuse to continue a run in place with another config, naming the keys that differ."""
    from lab.checkpointing.storage import read

    saved = read(run_dir / "checkpoints" / "last.pt").get("config") or {}
    if config_hash(saved) == config_hash(config):
        return
    differ = sorted(k for k in {*saved, *config} - set(_NOT_IDENTITY) if saved.get(k) != config.get(k))
    raise UserError(
        f"{run_dir} holds an unfinished run of another config ({', '.join(differ)} differ); resume=auto continues "
        "it only with the same config: rerun its own command (its .hydra/overrides.yaml), or leave hydra.run.dir "
        "unset for a new run"
    )


# ---------------------------------------------------------------------------------------- training's run dir
@contextlib.contextmanager
def owned(cfg: Any, run_dir: Path, siblings: bool = True) -> Iterator[Path]:
    """Yield the dir a training run writes, the run `resume=` continues (its last.pt then `cfg.ckpt_path`) or else
    `run_dir`, and hold it while the run trains. Only the writing process decides and holds it: a spawning parent, or
    rank 0 under torchrun/srun, which passes its decision on (`lab.distributed.launch`). A checkpoint that would
    train nothing, or does not fit the model, is refused before anything is written."""
    from omegaconf import OmegaConf

    from lab.distributed import env

    writer = not env.launched_as_worker() or env.rank() == 0
    continued = None
    if writer:
        config = cast("dict[str, Any]", OmegaConf.to_container(cfg, resolve=True))
        continued = continued_run(cfg.resume, run_dir, config, siblings)
    last = continued / "checkpoints" / "last.pt" if continued is not None else None
    # One run across resumes keeps one dir, checkpoints, metrics and wandb run. A torchrun restart with no last.pt
    # yet starts again in that dir, from the start or from the user's ckpt_path.
    if last is not None and last.is_file():
        cfg.ckpt_path = str(last)
    _refuse_unresumable(cfg, writer)  # before processes start and records open
    here = continued is not None or inside(cfg.ckpt_path, run_dir)
    target = continued or run_dir
    with claim(target, resuming_here=here, overwrite=cfg.overwrite) if writer else contextlib.nullcontext():
        if continued is not None and continued != run_dir:
            move_logs(run_dir, continued)  # this start logs into the run's own log file
        if cfg.overwrite and not here:
            forget_replaced(target)  # this is a new run, so drop the replaced run's configs and log lines
        if writer:
            record_torchrun_job(target)  # so workers restarted by torchrun --max-restarts continue here
        if continued is not None:
            restart = env.torchrun_restart()
            how = f"torchrun restart {restart}: " if restart else ""
            start = "" if last is not None and last.is_file() else " from its start (no last.pt was saved)"
            log.info("%scontinuing the run in %s%s", how, continued, start)
        yield target


def inside(ckpt_path: str | None, run_dir: Path) -> bool:
    """Whether `ckpt_path` is one of `run_dir`'s own checkpoints, so the run goes on in its own dir."""
    return ckpt_path is not None and Path(ckpt_path).resolve().parent == (run_dir / "checkpoints").resolve()


def _refuse_unresumable(cfg: Any, writer: bool) -> None:
    """Refuse `cfg.ckpt_path` if this run cannot resume from it: on every rank, a path that is not a checkpoint file;
    where the run dir is decided (`writer`), a checkpoint that would train nothing (its training over or stopped
    early, or the model alone: a dist=fsdp run's best.pt), or weights that would not load into this run's model
    (built on the meta device: no memory, no random draws). One function, so the checkpoint is read once,
    memory-mapped: only its progress and its weights' shapes are read."""
    import torch

    from lab.checkpointing.state_dicts import misfit, strip_wrapper_prefixes
    from lab.checkpointing.storage import read, require_file
    from lab.config import options
    from lab.models.common import build as build_model

    require_file(cfg.ckpt_path)
    if not (writer and cfg.ckpt_path):
        return
    path = Path(cfg.ckpt_path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        progress = ckpt["progress"]
    except Exception:
        ckpt = read(path)  # raises a one-line reason why the file is unreadable
        progress = ckpt["progress"]
    if "optimizer" not in ckpt and "shards" not in ckpt:
        raise UserError(
            f"{path} holds the model weights alone (a dist=fsdp run's best.pt: the optimizer state stays in the "
            "shards of its last.pt): resume from last.pt, or start a new run from these weights with "
            f"model.init_from={path}"
        )
    if not training_left(progress, cfg.trainer.max_epochs, cfg.trainer.max_steps):
        raise UserError(
            f"{path} has finished training (epoch {progress['epoch']} of trainer.max_epochs="
            f"{cfg.trainer.max_epochs}, step {progress['global_step']}): raise trainer.max_epochs (or max_steps) "
            "to train further, or score it with scripts/eval.py"
        )
    stopping, stale = cfg.callbacks.get("early_stopping"), progress.get("stale_validations", 0)
    if stopping is not None and stale >= stopping.patience:
        raise UserError(
            f"{path} stopped early at epoch {progress['epoch']} ({stale} validations without improvement, "
            f"callbacks.early_stopping.patience={stopping.patience}): raise the patience (or drop "
            "callback=early_stopping) to train further, or score it with scripts/eval.py"
        )
    if "model" not in ckpt:
        return  # a sharded checkpoint; its shards are checked as they load
    try:
        with torch.device("meta"):
            model = build_model(cfg.model, ckpt.get("data_meta") or {})
    except Exception:
        return  # a model that cannot be built this way is checked when its weights load
    weights = options.instantiate("model", cfg.model).restore_state(model, ckpt)
    why = misfit(model.state_dict(), strip_wrapper_prefixes(weights))
    if why is not None:
        saved = (ckpt.get("config") or {}).get("model") or {}
        raise UserError(
            f"{path} does not fit this run's model ({why}); it was saved by a run of model.name="
            f"{saved.get('name', '?')}: continue it with that run's own command, or start a new run from it with "
            f"model.init_from={path}"
        )


def move_logs(fresh_dir: Path, run_dir: Path) -> None:
    """Append this start's log to the one in `run_dir`, and remove what Hydra wrote in `fresh_dir`."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == fresh_dir:
            moved = logging.FileHandler(run_dir / Path(handler.baseFilename).name, mode="a")
            moved.setFormatter(handler.formatter)
            moved.setLevel(handler.level)
            root.removeHandler(handler)
            handler.close()
            root.addHandler(moved)
    discard_hydra_files(fresh_dir)
