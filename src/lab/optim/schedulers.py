"""LR schedules with linear warmup, behind one interface (`Schedule`) so the trainer need not know which one it has.

The trainer calls `step()` after each optimizer step and `step_validation(metrics)` after each validation (only
ReduceLROnPlateau acts on it), and saves its state dict in checkpoints."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Literal, Protocol, cast

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, OneCycleLR, ReduceLROnPlateau

from lab.config import options
from lab.errors import UserError

log = logging.getLogger(__name__)


class Schedule(Protocol):
    def step(self) -> None: ...

    def step_validation(self, metrics: dict[str, float]) -> None: ...

    def get_last_lr(self) -> list[float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def cosine_decay(steps: int, min_lr_ratio: float) -> Callable[[int], float]:
    """Decay from 1 to min_lr_ratio over `steps`, the steps after warmup; the last step lands on min_lr_ratio."""

    def decay(done: int) -> float:
        progress = min(1.0, done / max(1, steps - 1))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return decay


def step_decay(step_size: int, gamma: float) -> Callable[[int], float]:
    return lambda done: gamma ** (done // step_size)


class PerStep:
    """A torch LR scheduler stepped once per optimizer step and never by validation.

    Its state dict is the wrapped scheduler's own, so checkpoints hold exactly what torch saves."""

    def __init__(self, scheduler: LRScheduler) -> None:
        self.scheduler = scheduler
        self.step = scheduler.step  # bound once: called every optimizer step

    def step_validation(self, metrics: dict[str, float]) -> None:
        pass  # the schedule depends on the step count only

    def get_last_lr(self) -> list[float]:
        # torch allows a Tensor lr (capturable), but build_optimizer gives floats
        return cast(list[float], self.scheduler.get_last_lr())

    def state_dict(self) -> dict:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state)


class WarmupPlateau:
    """ReduceLROnPlateau (stepped per validation) after a per-step linear warmup."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, warmup_steps: int, monitor: str, mode: str, factor: float, patience: int
    ) -> None:
        self.optimizer, self.warmup_steps, self.steps = optimizer, warmup_steps, 0
        self.monitor = monitor  # the validation metric it watches, e.g. val/loss
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        # mode comes from the config; ReduceLROnPlateau refuses anything but "min" or "max"
        self.plateau = ReduceLROnPlateau(
            optimizer, mode=cast(Literal["min", "max"], mode), factor=factor, patience=patience
        )
        self._apply_warmup()

    def _apply_warmup(self) -> None:
        if self.steps < self.warmup_steps:
            for group, base in zip(self.optimizer.param_groups, self.base_lrs):
                group["lr"] = base * (self.steps + 1) / self.warmup_steps
        elif self.steps == self.warmup_steps:
            for group, base in zip(self.optimizer.param_groups, self.base_lrs):
                group["lr"] = base

    def step(self) -> None:
        self.steps += 1
        self._apply_warmup()

    def step_metric(self, value: float) -> None:
        if self.steps >= self.warmup_steps:
            self.plateau.step(value)

    def step_validation(self, metrics: dict[str, float]) -> None:
        """Step on the validation metric named by `monitor`; raise UserError if it is missing."""
        if self.monitor not in metrics:
            raise UserError(
                f"scheduler.monitor={self.monitor!r} is not a validation metric; choose one of {', '.join(metrics)}"
            )
        self.step_metric(metrics[self.monitor])

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {"steps": self.steps, "base_lrs": self.base_lrs, "plateau": self.plateau.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.base_lrs = state["steps"], state["base_lrs"]
        self.plateau.load_state_dict(state["plateau"])


def warmup_lambda(optimizer: torch.optim.Optimizer, warmup_steps: int, decay: Callable[[int], float]) -> PerStep:
    """Build a per-step schedule: linear warmup over `warmup_steps`, then `decay` (cosine, step or constant).

    Plain functions on purpose: LambdaLR then checkpoints only its step counter, so a resumed run follows the
    schedule of its *current* config (e.g. more epochs) from the step where it stopped."""

    def multiplier(step: int) -> float:
        return (step + 1) / warmup_steps if step < warmup_steps else decay(step - warmup_steps)

    return PerStep(LambdaLR(optimizer, multiplier))


def one_cycle(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> PerStep:
    """Build torch's OneCycleLR, peaking at each group's lr after `warmup_steps` (at least one)."""
    max_lrs = [group["lr"] for group in optimizer.param_groups]
    pct_start = min(0.99, max(1, warmup_steps) / max(total_steps, 1))
    return PerStep(OneCycleLR(optimizer, max_lr=max_lrs, total_steps=max(total_steps, 2), pct_start=pct_start))


def planned_steps(trainer_cfg: Any, batches_per_epoch: int) -> int:
    """Return the optimizer steps a schedule spans: trainer.max_epochs' worth, or trainer.max_steps if fewer."""
    steps_per_epoch = math.ceil(batches_per_epoch / trainer_cfg.grad_accum_steps)
    log.info("%d optimizer steps per epoch", steps_per_epoch)
    total = trainer_cfg.max_epochs * steps_per_epoch
    return min(total, trainer_cfg.max_steps) if trainer_cfg.max_steps > 0 else total


def build_scheduler(scheduler_cfg: Any, optimizer: torch.optim.Optimizer, total_steps: int) -> Schedule:
    """Build the configured schedule over `total_steps` optimizer steps."""
    return options.instantiate("scheduler", scheduler_cfg).build(optimizer, total_steps)
