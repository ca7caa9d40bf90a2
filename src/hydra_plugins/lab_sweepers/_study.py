"""One Optuna search: open (or resume) the study, ask a batch of trials, launch them as Hydra jobs, tell the results.

Resuming: the study lives in `storage` under `study_name`; running the same command again continues it until it
holds `n_trials` finished trials (COMPLETE, PRUNED or FAIL). Trials an interrupted sweep left RUNNING are marked
FAIL (user attr `interrupted`), do not count, and their parameters are queued to run again first.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from hydra.errors import ConfigCompositionException
from hydra.plugins.launcher import Launcher
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState

from lab.sweeps.jobs import fail_fast, launch_numbered, outcome
from lab.sweeps.ownership import claim
from lab.sweeps.pruning import open_trial

from ._search_space import Param, search_space

log = logging.getLogger(__name__)

PRUNING_CALLBACK = "callbacks.optuna_pruning"  # excluded from run names (conf/hparams_search/optuna.yaml)
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def absolute_storage(url: str) -> str:
    """A relative sqlite path made absolute (jobs may run elsewhere: joblib workers, SLURM nodes), its folder made."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or ":memory:" in url:
        return url
    path = Path(url[len(prefix) :]).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return prefix + str(path)


def _dict_override(key: str, value: dict[str, Any]) -> str:
    """`+key={a:1,b:'text'}` in Hydra's override grammar (strings quoted, so paths and URLs pass as they are)."""

    def fmt(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{fmt(x)}" for k, x in v.items()) + "}"
        if isinstance(v, str):
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return "null" if v is None else str(v).lower() if isinstance(v, bool) else repr(v)

    return f"+{key}={fmt(value)}"


def _counted(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.state in _FINISHED and not trial.user_attrs.get("interrupted")


class Search:
    def __init__(self, options: dict[str, Any], config: DictConfig, launcher: Launcher, config_loader: Any) -> None:
        self.options, self.config, self.launcher, self.config_loader = options, config, launcher, config_loader
        self.storage = absolute_storage(options["storage"])
        self.study_name = options["study_name"]

    # ------------------------------------------------------------------ study
    def _open_study(self) -> optuna.Study:
        try:
            done = len(optuna.load_study(study_name=self.study_name, storage=self.storage).trials)
        except KeyError:  # a new study
            done = 0
        sampler_spec = dict(self.options["sampler"] or {"_target_": "optuna.samplers.TPESampler"})
        if sampler_spec.get("seed") is not None:
            # A resumed study must not replay the random start-up points it already tried.
            sampler_spec["seed"] += done
        pruner = instantiate(self.options["pruner"]) if self.options["pruner"] else optuna.pruners.NopPruner()
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            direction=self.options["direction"],
            sampler=instantiate(sampler_spec),
            pruner=pruner,
            load_if_exists=True,
        )
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            open_trial(self.storage, self.study_name, trial.number).set_user_attr("interrupted", True)
            study.tell(trial.number, state=TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
            log.warning("trial %d was left running by an interrupted sweep: marked FAIL, queued again", trial.number)
        return study

    # ------------------------------------------------------------------ jobs
    def _job_overrides(self, trial: optuna.Trial, params: dict[str, Param], fixed: list[str]) -> list[str]:
        overrides = [*fixed, *(params[name].override(trial.params[name]) for name in params)]
        if self.options["pruner"]:
            spec = {  # the optuna_pruning callback option's keys (lab.config.callbacks)
                "storage": self.storage,
                "study_name": self.study_name,
                "trial_number": trial.number,
                "metric": self.options["pruning_metric"],
                "pruner": self.options["pruner"],
            }
            overrides.append(_dict_override(PRUNING_CALLBACK, spec))
        return overrides

    def _tell(self, study: optuna.Study, trial: optuna.Trial, ret: JobReturn) -> bool:
        """Record one job's result in the study; True if the job failed."""
        result = outcome(ret)
        if ret.hydra_cfg is not None:
            trial.set_user_attr("run_dir", str(ret.hydra_cfg.hydra.runtime.output_dir))
        if result.error:
            trial.set_user_attr("error", result.error)
        if result.status == "completed" and result.value is not None:
            study.tell(trial, result.value)
            log.info("trial %d: %s %s", trial.number, result.value, trial.params)
        elif result.status == "pruned":
            study.tell(trial, state=TrialState.PRUNED)
        else:
            if result.status == "completed":
                trial.set_user_attr("error", "the job returned no number (is optimized_metric logged?)")
            study.tell(trial, state=TrialState.FAIL)
        return result.failed

    def run(self, arguments: list[str]) -> list[list[JobReturn]]:
        parser = OverridesParser.create(config_loader=self.config_loader)
        space_args = [f"{key}={value}" for key, value in self.options["params"].items()]
        params, fixed = search_space(parser.parse_overrides([*space_args, *arguments]))
        if not params:
            raise ConfigCompositionException(
                "the Optuna search space is empty: set hydra.sweeper.params or pass key=interval(a,b) / choice(x,y)"
            )
        distributions = {name: p.distribution for name, p in params.items()}
        # The study is what resumes (its storage); `resume=auto` only lets this run add its trials to the sweep dir
        # of an earlier one. A trial is a new job in a dir of its own (its number): it starts fresh.
        fixed = [o for o in fixed if parser.parse_override(o).key_or_group != "resume"]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        with claim(sweep_dir, resuming=OmegaConf.select(self.config, "resume") == "auto"):
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            return self._search(params, fixed, distributions)

    def _search(
        self, params: dict[str, Param], fixed: list[str], distributions: dict[str, Any]
    ) -> list[list[JobReturn]]:
        study = self._open_study()
        counted = sum(_counted(t) for t in study.get_trials(deepcopy=False))
        wanted, batch = self.options["n_trials"], max(1, self.options["n_jobs"])
        log.info("study %r in %s: %d of %d trials done", self.study_name, self.storage, counted, wanted)
        stop_on_failure = fail_fast(self.config)
        returns = []
        while counted < wanted:
            trials = [study.ask(distributions) for _ in range(min(batch, wanted - counted))]
            overrides = [self._job_overrides(trial, params, fixed) for trial in trials]
            # job number = trial number: run dir <sweep dir>/<trial number>
            results = launch_numbered(self.launcher, [(t.number, o) for t, o in zip(trials, overrides)])
            returns.append(results)
            failed = [self._tell(study, trial, ret) for trial, ret in zip(trials, results)]
            counted += len(trials)
            if stop_on_failure and any(failed) and counted < wanted:
                log.error("sweep.fail_fast: a trial failed; not starting the %d remaining trials", wanted - counted)
                break
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if completed:
            best = study.best_trial
            log.info("best trial so far: #%d, value %s, %s", best.number, best.value, best.params)
        return returns
