"""`hydra/launcher=joblib` (LabJoblibConf in plugins.py): jobs in parallel local processes, with the settings of
Hydra's joblib launcher, but a process that dies fails only the job it was running.

Hydra's launcher runs the jobs on joblib's loky executor. When one worker dies (the kernel's OOM killer, `kill -9`)
loky declares the whole executor broken: it kills the other running jobs and the sweep ends in a
TerminatedWorkerError traceback, without a summary. Here each of `n_jobs` worker processes takes one job at a time
through a pipe of its own. A worker that dies fails its job (`failed` in the job's sweep_job.json, with the signal
that killed it), a new worker takes its place, the other jobs go on, and the summary names the failed job. As with
loky, a worker lives for the whole sweep: imports and unchanged data are paid once per worker, and each worker
takes a GPU of its own (devices.py).

`timeout` (seconds per job) stops a job that runs longer: SIGTERM, so it saves last.pt, then `failed`. The other
keys of joblib's config (backend, prefer, pre_dispatch, batch_size, ...) are kept so the same overrides work, but
jobs always run in processes (Hydra's launcher forces loky's processes too) and they say nothing here.

A stop signal (SIGTERM, SIGUSR1, SIGINT) to the sweep goes on to the running jobs, which save last.pt and stop; no
further job starts, and the sweep exits with 128 + the signal, like a job it ran itself. A worker whose sweep dies
(kill -9) stops its job the same way instead of training on unseen.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, cast

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from lab.errors import Interrupted
from lab.extensions.sweeps.devices import on_a_gpu_of_its_own
from lab.stopping import STOP_SIGNALS
from lab.sweeps.jobs import NumberedLauncher, describe, joblib_width
from lab.sweeps.ownership import sweep_resume_hint
from lab.sweeps.summary import job_record, write_record

log = logging.getLogger(__name__)


class JobKilled(RuntimeError):
    """A job's process ended without returning the job's result: killed by a signal, or exited."""

    def __init__(self, message: str, pid: int | None, started: float) -> None:
        super().__init__(message)
        self.pid, self.started, self.wall_s = pid, started, time.time() - started


class JobStopped(JobKilled):
    """A stop signal ended the job (it saves last.pt when training had started): `resume=auto` continues it."""

    run_status = Interrupted.run_status


class JobTimedOut(JobKilled):
    """The job ran past `hydra.launcher.timeout` and was stopped."""


class WorkerPoolLauncher(NumberedLauncher):
    """The launcher's work, which plugins.LabJoblibLauncher (the plugin Hydra finds) hands its jobs to."""

    def __init__(self, **joblib: Any) -> None:
        self.joblib = joblib
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self._pool: _Pool | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch_numbered(self, jobs: Sequence[tuple[int, Sequence[str]]]) -> list[JobReturn]:
        """Run `(job number, overrides)` pairs, `n_jobs` at a time; the results in the same order."""
        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if self._pool is None:
            payload = _dumps((self.hydra_context, self.config, self.task_function, Singleton.get_state()))
            self._pool = _Pool(joblib_width(self.joblib.get("n_jobs", -1)), payload)
            # idle workers end with the sweep: before multiprocessing's exit handler joins them (they would wait)
            multiprocessing.util.Finalize(self, self._pool.close, exitpriority=10)
        log.info(
            "launching %d jobs on up to %d worker processes, sweep output dir %s",
            len(jobs),
            self._pool.width,
            sweep_dir,
        )
        for num, overrides in jobs:
            log.info("\t#%d : %s", num, " ".join(filter_overrides(overrides)))
        timeout = self.joblib.get("timeout")
        results, stopped_by = self._pool.run(jobs, float(timeout) if timeout else None)
        returns: list[JobReturn] = []
        for num, overrides in jobs:
            ret = results.get(num)
            if ret is None:  # a job a stop signal kept from starting: the sweep exits below
                continue
            if isinstance(ret, JobKilled):  # the job's process ended without a result
                ret = self._record_lost(num, overrides, ret)
            returns.append(ret)
        if stopped_by is not None:
            log.error("%s", sweep_resume_hint(sweep_dir.absolute()))
            # SystemExit, like a stop signal in a job the sweep runs itself: no summary of a sweep cut short
            sys.exit(128 + stopped_by)
        return returns

    def _record_lost(self, num: int, overrides: Sequence[str], err: JobKilled) -> JobReturn:
        """A job whose process died: a failed (or interrupted) JobReturn, and its sweep_job.json written here,
        since the job could not write it, so the summary and `resume=auto` know what became of it."""
        assert self.config is not None and self.hydra_context is not None
        ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=err)
        try:
            job_config = self._job_config(num, overrides)
        except Exception as compose_err:  # it does not compose: the worker died composing it, before its run dir
            log.error("job #%d: %s; no run dir (%s)", num, describe(err), describe(compose_err))
            return ret
        ret.hydra_cfg = OmegaConf.create({"hydra": job_config.hydra})
        run_dir = Path(job_config.hydra.runtime.output_dir)
        status = getattr(err, "run_status", "failed")
        log.error("job #%d %s: %s; run dir %s", num, status, describe(err), run_dir)
        exclude = job_config.hydra.job.config.override_dirname.exclude_keys
        record = job_record(
            num, status, None, describe(err), list(overrides), exclude, err.started, err.wall_s, err.pid
        )
        write_record(run_dir, record)
        return ret

    def _job_config(self, num: int, overrides: Sequence[str]) -> DictConfig:
        """The job's config as its process had it (the same composition as Hydra's run_job), for its run dir."""
        assert self.config is not None and self.hydra_context is not None
        # Hydra annotates it HydraConf; it holds the DictConfig (the `hydra` node) that set_config made
        saved = cast("DictConfig | None", HydraConfig.instance().cfg)
        try:
            job_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(job_config):
                job_config.hydra.job.id = f"{job_config.hydra.job.name}_{num}"
                job_config.hydra.job.num = num
            HydraConfig.instance().set_config(job_config)  # `${hydra:...}` in the subdir resolves against it
            run_dir = Path(str(job_config.hydra.sweep.dir)) / str(job_config.hydra.sweep.subdir)
            with read_write(job_config.hydra.runtime), open_dict(job_config.hydra.runtime):
                job_config.hydra.runtime.output_dir = str(run_dir.absolute())
            return job_config
        finally:
            if saved is not None:
                HydraConfig.instance().set_config(saved)


# ---------------------------------------------------------------------------------------------- the parent's side
class _Worker:
    def __init__(self, context: Any, payload: bytes) -> None:
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=_serve, args=(child_end, payload), name="lab-joblib-worker")
        self.process.start()
        child_end.close()  # the worker's end lives in the worker only: its death closes the pipe here
        self.job: tuple[int, Sequence[str]] | None = None
        self.started = 0.0
        self.timeout: float | None = None
        self.deadline: float | None = None
        self.timed_out = False

    def give(self, job: tuple[int, Sequence[str]], timeout: float | None) -> None:
        self.conn.send(job)
        self.job, self.started, self.timed_out = job, time.time(), False
        self.timeout, self.deadline = timeout, time.monotonic() + timeout if timeout else None

    def lost(self) -> JobKilled:
        """Why this worker's job has no result: the worker is gone (wait for its exit code)."""
        self.process.join()
        code, pid = self.process.exitcode, self.process.pid
        if self.timed_out:
            limit = f"hydra.launcher.timeout={self.timeout:g}s"
            return JobTimedOut(f"ran past {limit}: stopped with SIGTERM", pid, self.started)
        if code is not None and code < 0:
            oom = " (out of memory?)" if -code == signal.SIGKILL else ""
            return JobKilled(f"worker process killed by {signal.Signals(-code).name}{oom}", pid, self.started)
        if code is not None and code - 128 in {int(s) for s in STOP_SIGNALS}:
            return JobStopped(f"stopped by {signal.Signals(code - 128).name}", pid, self.started)
        return JobKilled(f"worker process exited with code {code} before the job ended", pid, self.started)


class _Pool:
    def __init__(self, width: int, payload: bytes) -> None:
        self.width, self.payload = width, payload
        # a fresh interpreter per worker, as loky's: forking a process with Hydra's and torch's threads is unsafe
        self.context = multiprocessing.get_context("spawn")
        self.idle: list[_Worker] = []

    def run(
        self, jobs: Sequence[tuple[int, Sequence[str]]], timeout: float | None
    ) -> tuple[dict[int, JobReturn | JobKilled], int | None]:
        """Every job's JobReturn, or why its process gave none; and the stop signal that ended the sweep early."""
        pending = deque(jobs)
        busy: dict[Connection, _Worker] = {}
        results: dict[int, JobReturn | JobKilled] = {}
        with _forward_stop_signals(busy) as stop:
            while pending or busy:
                while pending and len(busy) < self.width and stop.signum is None:
                    worker = self._worker()
                    worker.give(pending.popleft(), timeout)
                    busy[worker.conn] = worker
                if not busy:
                    break  # a stop signal: the jobs not started stay so
                deadlines = [worker.deadline for worker in busy.values() if worker.deadline is not None]
                until = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                try:
                    ready = wait(list(busy), timeout=until)
                except BaseException:
                    _signal(busy.values(), signal.SIGTERM)  # a bug here: the jobs save and stop, not run on unseen
                    raise
                for conn in ready:
                    worker = busy.pop(cast(Connection, conn))  # wait() returns some of the connections it was given
                    assert worker.job is not None  # a busy worker has a job
                    results[worker.job[0]] = self._result(worker)
                self._stop_overdue(busy.values())
        if stop.signum is not None:
            names = [num for num, _ in jobs if num not in results]
            log.error("%s: %d jobs not started (%s)", stop.name, len(names), ", ".join(f"#{n}" for n in names))
        return results, stop.signum

    def _worker(self) -> _Worker:
        while self.idle:
            worker = self.idle.pop()
            if worker.process.is_alive():
                return worker
            worker.process.join()  # died between two jobs: nothing lost
        return _Worker(self.context, self.payload)

    def _result(self, worker: _Worker) -> JobReturn | JobKilled:
        try:
            ret = _loads(worker.conn.recv_bytes())
        except (EOFError, OSError):
            worker.conn.close()
            return worker.lost()
        self.idle.append(worker)
        return ret

    @staticmethod
    def _stop_overdue(workers: Iterable[_Worker]) -> None:
        overdue = [w for w in workers if w.deadline is not None and not w.timed_out and time.monotonic() >= w.deadline]
        for worker in overdue:
            worker.timed_out = True
            assert worker.job is not None  # a worker with a deadline has a job
            num, limit = worker.job[0], worker.timeout
            log.error("job #%d ran past hydra.launcher.timeout=%gs: stopping it (SIGTERM)", num, limit)
        _signal(overdue, signal.SIGTERM)

    def close(self) -> None:
        for worker in self.idle:
            with contextlib.suppress(OSError):
                worker.conn.send(None)
        for worker in self.idle:
            worker.process.join(timeout=30)
            if worker.process.is_alive():
                worker.process.kill()
        self.idle = []


class _StopState:
    signum: int | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


@contextlib.contextmanager
def _forward_stop_signals(busy: dict[Connection, _Worker]) -> Iterator[_StopState]:
    """While jobs run, a stop signal to the sweep goes on to each running job (which saves last.pt and stops) and
    no further job starts. Outside the main thread (no handlers there) it does nothing."""
    stop = _StopState()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def forward(signum: int, frame: Any) -> None:
        if stop.signum is None:
            stop.signum = signum
            log.warning("%s received: the running jobs save last.pt and stop; no further job starts", stop.name)
        _signal(list(busy.values()), signum)  # a Ctrl-C reaches them from the terminal too: they take it as one

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _signal(workers: Iterable[_Worker], signum: int) -> None:
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.process.pid, signum)


# ---------------------------------------------------------------------------------------------- the worker's side
def _serve(conn: Connection, payload: bytes) -> None:
    """A worker: run the jobs that come through `conn`, one at a time, until None or the sweep is gone."""
    _stop_job_when_the_sweep_dies()
    from hydra_plugins.hydra_joblib_launcher._core import execute_job  # what Hydra's joblib workers run

    hydra_context, config, task_function, singleton_state = _loads(payload)
    task_function = on_a_gpu_of_its_own(task_function)
    while True:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # idle: a Ctrl-C of the sweep is for the running jobs
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        num, overrides = job
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            ret = execute_job(num, overrides, hydra_context, config, task_function, singleton_state)
        except KeyboardInterrupt:  # Ctrl-C before training took over the signal: the job stops, quietly
            sys.exit(128 + signal.SIGINT)
        conn.send_bytes(_dumps_result(ret))


def _stop_job_when_the_sweep_dies() -> None:
    """A sweep killed outright (kill -9) cannot pass its stop on: the worker sees its parent go and stops its job
    as a SIGTERM does (last.pt saved), rather than train on with nobody to record the result."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="lab-sweep-watch", daemon=True).start()


def _dumps(value: Any) -> bytes:
    import cloudpickle  # by value: the task function lives in the entry script's __main__, as under loky

    return cloudpickle.dumps(value)


def _loads(data: bytes) -> Any:
    import cloudpickle

    return cloudpickle.loads(data)


def _dumps_result(ret: JobReturn) -> bytes:
    try:
        return _dumps(ret)
    except Exception as err:  # an exception or a return value that does not pickle: its description does
        if ret.status == JobStatus.FAILED:
            ret._return_value = RuntimeError(describe(ret._return_value))
        else:
            ret.status, ret._return_value = JobStatus.FAILED, RuntimeError(f"the job's result cannot be sent: {err}")
        return _dumps(ret)
