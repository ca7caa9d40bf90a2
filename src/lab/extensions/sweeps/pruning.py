"""Optuna pruning inside a training job: report a validation metric to the trial, stop when the pruner says so.

The Optuna sweeper (study.py) turns this callback on in each trial's overrides as
`+callbacks.optuna_pruning={storage: ..., study_name: ..., trial_number: ..., ...}` (the `optuna_pruning`
option, options.py). It opens the study from its storage, so it works in whatever process the launcher runs
the job in (the sweeper's own, a joblib worker, a SLURM node sharing the filesystem).
"""

from __future__ import annotations

import logging
from typing import Any

import optuna

from lab.errors import UserError
from lab.extensions.sweeps.study_storage import open_storage

log = logging.getLogger(__name__)


class TrialPruned(optuna.TrialPruned):
    """Stops a pruned trial's run. The train workflow records `run_status` as the run's status; the sweeper
    tells Optuna PRUNED."""

    run_status = "pruned"


def open_trial(
    storage: str | optuna.storages.BaseStorage, study_name: str, trial_number: int, pruner: Any = None
) -> optuna.Trial:
    """The live trial `trial_number` of a stored study, from any process (Optuna's ask/tell across processes)."""
    opened = open_storage(storage) if isinstance(storage, str) else storage  # a URL: also journal:///<path>
    study = optuna.load_study(study_name=study_name, storage=opened, pruner=pruner)
    study_id = opened.get_study_id_from_name(study_name)
    return optuna.Trial(study, opened.get_trial_id_from_study_id_trial_number(study_id, trial_number))


class OptunaPruning:
    """A trainer callback (duck-typed: the sweeper imports this module, which so stays free of torch)."""

    def __init__(
        self, storage: str, study_name: str, trial_number: int, pruner: Any = None, metric: str = "val/acc"
    ) -> None:
        self.trial = open_trial(storage, study_name, trial_number, pruner)
        self.metric = metric

    def on_validation_end(self, trainer: Any, metrics: dict[str, float], epoch: int) -> None:
        if self.metric not in metrics:
            raise UserError(
                f"hydra.sweeper.pruning_metric={self.metric!r} is not a validation metric; "
                f"choose one of {', '.join(metrics)}"
            )
        value = float(metrics[self.metric])
        self.trial.report(value, step=epoch)
        if self.trial.should_prune():
            raise TrialPruned(f"trial {self.trial.number} pruned after epoch {epoch}: {self.metric}={value:.4f}")
