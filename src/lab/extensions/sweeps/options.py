"""The extension's option: the `optuna_pruning` callback, which the Optuna sweeper turns on in each trial's job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config.callbacks import CallbackConfig


@dataclass
class OptunaPruningConfig(CallbackConfig):
    """Report `metric` to the Optuna trial after each validation, and stop the run when its pruner says so.

    The Optuna sweeper turns it on for each trial from `hydra.sweeper.pruner` and `hydra.sweeper.pruning_metric`."""

    storage: str = MISSING  # the study's storage URL (sqlite:///...)
    study_name: str = MISSING
    trial_number: int = MISSING
    metric: str = "val/acc"
    pruner: Any = None  # an optuna pruner spec ({_target_: optuna.pruners.MedianPruner, ...})

    def build(self, trainer: Any) -> object:
        import hydra.utils

        from lab.extensions.sweeps.pruning import OptunaPruning

        pruner = hydra.utils.instantiate(self.pruner) if self.pruner else None
        return OptunaPruning(self.storage, self.study_name, self.trial_number, pruner, self.metric)
