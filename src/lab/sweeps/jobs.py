"""Read what became of a sweep job, and decide when a sweep stops launching.

No torch and no optuna, since Hydra plugins import this at start-up and the summary callback in every job.
"""

from __future__ import annotations

import math
import os
import statistics
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf


@dataclass(frozen=True)
class Outcome:
    status: str  # completed | failed | pruned (a stopping exception's `run_status`)
    value: float | None  # the optimized metric the job returned, or None
    error: str | None  # "<ExceptionType>: <message>" for a job that did not complete

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def describe(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def outcome(ret: JobReturn) -> Outcome:
    if ret.status == JobStatus.COMPLETED:
        return Outcome("completed", _number(ret._return_value), None)
    # JobReturn.return_value re-raises a failed job's exception and prints to stderr, so read the stored one.
    err = ret._return_value
    return Outcome(getattr(err, "run_status", "failed"), None, describe(err))


def parts(config: DictConfig, overrides: Sequence[str]) -> tuple[str, int] | None:
    """Return `(key, n)` when the job of `overrides` runs as n jobs, one per `key=i` (TrainNodeConfig.sweep_parts:
    the folds of a cross-validation), or None. `config` is the sweep's; the job's own `<node>.` overrides apply."""
    from lab.config import options, train_nodes

    names = [name for name in options.options("train_node") if name in config]
    own = OmegaConf.from_dotlist([o.lstrip("+") for o in overrides if o.lstrip("+").split(".")[0] in names])
    nodes = train_nodes(OmegaConf.merge({name: config[name] for name in names}, own))
    return next((found for found in (node.sweep_parts() for node in nodes) if found is not None), None)


def expand(config: DictConfig, overrides: Sequence[str]) -> list[list[str]]:
    """Return the jobs that run one parameter set: itself, or one per part (see `parts`)."""
    found = parts(config, overrides)
    if found is None:
        return [list(overrides)]
    key, n = found
    return [[*overrides, f"{key}={i}"] for i in range(n)]


def combine(outcomes: Sequence[Outcome]) -> Outcome:
    """Return one parameter set's outcome from its parts': the first failure or pruning, else the mean value."""
    for status in ("failed", "pruned"):
        stopped = next((o for o in outcomes if o.status == status), None)
        if stopped is not None:
            return stopped
    values = [o.value for o in outcomes if o.value is not None]
    return Outcome("completed", statistics.fmean(values) if len(values) == len(outcomes) else None, None)


def fail_fast(config: DictConfig) -> bool:
    """Whether `sweep.fail_fast` asks to stop launching after a batch with a failed job."""
    return bool(OmegaConf.select(config, "sweep.fail_fast", default=False))


def joblib_width(n_jobs: int) -> int:
    """Return the process count for joblib's `n_jobs`: -1 is one per CPU, -2 all but one, ..."""
    return max(1, (os.cpu_count() or 1) + 1 + n_jobs if n_jobs < 0 else n_jobs)


def launcher_width(config: DictConfig, plugin: Launcher | None = None) -> int:
    """Return how many jobs the launcher runs at once: the batch size that lets fail_fast stop early, yet keeps a
    parallel launcher busy. A NumberedLauncher may say it (`width`); else its config's keys do."""
    width = plugin.width() if isinstance(plugin, NumberedLauncher) else None
    if width is not None:
        return max(1, width)
    launcher = config.hydra.launcher
    n_jobs = OmegaConf.select(launcher, "n_jobs", default=None)  # joblib
    if n_jobs is not None:
        return joblib_width(n_jobs)
    return max(1, OmegaConf.select(launcher, "array_parallelism", default=1))  # submitit; the basic launcher is 1


class NumberedLauncher(Launcher):
    """A launcher that runs jobs numbered as the sweeper says, all at once (see `launch_numbered`)."""

    def width(self) -> int | None:
        """How many jobs it runs at once, where its config's keys do not say it (`launcher_width`); None: they do."""
        return None

    @abstractmethod
    def launch_numbered(self, jobs: Sequence[tuple[int, Sequence[str]]]) -> list[JobReturn]:
        """Run `(job number, overrides)` pairs and return the results in the same order."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        return self.launch_numbered(list(enumerate(job_overrides, initial_job_idx)))


def launch_numbered(launcher: Launcher, jobs: Sequence[tuple[int, Sequence[str]]]) -> list[JobReturn]:
    """Run `(job number, overrides)` pairs whose numbers may have gaps.

    A resumed sweep skips the jobs it completed, and a search's job number may be its trial's. Hydra's launchers
    number a batch from one first number, so each run of consecutive numbers is one launch. A NumberedLauncher gets
    them all at once and keeps its parallelism."""
    if isinstance(launcher, NumberedLauncher):
        return launcher.launch_numbered(jobs)
    results: list[JobReturn] = []
    start = 0
    for end in range(1, len(jobs) + 1):
        if end == len(jobs) or jobs[end][0] != jobs[end - 1][0] + 1:
            overrides = [list(job[1]) for job in jobs[start:end]]
            results += launcher.launch(overrides, initial_job_idx=jobs[start][0])
            start = end
    return results
