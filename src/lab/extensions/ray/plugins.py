"""The extension's Hydra plugin, `hydra/launcher=ray`, and its keys (`RayLauncherConf`).

Hydra finds the class through hydra_plugins/lab_sweepers/extensions.py, so the stored config targets
`hydra_plugins.lab_sweepers.extensions.RayLauncher`. Thin on purpose: Hydra imports it at every start, even for
`--help`, so ray is imported only when a sweep runs on it (launcher.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hydra.core.config_store import ConfigStore
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


@dataclass
class RayLauncherConf:
    """`hydra.launcher.*` of `hydra/launcher=ray`."""

    _target_: str = "hydra_plugins.lab_sweepers.extensions.RayLauncher"
    # null: start a local Ray instance for this sweep, shut down when it ends. auto (or <head>:6379): join that
    # cluster, which the sweep leaves running
    address: str | None = None
    local_cpus: int | None = None  # the local instance's CPUs (null: this machine's); with address=null only
    local_gpus: int | None = None  # the local instance's GPUs (null: those CUDA_VISIBLE_DEVICES shows); address=null
    num_cpus: float = 1  # each job's share: Ray starts a job when its share is free
    num_gpus: float | None = None  # each job's GPUs (null: 1 if the cluster has GPUs, else 0); Ray sets its devices
    max_concurrent: int | None = None  # jobs running at once at most (null: as many as the shares allow)
    # Ray's runtime_env for the jobs (working_dir, env_vars, pip, ...): how a cluster's workers get this code
    runtime_env: dict[str, Any] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/launcher", name="ray", node=RayLauncherConf, provider="lab")
