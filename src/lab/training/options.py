"""The trainer callbacks the core ships, one option each (the kind: lab.config.callbacks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.config.callbacks import CallbackConfig
from lab.config.checks import require


@dataclass
class EMAConfig(CallbackConfig):
    """callback=ema: an exponential moving average of the weights (lab.training.ema).

    Validation, best.pt and the test score use the averaged weights. last.pt keeps both, so a resume is exact."""

    decay: float = 0.999  # per update: ema = decay * ema + (1 - decay) * weights
    every_n_steps: int = 1  # update after every n-th optimizer step (cheaper for large models)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.decay < 1, f"callbacks.ema.decay must be in (0, 1), got {self.decay}")
        require(self.every_n_steps >= 1, f"callbacks.ema.every_n_steps must be >= 1, got {self.every_n_steps}")

    def build(self, trainer: Any) -> Any:
        from lab.training.ema import EMA

        return EMA(trainer.model, self.decay, self.every_n_steps)

    def conflict(self, run: Any) -> str | None:
        if getattr(run.dist, "shards_weights", False):
            return (
                "callback=ema does not work with dist=fsdp (each rank holds only a shard of the weights); "
                "use dist=ddp with EMA, or drop callback=ema under FSDP"
            )
        return None


@dataclass
class EarlyStoppingConfig(CallbackConfig):
    """callback=early_stopping: stop when the monitor has not improved by more than `min_delta` in `patience` checks.

    The test split is still scored and the run still counts as completed (lab.training.early_stopping)."""

    patience: int = 5  # validations without improvement before stopping
    min_delta: float = 0.0  # smallest change of the monitor that counts as an improvement

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.patience >= 1, f"callbacks.early_stopping.patience must be >= 1, got {self.patience}")
        require(self.min_delta >= 0, f"callbacks.early_stopping.min_delta must be >= 0, got {self.min_delta}")

    def build(self, trainer: Any) -> Any:
        from lab.training.early_stopping import EarlyStopping

        return EarlyStopping(self.patience, self.min_delta, trainer.task)
