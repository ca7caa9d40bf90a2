"""`hydra/launcher=joblib`: jobs in parallel local processes, where a process that dies fails only its own job.

It takes the settings of Hydra's joblib launcher (LabJoblibConf in plugins.py). Hydra's launcher uses joblib's loky
executor, and when one worker dies (OOM killer, `kill -9`), loky kills the other running jobs and the sweep ends in
a TerminatedWorkerError traceback, without a summary. Here each of `n_jobs` workers takes one job at a time through
its own pipe. A worker that dies fails its job (recorded in sweep_job.json with the signal), a new worker takes its
place, and the other jobs go on. As with loky, a worker lives for the whole sweep, so imports and unchanged data are
paid once per worker. Each worker gets its own GPU (devices.py).

`timeout` (seconds per job) stops a longer job with SIGTERM, so it saves last.pt, and marks it failed. joblib's other
keys (backend, prefer, pre_dispatch, ...) are accepted so the same overrides work, but do nothing: jobs always run
in processes, as they do under Hydra's launcher.

A stop signal (SIGTERM, SIGUSR1, SIGINT) to the sweep is passed to the running jobs, which save last.pt and stop.
No further job starts, and the sweep exits with 128 + the signal. If the sweep is killed with kill -9, each worker
stops its job the same way rather than train on unseen.
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
from collections.abc import Iterable, Sequence
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
from lab.stopping import STOP_SIGNALS, noting_stop_signals
from lab.sweeps import sweep_resume_hint
from lab.sweeps.jobs import NumberedLauncher, describe, joblib_width
from lab.sweeps.summary import job_record, write_record

log = logging.getLogger(__name__)


class JobKilled(RuntimeError):
    """A job's process ended without returning a result: killed by a signal, or exited."""

    def __init__(self, message: str, pid: int | None, started: float) -> None:
        super().__init__(message)
        self.pid, self.started, self.wall_s = pid, started, time.time() - started


class JobStopped(JobKilled):
    """A stop signal ended the job; it saved last.pt if training had started, so `resume=auto` continues it."""

    run_status = Interrupted.run_status


class JobTimedOut(JobKilled):
    """The job ran past `hydra.launcher.timeout` and was stopped."""


class WorkerPoolLauncher(NumberedLauncher):
    """Run the jobs that plugins.LabJoblibLauncher, the plugin Hydra finds, hands over."""

    def __init__(self, **joblib: Any) -> None:
        self.joblib = joblib
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self._pool: _Pool | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch_numbered(self, jobs: Sequence[tuple[int, Sequence[str]]]) -> list[JobReturn]:
        """Run `(job number, overrides)` pairs, `n_jobs` at a time; return the results in the same order."""
        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if self._pool is None:
            payload = _dumps((self.hydra_context, self.config, self.task_function, Singleton.get_state()))
            self._pool = _Pool(joblib_width(self.joblib.get("n_jobs", -1)), payload)
            # close idle workers before multiprocessing's exit handler joins them, or it would wait forever
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
            if ret is None:  # a stop signal kept this job from starting; the sweep exits below
                continue
            if isinstance(ret, JobKilled):
                ret = self._record_lost(num, overrides, ret)
            returns.append(ret)
        if stopped_by is not None:
            log.error("%s", sweep_resume_hint(sweep_dir.absolute()))
            # exit as a job stopped by the signal would; a sweep cut short gets no summary
            sys.exit(128 + stopped_by)
        return returns

    def _record_lost(self, num: int, overrides: Sequence[str], err: JobKilled) -> JobReturn:
        """Return a failed or interrupted JobReturn for a job whose process died, and write its sweep_job.json.

        The job could not write the record itself; the summary and `resume=auto` need it."""
        assert self.config is not None and self.hydra_context is not None
        ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=err)
        try:
            job_config = self._job_config(num, overrides)
        except Exception as compose_err:  # the worker died composing it, so there is no run dir
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
        """Compose the job's config as Hydra's run_job does, to find its run dir."""
        assert self.config is not None and self.hydra_context is not None
        # typed HydraConf by Hydra, but it holds the DictConfig that set_config was given
        saved = cast("DictConfig | None", HydraConfig.instance().cfg)
        try:
            job_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(job_config):
                job_config.hydra.job.id = f"{job_config.hydra.job.name}_{num}"
                job_config.hydra.job.num = num
            HydraConfig.instance().set_config(job_config)  # so `${hydra:...}` in the subdir resolves
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
        child_end.close()  # only the worker holds its end, so its death closes the pipe here
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
        """Wait for the dead worker's exit code and return why its job has no result."""
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
        # a fresh interpreter per worker, as in loky: forking with Hydra's and torch's threads is unsafe
        self.context = multiprocessing.get_context("spawn")
        self.idle: list[_Worker] = []

    def run(
        self, jobs: Sequence[tuple[int, Sequence[str]]], timeout: float | None
    ) -> tuple[dict[int, JobReturn | JobKilled], int | None]:
        """Return each job's JobReturn (or why there is none), and the stop signal that ended the sweep, if any."""
        pending = deque(jobs)
        busy: dict[Connection, _Worker] = {}
        results: dict[int, JobReturn | JobKilled] = {}
        # each signal goes on to the running jobs (a Ctrl-C also reaches them from the terminal; they treat both as one)
        with noting_stop_signals(lambda signum: _signal(list(busy.values()), signum)) as stop:
            while pending or busy:
                while pending and len(busy) < self.width and stop.signum is None:
                    worker = self._worker()
                    worker.give(pending.popleft(), timeout)
                    busy[worker.conn] = worker
                if not busy:
                    break  # a stop signal: jobs not started yet stay unstarted
                deadlines = [worker.deadline for worker in busy.values() if worker.deadline is not None]
                until = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                try:
                    ready = wait(list(busy), timeout=until)
                except BaseException:
                    _signal(busy.values(), signal.SIGTERM)  # on a bug here, jobs save and stop rather than run unseen
                    raise
                for conn in ready:
                    worker = busy.pop(cast(Connection, conn))  # wait() returns a subset of the connections given
                    assert worker.job is not None
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
            worker.process.join()  # died between two jobs, so nothing is lost
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
            assert worker.job is not None
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


def _signal(workers: Iterable[_Worker], signum: int) -> None:
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.process.pid, signum)


# ---------------------------------------------------------------------------------------------- the worker's side
def _serve(conn: Connection, payload: bytes) -> None:
    """Run the jobs that come through `conn`, one at a time, until None arrives or the sweep is gone."""
    _stop_job_when_the_sweep_dies()
    from hydra_plugins.hydra_joblib_launcher._core import execute_job  # what Hydra's joblib workers run too

    hydra_context, config, task_function, singleton_state = _loads(payload)
    task_function = on_a_gpu_of_its_own(task_function)
    while True:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # while idle, a Ctrl-C is for the running jobs
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
        except KeyboardInterrupt:  # Ctrl-C before training set its own handler: stop quietly
            sys.exit(128 + signal.SIGINT)
        conn.send_bytes(_dumps_result(ret))


def _stop_job_when_the_sweep_dies() -> None:
    """Stop the job with SIGTERM when the sweep dies, rather than train on with nobody to record the result.

    A sweep killed with kill -9 cannot pass its stop on, so the worker watches its parent."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="lab-sweep-watch", daemon=True).start()


def _dumps(value: Any) -> bytes:
    import cloudpickle  # pickles by value: the task function lives in the entry script's __main__

    return cloudpickle.dumps(value)


def _loads(data: bytes) -> Any:
    import cloudpickle

    return cloudpickle.loads(data)


def _dumps_result(ret: JobReturn) -> bytes:
    try:
        return _dumps(ret)
    except Exception as err:  # an unpicklable exception or return value: send its description instead
        if ret.status == JobStatus.FAILED:
            ret._return_value = RuntimeError(describe(ret._return_value))
        else:
            ret.status, ret._return_value = JobStatus.FAILED, RuntimeError(f"the job's result cannot be sent: {err}")
        return _dumps(ret)
