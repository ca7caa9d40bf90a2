"""The extension's Hydra plugins and their configs: `hydra/sweeper=lab_optuna` (hparams_search=optuna),
`hydra/launcher=joblib` and `hydra/launcher=slurm` (also `lab_slurm`). Hydra finds each class here under
hydra_plugins/lab_sweepers/extensions.py, so their configs target `hydra_plugins.lab_sweepers.extensions.<class>`.

Thin on purpose: Hydra imports this module at every start-up, also for `--help` and `--cfg job`. Neither optuna nor
submitit nor torch is imported here, nor the launchers' and the search's own modules: the Optuna search (`study`) and
the joblib launcher's workers (`joblib_launcher`) are imported when they run, and the submitit launcher's module
imports submitit only when it submits.
"""

# No `from __future__ import annotations`: the dataclasses below become Hydra's structured configs, typed from their
# annotations as they are.
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from lab import extras
from lab.sweeps.jobs import NumberedLauncher

# The launchers build on Hydra's joblib and submitit plugins, in the `sweeps` and `slurm` extras. Without one, its
# launcher names are still stored, as a node whose launcher refuses with the extra to install (MissingPlugin): this
# module must import without them.
try:
    from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf
except ImportError:
    JobLibLauncherConf = None
try:
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
except ImportError:
    SlurmQueueConf = SlurmLauncher = None

PLUGINS = "hydra_plugins.lab_sweepers.extensions"  # where Hydra finds the classes of this module


class MissingPlugin(Launcher):
    """The launcher stored under `hydra/launcher=<name>` when the plugin it builds on is not installed: it refuses,
    naming the extra that brings the plugin, before any job starts."""

    def __init__(self, what: str, requires: list[str], **_: Any) -> None:
        extras.require(what, requires)
        raise RuntimeError(f"{what}: {', '.join(requires)} installed, yet its plugin did not load; reinstall it")

    def setup(self, **_: Any) -> None:  # never reached: the constructor refuses
        raise NotImplementedError

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        raise NotImplementedError


def missing_plugin(what: str, dist: str) -> dict[str, Any]:
    """The node stored for a launcher whose plugin is not installed: choosing it is refused (MissingPlugin)."""
    return {"_target_": f"{PLUGINS}.MissingPlugin", "what": what, "requires": [dist]}


# ---------------------------------------------------------------------------------------------- Optuna
@dataclass
class OptunaSweeperConf:
    """Every default of `hydra/sweeper=lab_optuna`; conf/hparams_search/optuna.yaml adds the search space. The
    interpolations point into the training config (conf/train.yaml): this sweeper is the template's own."""

    _target_: str = f"{PLUGINS}.OptunaSweeper"
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


class OptunaSweeper(Sweeper):
    """`hydra/sweeper=lab_optuna` (see conf/hparams_search/optuna.yaml): Bayesian search over current Optuna with
    its ask/tell API (study.py)."""

    def __init__(self, **options: Any) -> None:
        # plain containers: the options travel to job overrides (pruner) and into optuna's constructors
        self.options = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in options.items()}
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        extras.require("hparams_search=optuna", ("optuna",), instead="a grid sweep: -m key=a,b,c")
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: list[str]) -> Any:
        from lab.extensions.sweeps.study import Search

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        return Search(self.options, self.config, self.launcher, self.hydra_context.config_loader).run(arguments)


ConfigStore.instance().store(group="hydra/sweeper", name="lab_optuna", node=OptunaSweeperConf, provider="lab")


# ---------------------------------------------------------------------------------------------- SLURM
def with_resume(overrides: list[str], run_dir: Path) -> list[str]:
    """A requeued job's overrides: `ckpt_path=<run dir>/checkpoints/last.pt` when that checkpoint exists."""
    last = run_dir / "checkpoints" / "last.pt"
    if not last.is_file():
        return list(overrides)
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "ckpt_path"]
    return [*kept, f"ckpt_path={last}"]


if SlurmQueueConf is not None:

    @dataclass
    class LabSlurmConf(SlurmQueueConf):
        """`hydra/launcher=slurm`: Hydra's submitit_slurm launcher with this template's defaults, one SLURM job per
        sweep job (an array); a job requeued after preemption or timeout resumes from its last.pt. Every field of
        submitit_slurm applies (partition, qos, account, constraint, ...): python scripts/train.py -m
        hydra/launcher=slurm hydra.launcher.partition=gpu ..."""

        _target_: str = f"{PLUGINS}.LabSlurmLauncher"
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

    class LabSlurmLauncher(SlurmLauncher):
        """Hydra's submitit SLURM launcher, plus resumption. On preemption or timeout submitit calls the launcher's
        `checkpoint()` inside the running job and requeues what it returns. Hydra's launcher requeues the same
        overrides, so the job would train again from scratch; this one adds `ckpt_path=<run dir>/checkpoints/last.pt`
        when that checkpoint exists, so the requeued job continues exactly where it stopped (same run dir: the job's
        number and sweep dir do not change)."""

        def checkpoint(self, sweep_overrides: list[str], *args: Any, **kwargs: Any) -> Any:
            from hydra.core.hydra_config import HydraConfig

            # Called during the job (submitit's signal handler), so HydraConfig is this job's: its run dir.
            run_dir = Path(HydraConfig.get().runtime.output_dir)
            return super().checkpoint(with_resume(sweep_overrides, run_dir), *args, **kwargs)

    SLURM: Any = LabSlurmConf
else:
    SLURM = missing_plugin("hydra/launcher=slurm", "hydra-submitit-launcher")
ConfigStore.instance().store(group="hydra/launcher", name="lab_slurm", node=SLURM, provider="lab")
ConfigStore.instance().store(group="hydra/launcher", name="slurm", node=SLURM, provider="lab")


# ---------------------------------------------------------------------------------------------- joblib
class LabJoblibLauncher(NumberedLauncher):
    """`hydra/launcher=joblib`: Hydra's joblib launcher's settings, run so that a worker that dies fails only its
    own job (joblib_launcher.py, imported when a joblib sweep starts)."""

    def __init__(self, **joblib: Any) -> None:
        from lab.extensions.sweeps.joblib_launcher import WorkerPoolLauncher

        self.launcher = WorkerPoolLauncher(**joblib)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.launcher.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def launch_numbered(self, jobs: Sequence[tuple[int, Sequence[str]]]) -> list[JobReturn]:
        return self.launcher.launch_numbered(jobs)


if JobLibLauncherConf is not None:

    @dataclass
    class LabJoblibConf(JobLibLauncherConf):
        """Hydra's joblib launcher's keys (`n_jobs`: jobs at once, -1 = one per CPU; `timeout`: seconds per job), run
        so that a worker that dies fails only its own job (joblib_launcher.py)."""

        _target_: str = f"{PLUGINS}.LabJoblibLauncher"

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
