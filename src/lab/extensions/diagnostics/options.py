"""The diagnostics callbacks as `callback` options: `callback=<name>` turns one on, with keys `callbacks.<name>.*`.

No torch import here; each ``build`` imports its callback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.config.callbacks import CallbackConfig
from lab.config.checks import require as _require


@dataclass
class ProfileConfig(CallbackConfig):
    """Profile a few training steps with torch.profiler (`callback=profile`; `debug=profile` adds a short run).

    It skips `wait` steps, warms up for `warmup` and records `active`. The op table, a Chrome trace and the
    bottleneck go to the run dir (profiling.py). Rank 0 profiles."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    row_limit: int = 15  # operators in the printed tables

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.wait >= 0, f"callbacks.profile.wait must be >= 0, got {self.wait}")
        _require(self.warmup >= 0, f"callbacks.profile.warmup must be >= 0, got {self.warmup}")
        _require(self.active >= 1, f"callbacks.profile.active must be >= 1, got {self.active}")
        _require(self.row_limit >= 1, f"callbacks.profile.row_limit must be >= 1, got {self.row_limit}")

    def build(self, trainer: Any) -> object | None:
        if not trainer.parallel.is_main:
            return None
        from lab.extensions.diagnostics.profiling import StepProfiler

        return StepProfiler(self, trainer.checkpoints.dir.parent, trainer.tracker, trainer.device)


@dataclass
class AnomalyConfig(CallbackConfig):
    """Stop the run at the first NaN/inf and name it in one line (`callback=anomaly`, part of `debug=anomaly`).

    It checks every module's output, the batch and the loss, with autograd's anomaly mode on (anomaly.py). Slow: a
    host sync per module."""

    def build(self, trainer: Any) -> object:
        from lab.extensions.diagnostics.anomaly import NonFiniteDetector

        return NonFiniteDetector()


@dataclass
class StatsConfig(CallbackConfig):
    """Log per-layer statistics every `every_n_steps` optimizer steps (`callback=stats`, stats.py).

    It logs gradient and weight norms and activation mean/std as stats/* metrics and wandb histograms, and warns
    about layers whose gradients stay exactly zero. Rank 0 collects them, since DDP's gradients match on every rank."""

    every_n_steps: int = 50  # default: as often as trainer.log_every_n_steps

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.every_n_steps >= 1, f"callbacks.stats.every_n_steps must be >= 1, got {self.every_n_steps}")

    def conflict(self, run: Any) -> str | None:
        if getattr(run.dist, "shards_weights", False):
            return (
                "callback=stats does not work with dist=fsdp (each rank holds only a shard of the weights and "
                "gradients); collect the statistics with dist=ddp or dist=none"
            )
        return None

    def build(self, trainer: Any) -> object | None:
        if not trainer.parallel.is_main:
            return None
        from lab.extensions.diagnostics.stats import TrainingStats

        return TrainingStats(trainer.model, self.every_n_steps)
