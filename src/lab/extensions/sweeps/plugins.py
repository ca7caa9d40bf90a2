"""The extension's Hydra plugins and configs: `hydra/sweeper=lab_optuna`, `hydra/launcher=joblib` and `slurm`.

Hydra finds each class here through hydra_plugins/lab_sweepers/extensions.py, so the configs target
`hydra_plugins.lab_sweepers.extensions.<class>`.

This module is thin on purpose: Hydra imports it at every start, even for `--help`. It imports neither optuna,
submitit nor torch; `study` and `joblib_launcher` are imported only when they run.
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

# The launchers build on Hydra's joblib and submitit plugins, from the `sweeps` and `slurm` extras. This module must
# import without them; a missing one's launcher is stored as MissingPlugin, which names the extra to install.
try:
    from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf
except ImportError:
    JobLibLauncherConf = None
try:
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
except ImportError:
    SlurmQueueConf = SlurmLauncher = None

PLUGINS = "hydra_plugins.lab_sweepers.extensions"  # where Hydra finds this module's classes


class MissingPlugin(Launcher):
    """Refuse, before any job starts, a launcher whose plugin is not installed, naming the extra to install."""

    def __init__(self, what: str, requires: list[str], **_: Any) -> None:
        extras.require(what, requires)
        raise RuntimeError(f"{what}: {', '.join(requires)} installed, yet its plugin did not load; reinstall it")

    def setup(self, **_: Any) -> None:  # never reached: the constructor raises
        raise NotImplementedError

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        raise NotImplementedError


def missing_plugin(what: str, dist: str) -> dict[str, Any]:
    """Return the config node for a launcher whose plugin is not installed; choosing it raises (MissingPlugin)."""
    return {"_target_": f"{PLUGINS}.MissingPlugin", "what": what, "requires": [dist]}


# ---------------------------------------------------------------------------------------------- Optuna
@dataclass
class OptunaSweeperConf:
    """The defaults of `hydra/sweeper=lab_optuna`; conf/hparams_search/optuna.yaml adds the search space.

    The interpolations point into conf/train.yaml, since this sweeper is the template's own."""

    _target_: str = f"{PLUGINS}.OptunaSweeper"
    _recursive_: bool = False  # sampler and pruner stay specs: the sweeper builds them and hands the pruner to jobs
    study_name: str = "${task_name}-optuna"
    # a fixed path, not the timestamped sweep dir, so the same command resumes the study. A relative path is from
    # where the sweep starts. Or any SQLAlchemy URL (postgresql://...), or journal:///<path>.log for a file system
    # nodes share (NFS), where sqlite's locks cannot be trusted
    storage: str = "sqlite:///outputs/${task_name}/optuna/${.study_name}.db"
    direction: str = "${sweep.direction}"  # maximize | minimize optimized_metric
    n_trials: int = 20  # total trials in the study, including earlier runs' and other drivers'
    n_jobs: int = 1  # trials per launcher batch: the parallelism of hydra/launcher=joblib or submitit
    # Many drivers (shells, an sbatch array) may share a study; each beats for its trials every heartbeat_interval
    # seconds. A RUNNING trial with no beat for grace_period seconds (null: 2 intervals) lost its driver, so the
    # next driver fails it and reruns it, up to max_retry times (null: no limit). heartbeat_interval=null means one
    # driver per study, which fails every RUNNING trial when it starts.
    heartbeat_interval: int | None = 60
    grace_period: int | None = None
    max_retry: int | None = 3
    # its `seed` is offset by the trials already in the study, so a resumed run draws new points. Give drivers that
    # share a study their own seeds, or two starting together draw the same first points
    sampler: Any = field(
        default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": "${seed}", "n_startup_trials": 5}
    )
    # null = no pruning. The job's callback feeds it `pruning_metric` after every validation. n_startup_trials
    # trials run to the end before any is pruned, and each trial runs n_warmup_steps epochs first
    pruner: Any = field(
        default_factory=lambda: {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 3, "n_warmup_steps": 2}
    )
    pruning_metric: str = "val/${task.monitor}"  # reported after every validation
    params: dict[str, str] = field(default_factory=dict)  # search space: key -> interval/range/choice/tag(log,...)


class OptunaSweeper(Sweeper):
    """`hydra/sweeper=lab_optuna`: Bayesian search with Optuna's ask/tell API (study.py)."""

    def __init__(self, **options: Any) -> None:
        # plain containers, since the options go into job overrides and optuna's constructors
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
    """Add `ckpt_path=<run dir>/checkpoints/last.pt` to a requeued job's overrides when that checkpoint exists."""
    last = run_dir / "checkpoints" / "last.pt"
    if not last.is_file():
        return list(overrides)
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "ckpt_path"]
    return [*kept, f"ckpt_path={last}"]


if SlurmQueueConf is not None:

    @dataclass
    class LabSlurmConf(SlurmQueueConf):
        """`hydra/launcher=slurm`: Hydra's submitit_slurm launcher with this template's defaults.

        Each sweep job is one SLURM job of an array, and a job requeued after preemption or timeout resumes from its
        last.pt. Every submitit_slurm field applies: python scripts/train.py -m hydra/launcher=slurm
        hydra.launcher.partition=gpu ..."""

        _target_: str = f"{PLUGINS}.LabSlurmLauncher"
        # --time; submitit signals the job signal_delay_s earlier, so it checkpoints and requeues
        timeout_min: int = 240
        gpus_per_node: int | None = 1
        tasks_per_node: int = "${.gpus_per_node}"  # type: ignore[assignment]  # one task (DDP rank) per GPU
        cpus_per_task: int | None = 8
        mem_gb: int | None = 64
        max_num_timeout: int = 3  # requeues after hitting the time limit; preemptions always requeue
        array_parallelism: int = 16  # sweep jobs running at once
        # let SLURM put a preempted job back in the queue
        additional_parameters: dict[str, Any] = field(default_factory=lambda: {"requeue": True})

    class LabSlurmLauncher(SlurmLauncher):
        """Hydra's submitit SLURM launcher, plus resumption.

        On preemption or timeout, submitit calls `checkpoint()` inside the job and requeues what it returns. Hydra's
        version requeues the same overrides, so the job would start from scratch. This one adds `ckpt_path` to its
        last.pt, so the requeued job continues where it stopped, in the same run dir."""

        def checkpoint(self, sweep_overrides: list[str], *args: Any, **kwargs: Any) -> Any:
            from hydra.core.hydra_config import HydraConfig

            # called in the job by submitit's signal handler, so HydraConfig is this job's
            run_dir = Path(HydraConfig.get().runtime.output_dir)
            return super().checkpoint(with_resume(sweep_overrides, run_dir), *args, **kwargs)

    SLURM: Any = LabSlurmConf
else:
    SLURM = missing_plugin("hydra/launcher=slurm", "hydra-submitit-launcher")
ConfigStore.instance().store(group="hydra/launcher", name="lab_slurm", node=SLURM, provider="lab")
ConfigStore.instance().store(group="hydra/launcher", name="slurm", node=SLURM, provider="lab")


# ---------------------------------------------------------------------------------------------- joblib
class LabJoblibLauncher(NumberedLauncher):
    """`hydra/launcher=joblib`: Hydra's joblib settings, but a worker that dies fails only its own job."""

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
        """Hydra's joblib keys, run so that a dead worker fails only its own job (joblib_launcher.py).

        `n_jobs` is jobs at once (-1 = one per CPU); `timeout` is seconds per job."""

        _target_: str = f"{PLUGINS}.LabJoblibLauncher"

    JOBLIB: Any = LabJoblibConf
else:
    JOBLIB = missing_plugin("hydra/launcher=joblib", "hydra-joblib-launcher")


class JoblibIsLabJoblib(SearchPathPlugin):
    """Make `hydra/launcher=joblib` this template's launcher, stored over the joblib plugin's own entry.

    Hydra calls this after its plugin scan, which reruns every plugin's config module in sys.path order; the joblib
    plugin's could come later and store its entry back. A conf/hydra/launcher/joblib.yaml would not work: Hydra
    checks it against the plugin's stored config of the same name and warns on every start."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        ConfigStore.instance().store(group="hydra/launcher", name="joblib", node=JOBLIB, provider="lab")
