"""The extension's Hydra plugin, `hydra/launcher=ray` (its keys: conf/hydra/launcher/ray.yaml).

Hydra finds the class through hydra_plugins/lab_sweepers/extensions.py, so the preset targets
`hydra_plugins.lab_sweepers.extensions.RayLauncher`. Thin on purpose: Hydra imports it at every start, even for
`--help`, so ray is imported only when a sweep runs on it (launcher.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from lab import extras
from lab.sweeps.jobs import NumberedLauncher

if TYPE_CHECKING:
    from lab.extensions.ray.launcher import RayJobs


class RayLauncher(NumberedLauncher):
    """`hydra/launcher=ray`: each job of the sweep a Ray task with its CPU/GPU share (launcher.RayJobs)."""

    def __init__(self, **keys: Any) -> None:
        self.keys = keys
        self.jobs: RayJobs | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        extras.require("hydra/launcher=ray", ("ray",), instead="hydra/launcher=basic (one job at a time)")
        from lab.extensions.ray.launcher import RayJobs

        self.jobs = RayJobs(**self.keys)
        self.jobs.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def width(self) -> int | None:
        return self.jobs.width() if self.jobs is not None else None

    def launch_numbered(self, jobs: Sequence[tuple[int, Sequence[str]]]) -> list[JobReturn]:
        assert self.jobs is not None  # set by setup()
        return self.jobs.launch_numbered(jobs)
