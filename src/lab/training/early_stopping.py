"""Early stopping on the task's monitor (trainer.early_stopping.patience / min_delta).

An improvement is a validation that beats the reference value by more than ``min_delta`` in the task's direction;
the reference moves only then (as in Keras and Lightning), so a slow but steady climb keeps training. Its state
(the count of validations without improvement and the reference) lives in ``Progress``, so it is checkpointed and
a resume continues the count exactly.
"""

from __future__ import annotations

import logging
import math
from typing import Any

log = logging.getLogger(__name__)


class EarlyStopping:
    def __init__(self, patience: int, min_delta: float, mode: str) -> None:
        self.patience, self.min_delta, self.sign = patience, min_delta, 1 if mode == "max" else -1
        self.stopped_epoch: int | None = None

    def record(self, progress: Any, value: float) -> None:
        """After a validation: reset the count on an improvement, count one more otherwise (NaN never improves)."""
        reference = progress.early_stopping_reference
        if not math.isnan(value) and (reference is None or self.sign * (value - reference) > self.min_delta):
            progress.early_stopping_reference, progress.stale_validations = value, 0
        else:
            progress.stale_validations += 1

    def exhausted(self, progress: Any) -> bool:
        return progress.stale_validations >= self.patience

    def stop(self, progress: Any, monitor: str, epoch: int) -> bool:
        """True (and one log line) when `patience` validations in a row brought no improvement."""
        if not self.exhausted(progress):
            return False
        self.stopped_epoch = epoch
        log.info(
            "early stopping at epoch %d: %s did not improve by more than %g for %d validations; best %s at epoch %s",
            epoch,
            monitor,
            self.min_delta,
            progress.stale_validations,
            "none" if progress.best_metric is None else f"{progress.best_metric:.4f}",
            progress.best_epoch,
        )
        return True

    def summary(self) -> dict[str, Any]:
        return {"stopped_early": self.stopped_epoch is not None, "stopped_epoch": self.stopped_epoch}
