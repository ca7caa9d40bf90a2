"""Optuna pruning inside a training job: report a validation metric to the trial, stop when the pruner says so.

The sweeper (study.py) turns this callback on in each trial's overrides with
`+callbacks.optuna_pruning={storage: ..., study_name: ..., trial_number: ..., ...}`. It opens the study from its
storage, so it works in any process the launcher uses: the sweeper's, a joblib worker, or a SLURM node.
"""

from __future__ import annotations

import logging
from typing import Any

import optuna

from lab.errors import UserError
from lab.extensions.sweeps.study_storage import open_trial
from lab.training.callbacks import Callback

log = logging.getLogger(__name__)


class TrialPruned(optuna.TrialPruned):
    """Stop a pruned trial's run; training records `run_status` and the sweeper tells Optuna PRUNED."""

    run_status = "pruned"


class OptunaPruning(Callback):
    """The trainer callback of the `optuna_pruning` option."""

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
