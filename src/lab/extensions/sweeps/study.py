"""One Optuna search: open or resume the study, ask a batch of trials, run them as Hydra jobs, tell the results.

The study lives in `storage` under `study_name`. Running the same command again continues it until it holds
`n_trials` trials (COMPLETE, PRUNED, FAIL, or RUNNING in a live driver).

Many drivers (N shells, an sbatch array) can share one study. Each driver heartbeats its trials every
`heartbeat_interval` seconds. Before asking, a driver fails the RUNNING trials whose heartbeat is older than
`grace_period`, since their driver died, and queues their parameters again up to `max_retry` times. So no driver
fails another's live trials. Optuna's RDBStorage has this heartbeat built in; for `journal:///`, which has none, the
heartbeat is a system attr. It compares the drivers' clocks, so keep the grace period well above their skew.

With `heartbeat_interval=null` a study has one driver. At start, trials an interrupted sweep left RUNNING are marked
FAIL (user attr `interrupted`), do not count, and are queued to run again first.

No trial is asked beyond n_trials. For a file-backed study (sqlite, journal), reaping, counting and asking run under
a lock on `<storage file>.drivers.lock`. A database server has no such lock, so each driver checks its new trials'
rank and gives back any beyond n_trials unrun, as FAIL with user attr `surplus`, which does not count.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
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

from lab.extensions.sweeps.search_space import Param, search_space
from lab.extensions.sweeps.study_storage import (
    JOURNAL,
    absolute_storage,
    check_storage,
    open_storage,
    open_trial,
    study_lock,
)
from lab.sweeps.jobs import combine, expand, fail_fast, launch_numbered, outcome
from lab.sweeps.ownership import claim

log = logging.getLogger(__name__)

PRUNING_CALLBACK = "callbacks.optuna_pruning"  # excluded from run names (conf/hparams_search/optuna.yaml)
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def _dict_override(key: str, value: dict[str, Any]) -> str:
    """Write `+key={a:1,b:'text'}` in Hydra's override grammar, quoting strings so paths and URLs pass unchanged."""

    def fmt(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{fmt(x)}" for k, x in v.items()) + "}"
        if isinstance(v, str):
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return "null" if v is None else str(v).lower() if isinstance(v, bool) else repr(v)

    return f"+{key}={fmt(value)}"


HEARTBEAT_ATTR = "lab:heartbeat"  # a journal trial's last heartbeat, time.time() on its driver


def _retried(trials: Sequence[optuna.trial.FrozenTrial]) -> set[int]:
    """Return the numbers of failed trials that a later trial reruns; they do not count."""
    numbers: set[int] = set()
    for trial in trials:
        numbers.update(trial.system_attrs.get("retry_history", ()))
        if "retry_of" in trial.user_attrs:
            numbers.add(trial.user_attrs["retry_of"])
    return numbers


def _occupied(trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """Return the trials that count toward n_trials: finished ones, and RUNNING ones.

    A FAIL does not count when it is rerun, `interrupted` or `surplus`. A RUNNING trial counts even if its driver
    died, since the next reap replaces it by its retry."""
    retried = _retried(trials)

    def counts(trial: optuna.trial.FrozenTrial) -> bool:
        if trial.state == TrialState.RUNNING:
            return True
        if trial.state not in _FINISHED:
            return False  # WAITING: counted once a driver runs it
        if trial.state == TrialState.FAIL:
            attrs = trial.user_attrs
            return trial.number not in retried and not attrs.get("interrupted") and not attrs.get("surplus")
        return True

    return [trial for trial in trials if counts(trial)]


class Heartbeat:
    """Beat for the trials this driver runs, and reap the trials of dead drivers."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self.interval = options.get("heartbeat_interval")
        self.options_grace = options.get("grace_period")  # null: Optuna's default, two beats
        self.grace = self.options_grace if self.options_grace is not None else 2 * (self.interval or 0)
        self.url, self.journal = url, url.startswith(JOURNAL)
        with warnings.catch_warnings():  # "experimental" since Optuna 2.8, but stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=options.get("max_retry"))

    @functools.cached_property
    def storage(self) -> Any:
        """Open the storage once the sweep dir is claimed, so a refused sweep writes no database.

        It opens under the lock, or two drivers starting on a new sqlite file would both create its tables."""
        with study_lock(self.url), warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if self.journal or not self.interval:
                return open_storage(self.url)
            # RDBStorage has its own heartbeat, which also finds the stale trials
            settings = {"heartbeat_interval": self.interval, "grace_period": self.options_grace}
            return open_storage(self.url, {**settings, "heartbeat_stale_trial_callback": self.retry})

    def beat(self, trials: Sequence[optuna.Trial]) -> None:
        for trial in trials:
            if self.journal:
                self.storage.set_trial_system_attr(trial._trial_id, HEARTBEAT_ATTR, time.time())
            else:
                self.storage.record_heartbeat(trial._trial_id)

    @contextlib.contextmanager
    def beating(self, trials: Sequence[optuna.Trial]) -> Iterator[None]:
        """Beat for `trials` every interval while the block runs the jobs."""
        if not self.interval:
            yield
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.interval):
                try:
                    self.beat(trials)
                except Exception as err:  # a busy database; the next beat may pass, and the grace is 2 beats
                    log.warning("optuna heartbeat not recorded: %s", err)

        thread = threading.Thread(target=loop, name="optuna-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def reap(self, study: optuna.Study) -> None:
        """Fail the RUNNING trials whose driver stopped beating, and queue each again up to max_retry times."""
        if not self.interval:
            return
        if not self.journal:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
                optuna.storages.fail_stale_trials(study)
            stale = before - {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
            stale = {n for n in stale if study.trials[n].state == TrialState.FAIL}
        else:
            now, stale = time.time(), set()
            for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                beat = trial.system_attrs.get(HEARTBEAT_ATTR)
                if beat is not None and now - beat > self.grace:
                    self.storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
                    self.retry(study, self.storage.get_trial(trial._trial_id))
                    stale.add(trial.number)
        for number in sorted(stale):
            log.warning("trial %d: its driver stopped (no heartbeat in %ss): FAIL, queued again", number, self.grace)


class Search:
    def __init__(self, options: dict[str, Any], config: DictConfig, launcher: Launcher, config_loader: Any) -> None:
        self.options, self.config, self.launcher, self.config_loader = options, config, launcher, config_loader
        try:
            check_storage(options["storage"])
        except ValueError as err:
            sys.exit(f"error: {err}")  # one line, not a traceback from inside Hydra, before anything is written
        for key, meaning in (("heartbeat_interval", "seconds, or null: one driver"), ("grace_period", "seconds")):
            value = options.get(key)
            if value is not None and (not isinstance(value, int) or value <= 0):
                sys.exit(f"error: hydra.sweeper.{key}={value}: a whole number > 0 ({meaning}) or null")
        retries = options.get("max_retry")
        if retries is not None and (not isinstance(retries, int) or retries < 0):
            sys.exit(f"error: hydra.sweeper.max_retry={retries}: a whole number >= 0, or null (no limit)")
        self.storage = absolute_storage(options["storage"])
        self.study_name = options["study_name"]
        self.heartbeat = Heartbeat(self.storage, options)

    # ------------------------------------------------------------------ study
    def _open_study(self) -> optuna.Study:
        try:
            done = len(optuna.load_study(study_name=self.study_name, storage=self.heartbeat.storage).trials)
        except KeyError:  # a new study
            done = 0
        sampler_spec = dict(self.options["sampler"] or {"_target_": "optuna.samplers.TPESampler"})
        if sampler_spec.get("seed") is not None:
            # A resumed study must not replay the random start-up points it already tried.
            sampler_spec["seed"] += done
        pruner = instantiate(self.options["pruner"]) if self.options["pruner"] else optuna.pruners.NopPruner()
        with study_lock(self.storage):  # when two drivers start one study, one creates it and the other loads it
            study = optuna.create_study(
                study_name=self.study_name,
                storage=self.heartbeat.storage,
                direction=self.options["direction"],
                sampler=instantiate(sampler_spec),
                pruner=pruner,
                load_if_exists=True,
            )
        if self.heartbeat.interval:
            return study  # other drivers may run these trials; reap finds the dead ones
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            open_trial(self.heartbeat.storage, self.study_name, trial.number).set_user_attr("interrupted", True)
            study.tell(trial.number, state=TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
            log.warning("trial %d was left running by an interrupted sweep: marked FAIL, queued again", trial.number)
        return study

    # ------------------------------------------------------------------ jobs
    def _job_overrides(self, trial: optuna.Trial, params: dict[str, Param], fixed: list[str]) -> list[str]:
        overrides = [*fixed, *(params[name].override(trial.params[name]) for name in params)]
        if self.options["pruner"]:
            spec = {  # the keys of the optuna_pruning callback option (options.py)
                "storage": self.storage,
                "study_name": self.study_name,
                "trial_number": trial.number,
                "metric": self.options["pruning_metric"],
                "pruner": self.options["pruner"],
            }
            overrides.append(_dict_override(PRUNING_CALLBACK, spec))
        return overrides

    def _tell(self, study: optuna.Study, trial: optuna.Trial, rets: Sequence[JobReturn]) -> bool:
        """Record a trial's result, the mean over its jobs (lab.sweeps.jobs.combine), in the study; return True if it
        failed."""
        result = combine([outcome(ret) for ret in rets])
        run_dirs = [str(ret.hydra_cfg.hydra.runtime.output_dir) for ret in rets if ret.hydra_cfg is not None]
        if run_dirs:
            trial.set_user_attr("run_dir", " ".join(run_dirs))
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

    def _ask(self, study: optuna.Study, distributions: dict[str, Any], wanted: int, batch: int) -> list[optuna.Trial]:
        """Ask the next batch of trials for this driver, never past `wanted` across all drivers."""
        with study_lock(self.storage):
            self.heartbeat.reap(study)
            left = wanted - len(_occupied(study.get_trials(deepcopy=False)))
            with warnings.catch_warnings():  # Optuna warns heartbeats are for optimize(); we beat ourselves
                warnings.simplefilter("ignore", UserWarning)
                trials = [study.ask(distributions) for _ in range(max(0, min(batch, left)))]
            if self.heartbeat.interval:
                self.heartbeat.beat(trials)  # at once, since a trial never beaten is never found stale
        # Without a lock, two drivers may have asked for the last place. Trial numbers follow the asking order, so
        # the first `wanted` counted trials win and later ones are given back unrun.
        occupied = {t.number for t in _occupied(study.get_trials(deepcopy=False))}
        kept = []
        for trial in trials:
            if sum(n < trial.number for n in occupied) < wanted:
                kept.append(trial)
                continue
            trial.set_user_attr("surplus", True)
            study.tell(trial, state=TrialState.FAIL)
            log.info("trial %d: the study already has its %d trials (another driver's): not run", trial.number, wanted)
        return kept

    def run(self, arguments: list[str]) -> list[list[JobReturn]]:
        parser = OverridesParser.create(config_loader=self.config_loader)
        space_args = [f"{key}={value}" for key, value in self.options["params"].items()]
        params, fixed = search_space(parser.parse_overrides([*space_args, *arguments]))
        if not params:
            raise ConfigCompositionException(
                "the Optuna search space is empty: set hydra.sweeper.params or pass key=interval(a,b) / choice(x,y)"
            )
        distributions = {name: p.distribution for name, p in params.items()}
        # The study itself resumes. `resume=auto` only lets this run add trials to an earlier sweep dir; each trial
        # is a new job in its own dir and starts fresh.
        fixed = [o for o in fixed if parser.parse_override(o).key_or_group != "resume"]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        with claim(sweep_dir, resuming=OmegaConf.select(self.config, "resume") == "auto"):
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            return self._search(params, fixed, distributions)

    def _search(
        self, params: dict[str, Param], fixed: list[str], distributions: dict[str, Any]
    ) -> list[list[JobReturn]]:
        study = self._open_study()
        wanted, batch = self.options["n_trials"], max(1, self.options["n_jobs"])
        counted = len(_occupied(study.get_trials(deepcopy=False)))
        log.info("study %r in %s: %d of %d trials done or running", self.study_name, self.storage, counted, wanted)
        stop_on_failure = fail_fast(self.config)
        returns = []
        while True:
            trials = self._ask(study, distributions, wanted, batch)
            if not trials:
                running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if not (running and self.heartbeat.interval):
                    break
                # Other drivers' trials fill the study. Wait: if a driver dies, its trial goes stale and this
                # driver reruns it, so the last driver alive finishes the study.
                time.sleep(self.heartbeat.interval)
                continue
            # a trial's jobs: one, or one per part (cross-validation folds: lab.sweeps.jobs.expand)
            jobs = [expand(self.config, self._job_overrides(trial, params, fixed)) for trial in trials]
            # job number = trial number x its jobs + part, so the run dir is <sweep dir>/<trial number> for one job
            numbered = [(t.number * len(own) + i, job) for t, own in zip(trials, jobs) for i, job in enumerate(own)]
            with self.heartbeat.beating(trials):
                results = launch_numbered(self.launcher, numbered)
            returns.append(results)
            ends = list(itertools.accumulate(len(own) for own in jobs))
            failed = [
                self._tell(study, trial, results[end - len(own) : end]) for trial, own, end in zip(trials, jobs, ends)
            ]
            if stop_on_failure and any(failed):
                left = wanted - len(_occupied(study.get_trials(deepcopy=False)))
                if left > 0:
                    log.error("sweep.fail_fast: a trial failed; not starting the %d remaining trials", left)
                    break
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if completed:
            best = study.best_trial
            log.info("best trial so far: #%d, value %s, %s", best.number, best.value, best.params)
        return returns
