"""Support Hydra multiruns for every sweeper: our grid sweeper (`hydra_plugins/lab_sweepers`) or an extension's.

Here is what every run needs: whether it is a job of a sweep, and which, and the Hydra callback that records a job
for its sweep's summary. The machinery is in the submodules, imported only where a sweep is in play: `jobs` covers
job outcomes and fail-fast, `summary` the sweep table, and `ownership` who owns a sweep dir and what `resume=auto`
continues in it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from lab.run_dir import SWEEP_CONFIG


def in_multirun() -> bool:
    """Whether this runs inside a job of a Hydra sweep (`-m`, or hydra.mode=MULTIRUN)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_of(run_dir: Path) -> Path | None:
    """Return the sweep dir `run_dir` is a job of, or None for a single run.

    It is read from Hydra's config, or else from the files, since a spawned DDP rank has no Hydra. A sweep dir holds
    the sweep's multirun.yaml."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().sweep.dir).absolute() if in_multirun() else None
    near = run_dir.absolute().parents[:2]  # <sweep dir>/<job num>, or a subdir one level deeper
    return next((folder for folder in near if (folder / SWEEP_CONFIG).is_file()), None)


def sweep_resume_hint(sweep_dir: Path) -> str:
    return (
        f"resume the sweep: the same command with hydra.sweep.dir={sweep_dir} resume=auto "
        "(its completed jobs are kept, the others continue from their last.pt)"
    )


class SweepSummary(Callback):
    """Each job of a multirun writes its record, and the multirun's end its table (lab.sweeps.summary). Hydra makes
    this callback in a single run too, which loads none of that."""

    def __init__(self, filename: str = "sweep_summary") -> None:
        self.filename = filename
        self._job_start = self._job_start_wall = 0.0

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._job_start, self._job_start_wall = time.monotonic(), time.time()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if config.hydra.mode.name != "MULTIRUN":
            return
        from lab.sweeps.summary import record_job

        record_job(config, job_return, self._job_start_wall, time.monotonic() - self._job_start)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from lab.sweeps.summary import write_summary

        write_summary(config, self.filename)
