"""Configs of the plugins, registered in Hydra's ConfigStore as `hydra/sweeper=lab_grid|lab_optuna` and
`hydra/launcher=lab_slurm` (conf/hydra/default.yaml makes lab_grid the default sweeper)."""

# No `from __future__ import annotations`: Hydra executes plugin modules before putting them in sys.modules, and
# dataclasses cannot resolve string annotations of a module that is not there yet.
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.lab_sweepers.grid_sweeper.GridSweeper"
    max_batch_size: int | None = None  # jobs per launcher call; null = all at once (fail_fast: the launcher's width)
    params: dict[str, str] | None = None  # sweep axes in the config, merged with the command line's


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.lab_sweepers.optuna_sweeper.OptunaSweeper"
    _recursive_: bool = False  # sampler/pruner stay specs: the sweeper builds them, and hands the pruner to jobs
    study_name: str = "${task_name}"
    # sqlite file at a path that does not change between runs, so the same command resumes the study;
    # a relative sqlite path is taken from the directory the sweep is started in
    storage: str = "sqlite:///outputs/${task_name}/optuna/${.study_name}.db"
    direction: str = "maximize"  # or minimize: what the jobs return (optimized_metric)
    n_trials: int = 20  # total trials wanted in the study, those of earlier runs included
    n_jobs: int = 1  # trials asked per launcher batch (run in parallel by joblib / submitit)
    # optuna sampler; its `seed` is offset by the trials already in the study, so a resumed run draws new points
    sampler: Any = field(
        default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": 42, "n_startup_trials": 10}
    )
    # optuna pruner (null = no pruning), fed `pruning_metric` after every validation by the job's callback
    pruner: Any = field(
        default_factory=lambda: {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 5, "n_warmup_steps": 2}
    )
    pruning_metric: str = "val/acc"
    params: dict[str, str] = field(default_factory=dict)  # search space: key -> interval/range/choice/tag(log,...)


@dataclass
class LabSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.lab_sweepers.slurm_launcher.LabSlurmLauncher"


ConfigStore.instance().store(group="hydra/sweeper", name="lab_grid", node=GridSweeperConf, provider="lab")
ConfigStore.instance().store(group="hydra/sweeper", name="lab_optuna", node=OptunaSweeperConf, provider="lab")
ConfigStore.instance().store(group="hydra/launcher", name="lab_slurm", node=LabSlurmConf, provider="lab")
