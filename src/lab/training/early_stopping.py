"""Stop training when the task's monitor stops improving (`callback=early_stopping`).

An improvement beats the reference value by more than `min_delta`. The reference moves only then, as in Keras and
Lightning, so a slow but steady climb keeps training. The count and the reference live in `Progress`, so a resume
continues the count exactly.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from lab.training.callbacks import Callback

log = logging.getLogger(__name__)


class EarlyStopping(Callback):
    def __init__(self, patience: int, min_delta: float, task: Any) -> None:
        self.patience, self.min_delta, self.sign = patience, min_delta, 1 if task.mode == "max" else -1
        self.monitor = f"val/{task.monitor}"
        self.stopped_epoch: int | None = None

    def record(self, progress: Any, value: float) -> None:
        """Reset the count after a validation that improves, else add one. NaN never improves."""
        reference = progress.early_stopping_reference
        if not math.isnan(value) and (reference is None or self.sign * (value - reference) > self.min_delta):
            progress.early_stopping_reference, progress.stale_validations = value, 0
        else:
            progress.stale_validations += 1

    def on_validation_end(self, trainer: Any, metrics: dict[str, float], epoch: int) -> None:
        progress = trainer.progress
        self.record(progress, metrics[self.monitor])
        if progress.stale_validations < self.patience:
            return
        self.stopped_epoch, trainer.should_stop = epoch, True
        log.info(
            "early stopping at epoch %d: %s did not improve by more than %g for %d validations; best %s at epoch %s",
            epoch,
            self.monitor,
            self.min_delta,
            progress.stale_validations,
            "none" if progress.best_metric is None else f"{progress.best_metric:.4f}",
            progress.best_epoch,
        )

    def on_fit_end(self, trainer: Any, summary: dict[str, Any]) -> None:
        summary.update(stopped_early=self.stopped_epoch is not None, stopped_epoch=self.stopped_epoch)
