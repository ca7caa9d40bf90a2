"""`hydra/launcher=ray`: each job of a sweep is a Ray task, run by Hydra's `run_job` in a Ray worker.

The sweep joins a Ray cluster (`address=auto` or `<head>:6379`) or starts a local instance for itself
(`address=null`), which ends with the sweep; a cluster it joined keeps running. Each job asks for `num_cpus` CPUs
and `num_gpus` GPUs, so Ray runs as many at once as the resources allow (and `max_concurrent` at most) and gives
each its own GPUs through CUDA_VISIBLE_DEVICES.

A job whose worker dies (the OOM killer, `kill -9`, its node lost) fails alone: the other jobs go on, its run dir
gets a failed sweep_job.json, and `resume=auto` runs it again. A stop signal (SIGTERM, SIGUSR1, SIGINT) to the
sweep cancels the jobs: the running ones get Ray's KeyboardInterrupt, which is a SIGINT to the training, so they
save last.pt and stop; no further job starts and the sweep exits with 128 + the signal.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from lab.errors import ConfigError, Interrupted
from lab.stopping import noting_stop_signals
from lab.sweeps import sweep_resume_hint
from lab.sweeps.jobs import NumberedLauncher, describe
from lab.sweeps.ownership import read_jobs
from lab.sweeps.summary import job_record, write_record

log = logging.getLogger(__name__)

_POLL_S = 1.0  # how often the wait for jobs looks for a stop signal: Ray calls no Python while it waits


class JobKilled(RuntimeError):
    """The job's Ray worker died before the job ended: killed by a signal, out of memory, or its node lost."""


class JobStopped(JobKilled):
    """A stop signal to the sweep cancelled the running job, which saved last.pt: `resume=auto` continues it."""

    run_status = Interrupted.run_status


class RayJobs(NumberedLauncher):
    """Run the jobs that plugins.RayLauncher, the plugin Hydra finds, hands over."""

    def __init__(
        self,
        address: str | None = None,
        local_cpus: int | None = None,
        local_gpus: int | None = None,
        num_cpus: float = 1,
        num_gpus: float | None = None,
        max_concurrent: int | None = None,
        runtime_env: Any = None,
    ) -> None:
        for key, value in {"num_cpus": num_cpus, "num_gpus": num_gpus, "local_cpus": local_cpus}.items():
            if value is not None and value < 0:
                raise ConfigError(f"hydra.launcher.{key}={value}: a share of a resource, so 0 or more")
        if max_concurrent is not None and max_concurrent < 1:
            raise ConfigError(f"hydra.launcher.max_concurrent={max_concurrent}: 1 or more, or null (no limit)")
        if address is not None and (local_cpus, local_gpus) != (None, None):
            raise ConfigError(
                f"hydra.launcher.local_cpus/local_gpus size a local Ray instance, but address={address} joins a "
                "cluster, whose resources are its own: drop them, or set hydra.launcher.address=null"
            )
        self.address, self.local_cpus, self.local_gpus = address, local_cpus, local_gpus
        self.num_cpus, self.num_gpus, self.max_concurrent = num_cpus, num_gpus, max_concurrent
        self.runtime_env = OmegaConf.to_container(runtime_env) if OmegaConf.is_config(runtime_env) else runtime_env
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Connect to Ray here, before the sweep writes anything, so a cluster that is not there is refused first."""
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context
        if not ray.is_initialized():  # one connection for the sweep's every batch
            self._connect()
        have = ray.cluster_resources()
        if self.num_gpus is None:
            self.num_gpus = 1 if have.get("GPU") else 0
        for kind, need in {"CPU": self.num_cpus, "GPU": self.num_gpus}.items():
            if self.address is None and need > have.get(kind, 0):  # Ray would wait forever; a cluster may grow
                raise ConfigError(
                    f"hydra.launcher.num_{kind.lower()}s={need:g}, but the local Ray instance has "
                    f"{have.get(kind, 0):g} {kind}s: lower it, or join a cluster that has them "
                    "(hydra.launcher.address=auto)"
                )

    def width(self) -> int | None:
        """Jobs at once (a fail_fast batch): `max_concurrent`, else as many shares as the cluster has now."""
        if self.max_concurrent is not None:
            return self.max_concurrent
        resources = ray.cluster_resources()
        needs = {"CPU": self.num_cpus, "GPU": self.num_gpus}
        shares = [resources.get(kind, 0) / need for kind, need in needs.items() if need]
        return int(min(shares)) if shares else None

    def _connect(self) -> None:
        # "local" starts a new instance even when `ray start` runs on this machine; Ray shuts it down at exit
        address = self.address or "local"
        try:
            ray.init(
                address=address,
                num_cpus=self.local_cpus,  # None with an address: refused otherwise
                num_gpus=self.local_gpus,
                runtime_env=self.runtime_env or None,
                include_dashboard=False,
            )
        except ConnectionError as err:
            raise ConfigError(
                f"hydra.launcher.address={self.address}: no Ray cluster there ({describe(err)}); start one with "
                "`ray start --head`, or leave hydra.launcher.address unset for a local instance"
            ) from None

    def launch_numbered(self, jobs: Sequence[tuple[int, Sequence[str]]]) -> list[JobReturn]:
        """Run `(job number, overrides)` pairs as Ray tasks; return the results in the same order."""
        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        resources = ray.cluster_resources()
        log.info(
            "launching %d jobs as Ray tasks (%g CPUs, %g GPUs each; the cluster has %g CPUs, %g GPUs), "
            "sweep output dir %s",
            len(jobs),
            self.num_cpus,
            self.num_gpus,
            resources.get("CPU", 0),
            resources.get("GPU", 0),
            sweep_dir,
        )
        for num, overrides in jobs:
            log.info("\t#%d : %s", num, " ".join(filter_overrides(overrides)))
        # a retried job would run again into the run dir its killed attempt left, unseen by the summary: a job whose
        # worker dies fails instead, and resume=auto reruns it. max_calls=1: a fresh worker per job, so a job gets
        # the GPUs Ray gives it (CUDA fixes them when it starts) and leaves no memory or state to the next
        assert self.num_gpus is not None  # resolved by setup()
        task = ray.remote(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_retries=0, max_calls=1)(_run_job)
        payload = ray.put((self.hydra_context, self.config, self.task_function, Singleton.get_state()))
        results, stopped_by = self._run(task, payload, jobs)
        returns = [results[num] for num, _ in jobs if num in results]  # a stop signal left the others unstarted
        if stopped_by is not None:
            log.error("%s", sweep_resume_hint(sweep_dir.absolute()))
            sys.exit(128 + stopped_by)  # as a job stopped by the signal exits; a sweep cut short gets no summary
        return returns

    def _run(
        self, task: Any, payload: Any, jobs: Sequence[tuple[int, Sequence[str]]]
    ) -> tuple[dict[int, JobReturn], int | None]:
        """Return each started job's JobReturn, and the stop signal that ended the sweep, if any."""
        assert self.config is not None
        pending = deque(jobs)
        running: dict[Any, tuple[int, Sequence[str], float]] = {}  # task ref -> (job number, overrides, submitted)
        results: dict[int, JobReturn] = {}
        width = self.max_concurrent or len(jobs)
        with noting_stop_signals() as stop:
            while pending or running:
                while pending and len(running) < width and stop.signum is None:
                    num, overrides = pending.popleft()
                    ref = task.options(name=f"job-{num}").remote(payload, num, list(overrides))
                    running[ref] = (num, overrides, time.time())
                if not running:
                    break  # a stop signal: jobs not started yet stay unstarted
                if stop.signum is not None and not stop.cancelled:
                    stop.cancelled = True
                    for ref in running:  # KeyboardInterrupt in the job: SIGINT to its training, which saves last.pt
                        ray.cancel(ref)
                ready, _ = ray.wait(list(running), num_returns=1, timeout=_POLL_S)
                for ref in ready:
                    num, overrides, submitted = running.pop(ref)
                    ret = self._result(ref, num, overrides, submitted)
                    if ret is not None:
                        results[num] = ret
        if stop.signum is not None:
            names = [f"#{num}" for num, _ in jobs if num not in results]
            log.error("%s: %d jobs not run (%s)", stop.name, len(names), ", ".join(names))
        return results, stop.signum

    def _result(self, ref: Any, num: int, overrides: Sequence[str], submitted: float) -> JobReturn | None:
        """Return the job's JobReturn; None if a stop signal cancelled it before it started."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as err:  # raised in the task outside the job: Hydra composing, say
            error: BaseException = err.cause if isinstance(err.cause, BaseException) else err
            return JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=error)
        except ray.exceptions.TaskCancelledError:  # a running job saved last.pt and its worker exited
            lost: JobKilled = JobStopped("stopped by the sweep's stop signal (Ray cancelled it)")
        except ray.exceptions.RayError as err:  # the worker died, or its node
            lost = JobKilled(f"its Ray worker died ({type(err).__name__}: killed, or out of memory?)")
        if not self._record_lost(num, overrides, lost, submitted) and isinstance(lost, JobStopped):
            return None
        return JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=lost)

    def _record_lost(self, num: int, overrides: Sequence[str], err: JobKilled, submitted: float) -> bool:
        """Write sweep_job.json for a job whose worker ended before the job could, for the summary and resume.

        The run dir is found by Hydra's record of the job (`.hydra/`), written when the job started. Return whether
        there was one."""
        assert self.config is not None
        found = [job for job in read_jobs(Path(str(self.config.hydra.sweep.dir))) if job.num == num]
        status = getattr(err, "run_status", "failed")
        if not found:  # it died, or was cancelled, before Hydra set up its run dir
            if status == "failed":
                log.error("job #%d failed: %s; no run dir", num, describe(err))
            return False
        run_dir = found[0].dir
        log.error("job #%d %s: %s; run dir %s", num, status, describe(err), run_dir)
        exclude = self.config.hydra.job.config.override_dirname.exclude_keys
        started = max(submitted, (run_dir / ".hydra").stat().st_mtime) if (run_dir / ".hydra").is_dir() else submitted
        wall_s = time.time() - started
        write_record(
            run_dir, job_record(num, status, None, describe(err), list(overrides), exclude, started, wall_s, None)
        )
        return True


def _run_job(
    payload: tuple[HydraContext, DictConfig, TaskFunction, dict[Any, Any]], num: int, overrides: list[str]
) -> JobReturn:
    """Run job `num` in this Ray worker as Hydra's launchers do: compose its config, then `run_job` in its run dir."""
    hydra_context, config, task_function, singleton_state = payload
    setup_globals()
    Singleton.set_state(singleton_state)
    job_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(job_config):
        job_config.hydra.job.id = f"{job_config.hydra.job.name}_{num}"
        job_config.hydra.job.num = num
    HydraConfig.instance().set_config(job_config)
    return run_job(
        hydra_context=hydra_context,
        config=job_config,
        task_function=task_function,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
