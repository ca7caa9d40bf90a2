"""Send a run's records to the chosen trackers (`logger.backends`) and mirror them in the run dir.

Whatever the logger, the run dir gets `metrics.jsonl`, `summary.json` and `provenance/`. A resume in the run's own
dir passes `continuing=True` (its files are appended to) and `resume_id` (wandb continues the same run); any other
run starts its files afresh. A tracker's bad settings are refused before anything is written. A tracker that stops
mid-run gets one warning, and the run goes on without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from lab.files import write_json
from lab.tracking import backends as trackers
from lab.tracking import provenance as prov
from lab.tracking.backends import RunInfo, check_writable, open_record, plain, writing

log = logging.getLogger(__name__)


class Tracker:
    def __init__(
        self,
        run_dir: str | Path,
        *,
        logger_cfg: Any = None,
        job_type: str = "train",
        config: dict | None = None,
        name: str | None = None,
        group: str | None = None,
        tags: list[str] | tuple[str, ...] = (),
        rank: int = 0,
        provenance: dict | None = None,
        resume_id: str | None = None,
        continuing: bool = False,
        resumed_step: int | None = None,
    ) -> None:
        self.run = RunInfo(
            run_dir=Path(run_dir),
            job_type=job_type,
            config=config or {},
            provenance=provenance or {},
            name=name,
            group=group,
            tags=list(tags),
            resume_id=resume_id,
            continuing=continuing,
            resumed_step=resumed_step,
        )
        self.run_dir, self.config, self.provenance = self.run.run_dir, self.run.config, self.run.provenance
        self.logger_cfg, self.rank = logger_cfg, rank
        self._backends: list[trackers.Backend] = []
        self._starting: threading.Thread | None = None  # set by start(background=True) until the backends are up
        self._start_error: BaseException | None = None
        self._deferred: list[Callable[[trackers.Backend], None]] = []  # calls that waited for the background start
        self._summary: dict[str, Any] = {}
        self._metrics_file: IO[str] | None = None
        self._started = 0.0

    @property
    def is_writer(self) -> bool:
        """Whether this process writes records. Only rank 0 does, so each tracker keeps one record per run."""
        return self.rank == 0

    @property
    def backends(self) -> list[trackers.Backend]:
        """Return the started trackers, first waiting for a background start and raising its error."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._start_error is not None:
            err, self._start_error = self._start_error, None
            raise err
        deferred, self._deferred = self._deferred, []
        for call in deferred:
            self._each(call)  # the start is joined and its error raised, so this returns the trackers at once
        return self._backends

    def _each(self, call: Callable[[trackers.Backend], Any]) -> None:
        """Run `call(backend)` for every tracker. A tracker whose child process died is dropped with one warning."""
        for backend in list(self.backends):
            try:
                call(backend)
            except trackers.TrackerStopped as err:
                self._stopped(backend, err)

    def _stopped(self, backend: trackers.Backend, err: Exception) -> None:
        if backend in self._backends:
            self._backends.remove(backend)  # never called again, not even at finish: nothing would answer
        log.warning(
            "tracker %s stopped: %s. The run goes on without it: its metrics are still in %s",
            backend.name,
            err,
            self.run_dir / "metrics.jsonl",
        )

    def _on_backends(self, call: Callable[[trackers.Backend], None]) -> None:
        """Run `call(backend)` for every tracker, now or once a background start is done.

        Summary values and file snapshots can wait. Metrics must be logged in order, so `log` waits instead."""
        if self._starting is not None and self._starting.is_alive():
            self._deferred.append(call)
        else:
            self._each(call)

    def start(self, background: bool = False) -> Tracker:
        """Open the run's records and start the chosen trackers.

        `background=True` starts them in a thread, since imports and wandb's start are slow, while the caller builds
        the data and model. The first use of the trackers waits for it."""
        self._started = time.monotonic()
        if not self.is_writer:
            return self
        run, folders = self.run, [self.run_dir, self.run_dir / "provenance"]
        for name in filter(trackers.trackers().__contains__, trackers.chosen(self.logger_cfg)):  # before writing
            settings = trackers.tracker_settings(self.logger_cfg, name)
            backend_class = settings.backend()
            backend_class.check(dataclasses.replace(run, settings=settings))
            if backend_class.folder:
                folders.append(self.run_dir / backend_class.folder)
        for folder in folders:  # refuse a read-only dir before anything is written
            check_writable(folder)
        with writing(self.run_dir):
            self.run_dir.mkdir(parents=True, exist_ok=True)
            # `tail -f metrics.jsonl` shows each event as it happens
            self._metrics_file = open_record(
                self.run_dir / "metrics.jsonl", run.continuing, run.resumed_step, step_of=_jsonl_step
            )
            written = prov.record(self.run_dir, self.provenance, run.continuing)
        # trackers that keep files get this start's provenance once they start
        self._deferred += [operator.methodcaller("save_file", path) for path in written]
        if background:
            self._starting = threading.Thread(target=self._start_backends, args=(run,), name="tracker-start")
            self._starting.start()
            return self
        self._start_backends(run)
        if self._start_error is not None:
            err, self._start_error = self._start_error, None
            self.finish("failed")  # leave nothing open (wandb's service, file handles)
            raise err
        self.backends  # noqa: B018 (attaches the provenance files now)
        return self

    def _start_backends(self, run: RunInfo) -> None:
        try:
            child_process = _setting(self.logger_cfg, "child_process", True)
            for name in trackers.in_start_order(self.logger_cfg):
                settings = trackers.tracker_settings(self.logger_cfg, name)  # `logger.<name>`, checked
                backend = create(name, dataclasses.replace(run, settings=settings), child_process)
                try:
                    backend.start()
                except trackers.TrackerStopped as err:  # its child died as it started; the others go on
                    self._stopped(backend, err)
                    continue
                self._backends.append(backend)
        except BaseException as err:  # raised where the trackers are next used
            self._start_error = err

    def run_ref(self) -> dict[str, str | None]:
        """Return how other runs refer to this one: its run dir and wandb id and path (None without wandb)."""
        ref: dict[str, Any] = {"run_dir": str(self.run_dir), "wandb_id": None, "wandb_path": None}
        self._each(lambda backend: ref.update(backend.ref()))
        return ref

    @contextlib.contextmanager
    def session(self, background: bool = False) -> Iterator[Tracker]:
        """Wrap a run in start() and finish(status), so a crashed run is still recorded as such.

        The status is "completed", or the exception's `run_status`: "failed" by default, "interrupted" for Ctrl-C,
        "pruned" for a pruned sweep trial."""
        self.start(background)
        status, error = "failed", None
        try:
            yield self
            status = "completed"
        except BaseException as err:
            status = getattr(err, "run_status", "interrupted" if isinstance(err, KeyboardInterrupt) else "failed")
            if status == "failed":  # keep what failed with the run; the terminal that showed it may be gone
                error = f"{type(err).__name__}: {next(iter(str(err).splitlines()), '')}"
            raise
        finally:
            self.finish(status, error)

    def log(self, metrics: dict[str, Any], step: int, epoch: int | None = None) -> None:
        """Log one event at global optimizer `step` and 1-based `epoch`."""
        if not self.is_writer:
            return
        record = {"step": step, "epoch": epoch, **{k: _json_value(v) for k, v in metrics.items()}}
        assert self._metrics_file is not None, "Tracker.log() before start() or after finish()"
        self._metrics_file.write(json.dumps(record) + "\n")
        self._each(lambda backend: backend.log(metrics, step, epoch))

    @property
    def keeps_histograms(self) -> bool:
        """Whether a chosen tracker records histograms (wandb). Only then are they worth computing."""
        return any(backend.keeps_histograms for backend in self.backends)

    def log_histograms(self, histograms: dict[str, tuple[list[float], list[float]]], step: int) -> None:
        """Log distributions (counts, bin edges) at `step` to the trackers that keep histograms."""
        self._each(lambda backend: backend.log_histograms(histograms, step) if backend.keeps_histograms else None)

    def summary(self, values: dict[str, Any]) -> None:
        self._summary.update({k: _json_value(v) for k, v in values.items()})
        values = dict(values)
        self._on_backends(lambda backend: backend.summary(values))

    def save_file(self, path: str | Path) -> None:
        """Attach a snapshot of a run-dir file (model summary, log, git diff) to the trackers that keep files."""
        self._on_backends(lambda backend: backend.save_file(Path(path)))

    def log_checkpoint(self, path: str | Path, alias: str) -> None:
        """Keep a checkpoint with the run: in wandb a `model` artifact, which offline runs keep for `wandb sync`."""
        if not Path(path).is_file():
            return
        self._each(lambda backend: backend.log_checkpoint(Path(path), alias))

    def finish(self, status: str = "completed", error: str | None = None) -> None:
        if not self.is_writer:
            return
        summary = {
            **self._summary,
            "status": status,
            **({"error": error} if error is not None else {}),
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "git_commit": self.provenance.get("git_commit"),
            "git_dirty": self.provenance.get("git_dirty"),
        }
        try:
            backends = self.backends  # waits for a background start and runs the calls that waited
        except Exception as err:  # a failed start; the run already raised it, or failed before it mattered
            log.warning("a tracker could not start: %s", err)
            backends = self._backends
        self._backends = []
        for backend in backends:
            try:  # one tracker failing to close must not cost the others or summary.json
                summary.update(backend.finish(status))
            except trackers.TrackerStopped as err:
                self._stopped(backend, err)
            except Exception as err:
                log.warning("tracker %s could not finish cleanly: %s", backend.name, err)
        write_json(self.run_dir / "summary.json", summary)
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None


def _setting(logger: Any, key: str, default: Any) -> Any:
    """Read `key` of the `logger` config node, which may be a DictConfig, a dataclass or None."""
    if logger is None:
        return default
    return logger.get(key, default) if hasattr(logger, "get") else getattr(logger, key, default)


def _jsonl_step(line: str) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


def _json_value(value: Any) -> Any:
    """Write NaN and inf as strings, since JSON has none. The file stays valid and the problem visible."""
    return plain(value) if isinstance(value, float) else value


def job_identity(cfg: Any, run_dir: str | Path) -> dict[str, Any]:
    """Return the name, sweep group and overrides of the current Hydra job; spawned workers get it ready-made."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
    except ValueError:  # outside a Hydra job (tests, notebooks)
        return {"name": None, "group": None, "overrides": []}
    name = hydra_cfg.job.override_dirname or Path(run_dir).name
    group = None
    if hydra_cfg.mode == RunMode.MULTIRUN:
        group = f"{cfg.task_name}-{Path(hydra_cfg.sweep.dir).name}"
        name = f"{hydra_cfg.job.num}:{name}"
    return {"name": name, "group": group, "overrides": list(hydra_cfg.overrides.task)}


def from_config(
    cfg: Any,
    run_dir: str | Path,
    job_type: str,
    provenance: dict,
    rank: int = 0,
    identity: dict[str, Any] | None = None,
    continued: dict[str, Any] | None = None,
) -> Tracker:
    """Build a Tracker for a job, with the resolved config and Hydra overrides, named by `job_identity`.

    `continued` is the checkpoint of a run the job continues in its own dir. Its files are then appended to, less
    what the last attempt recorded after the checkpoint's step (those steps are logged again), and its wandb run
    goes on."""
    from omegaconf import OmegaConf

    identity = identity or job_identity(cfg, run_dir)
    config = {**cast(dict, OmegaConf.to_container(cfg, resolve=True)), "hydra_overrides": identity["overrides"]}
    resume_id = (continued.get("provenance") or {}).get("wandb_id") if continued is not None else None
    return Tracker(
        run_dir,
        logger_cfg=cfg.logger,
        job_type=job_type,
        config=config,
        name=identity["name"],
        group=identity["group"],
        tags=list(cfg.get("tags", [])),
        rank=rank,
        provenance=provenance,
        resume_id=resume_id,
        continuing=continued is not None,
        resumed_step=continued["progress"]["global_step"] if continued is not None else None,
    )


def create(name: str, run: RunInfo, child_process: bool = True) -> trackers.Backend:
    """Create the tracker `name` for `run`, with its option's defaults if `run.settings` is None.

    A tracker slow to start runs in a child process unless `child_process` (`logger.child_process`) is false."""
    if name not in trackers.trackers():
        raise ValueError(f"unknown tracker {name!r}; choose among {', '.join(trackers.trackers())}")
    if run.settings is None:
        run = dataclasses.replace(run, settings=trackers.tracker_settings(None, name))
    backend_class = run.settings.backend()
    # the child's pipes are passed as POSIX file descriptors, so Linux and macOS only
    if backend_class.slow_to_start and child_process and os.name == "posix":
        from lab.tracking.child_process import ChildProcessBackend

        return ChildProcessBackend(name, run, backend_class.keeps_histograms)
    return backend_class(run)
