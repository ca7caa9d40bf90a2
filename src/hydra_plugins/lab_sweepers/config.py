"""Configs of the plugins, registered in Hydra's ConfigStore as `hydra/sweeper=lab_grid|lab_optuna` and
`hydra/launcher=lab_slurm|joblib` (conf/hydra/default.yaml makes lab_grid the default sweeper,
hydra/launcher=slurm is lab_slurm; joblib replaces the joblib plugin's own entry)."""

# No `from __future__ import annotations`: Hydra executes plugin modules before putting them in sys.modules, and
# dataclasses cannot resolve string annotations of a module that is not there yet.
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.plugins.search_path_plugin import SearchPathPlugin

# The launchers build on Hydra's joblib and submitit plugins, in the `sweeps` and `slurm` extras. Without one, its
# launcher names are still stored, as a node whose launcher refuses with the extra to install (missing.py): this
# module must import without them, or the grid sweeper every run uses would go unregistered too.
try:
    from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf
except ImportError:
    JobLibLauncherConf = None
try:
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
except ImportError:
    SlurmQueueConf = None


def missing_plugin(what: str, dist: str) -> dict[str, Any]:
    """The node stored for a launcher whose plugin is not installed: choosing it is refused (missing.py)."""
    return {"_target_": "hydra_plugins.lab_sweepers.missing.MissingPlugin", "what": what, "requires": [dist]}


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.lab_sweepers.grid_sweeper.GridSweeper"
    max_batch_size: int | None = None  # jobs per launcher call; null = all at once (fail_fast: the launcher's width)
    params: dict[str, str] | None = None  # sweep axes in the config, merged with the command line's


@dataclass
class OptunaSweeperConf:
    """Every default of `hydra/sweeper=lab_optuna`; conf/hparams_search/optuna.yaml adds the search space. The
    interpolations point into the training config (conf/train.yaml): this sweeper is the template's own."""

    _target_: str = "hydra_plugins.lab_sweepers.optuna_sweeper.OptunaSweeper"
    _recursive_: bool = False  # sampler/pruner stay specs: the sweeper builds them, and hands the pruner to jobs
    study_name: str = "${task_name}-optuna"
    # sqlite file at a path that does not change between runs (not the timestamped sweep dir), so the same command
    # resumes the study; a relative sqlite/journal path is taken from the directory the sweep is started in. Or any
    # SQLAlchemy URL (postgresql://...), or journal:///<path>.log: Optuna's journal file, for a file system that
    # nodes share (NFS), where sqlite's locks are not to be trusted
    storage: str = "sqlite:///outputs/${task_name}/optuna/${.study_name}.db"
    direction: str = "${sweep.direction}"  # maximize | minimize what the jobs return (optimized_metric)
    n_trials: int = 20  # total trials wanted in the study, those of earlier runs and of other drivers included
    n_jobs: int = 1  # trials asked per launcher batch: the parallelism of hydra/launcher=joblib or submitit
    # Many drivers (shells, an sbatch array) may run one study: each records a heartbeat of its running trials every
    # heartbeat_interval seconds; a RUNNING trial without one for grace_period seconds (null: 2 intervals) lost its
    # driver, and the next driver to ask fails it and runs its parameters again (at most max_retry times, null: no
    # limit). heartbeat_interval=null: one driver per study, which fails every RUNNING trial when it starts.
    heartbeat_interval: int | None = 60
    grace_period: int | None = None
    max_retry: int | None = 3
    # optuna sampler; its `seed` is offset by the trials already in the study, so a resumed run draws new points
    # (drivers sharing a study: give each its own seed, or two starting together draw the same first points)
    sampler: Any = field(
        default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": "${seed}", "n_startup_trials": 5}
    )
    # optuna pruner (null = no pruning), fed `pruning_metric` after every validation by the job's callback:
    # n_startup_trials trials run to the end before any is pruned, and each trial runs n_warmup_steps epochs first
    pruner: Any = field(
        default_factory=lambda: {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 3, "n_warmup_steps": 2}
    )
    pruning_metric: str = "val/${task.monitor}"  # reported after every validation (epoch)
    params: dict[str, str] = field(default_factory=dict)  # search space: key -> interval/range/choice/tag(log,...)


ConfigStore.instance().store(group="hydra/sweeper", name="lab_grid", node=GridSweeperConf, provider="lab")
ConfigStore.instance().store(group="hydra/sweeper", name="lab_optuna", node=OptunaSweeperConf, provider="lab")

if SlurmQueueConf is not None:

    @dataclass
    class LabSlurmConf(SlurmQueueConf):
        """`hydra/launcher=slurm`: Hydra's submitit_slurm launcher with this template's defaults, one SLURM job per
        sweep job (an array); a job requeued after preemption or timeout resumes from its last.pt. Every field of
        submitit_slurm applies (partition, qos, account, constraint, ...): python scripts/train.py -m
        hydra/launcher=slurm hydra.launcher.partition=gpu ..."""

        _target_: str = "hydra_plugins.lab_sweepers._slurm_launcher.LabSlurmLauncher"
        # --time; submitit signals the job signal_delay_s before it, which checkpoints and requeues
        timeout_min: int = 240
        gpus_per_node: int | None = 1
        tasks_per_node: int = "${.gpus_per_node}"  # type: ignore[assignment]  # one task per GPU: the job's DDP ranks
        cpus_per_task: int | None = 8
        mem_gb: int | None = 64
        max_num_timeout: int = 3  # requeues after hitting the time limit (preemptions are requeued regardless)
        array_parallelism: int = 16  # sweep jobs running at once
        # requeue: let SLURM put a preempted job back in the queue
        additional_parameters: dict[str, Any] = field(default_factory=lambda: {"requeue": True})

    SLURM: Any = LabSlurmConf
else:
    SLURM = missing_plugin("hydra/launcher=slurm", "hydra-submitit-launcher")
ConfigStore.instance().store(group="hydra/launcher", name="lab_slurm", node=SLURM, provider="lab")
ConfigStore.instance().store(group="hydra/launcher", name="slurm", node=SLURM, provider="lab")

if JobLibLauncherConf is not None:

    @dataclass
    class LabJoblibConf(JobLibLauncherConf):
        """Hydra's joblib launcher's keys (`n_jobs`: jobs at once, -1 = one per CPU; `timeout`: seconds per job), run
        so that a worker that dies fails only its own job (joblib_launcher.py)."""

        _target_: str = "hydra_plugins.lab_sweepers.joblib_launcher.LabJoblibLauncher"

    JOBLIB: Any = LabJoblibConf
else:
    JOBLIB = missing_plugin("hydra/launcher=joblib", "hydra-joblib-launcher")


class JoblibIsLabJoblib(SearchPathPlugin):
    """Makes `hydra/launcher=joblib` this template's joblib launcher, stored over the joblib plugin's own entry.

    It is done here because Hydra calls this after its plugin scan, which runs every plugin's config module again
    in the order of sys.path (the joblib plugin's could come after this module and store its entry back). A
    conf/hydra/launcher/joblib.yaml could not do it: Hydra validates a file against a stored config of the same
    name (the plugin's, with another _target_) and warns of that on every start."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        ConfigStore.instance().store(group="hydra/launcher", name="joblib", node=JOBLIB, provider="lab")
