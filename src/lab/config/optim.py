"""The `optimizer` and `scheduler` kinds: the keys every optimizer and schedule has. Each is an option (the core's:
lab/optim/options.py) whose `build` makes the torch optimizer or the `lab.optim.schedulers.Schedule`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from lab.config.checks import at_least, in_range
from lab.config.checks import require as _require
from lab.config.options import Option

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lab.config.models import ModelConfig

# No real run comes near this (SGD on large batches uses up to ~10), so above it lr is a typo (1e3 for 1e-3)
MAX_LR = 100.0


@dataclass
class OptimizerConfig(Option, group="optimizer"):
    """Keys every optimizer has, read by LR scaling (dist.lr_scaling) and the parameter groups."""

    name: str = MISSING
    lr: float = 1e-3
    weight_decay: float = 0.0
    # Fine-tuning: the classifier's LR is lr * head_lr_scale (e.g. 10, so a new head learns fast on a pretrained
    # backbone). layer_decay gives the i-th of L layer groups (ModelConfig.layer_groups) lr * layer_decay ** (L-1-i).
    head_lr_scale: float = 1.0
    layer_decay: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        in_range("optimizer.head_lr_scale", self.head_lr_scale, 0, 1e4, open_low=True, hint="typical: 1 to 100")
        if self.layer_decay is not None:
            in_range("optimizer.layer_decay", self.layer_decay, 0, 1, open_low=True, hint="typical: 0.65 to 0.9")
        # inf, nan or 1e308 would pass a plain `> 0` and turn the weights into NaN at the first step.
        in_range("optimizer.lr", self.lr, 0, MAX_LR, open_low=True, hint="typical: 1e-5 to 1")
        in_range("optimizer.weight_decay", self.weight_decay, 0, math.inf, open_high=True)
        # Both optimizers shrink every weight by lr * weight_decay per step. At 1 or more that zeroes each weight
        # or flips its sign, every step.
        _require(
            self.lr * self.weight_decay < 1,
            f"optimizer.weight_decay={self.weight_decay:g} with optimizer.lr={self.lr:g} shrinks every weight by "
            f"lr * weight_decay = {self.lr * self.weight_decay:g} per step (>= 1: to zero or past it); "
            "typical weight_decay: 0 to 0.1",
        )

    def parameter_groups(
        self, model: nn.Module, model_option: ModelConfig, scales: dict[str, float], include_frozen: bool
    ) -> list[dict[str, Any]]:
        """Return the parameter groups `build` gets: `optim.optimizers.parameter_groups`, with LR multipliers `scales`
        (an optimizer that updates some parameters its own way splits them further; `model_option` names the head)."""
        from lab.optim.optimizers import parameter_groups

        return parameter_groups(model, self.weight_decay, self.lr, scales, include_frozen)

    def build(self, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        """Return the torch optimizer over `groups`, each with its own weight_decay."""
        raise NotImplementedError(f"{type(self).__name__} has no build(groups)")

    def describe(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> str | None:
        """Return a start-of-run line saying which parameters get what, or None if the LR line says it all."""
        return None


@dataclass
class SchedulerConfig(Option, group="scheduler"):
    """Keys every schedule has; `build` returns a `schedulers.Schedule`, such as `schedulers.warmup_lambda`'s."""

    name: str = MISSING
    warmup_steps: int = 0  # linear warmup, in optimizer steps

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("scheduler.warmup_steps", self.warmup_steps, 0)

    def build(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
        """Return the schedule of `optimizer`'s LR over `total_steps` optimizer steps."""
        raise NotImplementedError(f"{type(self).__name__} has no build(optimizer, total_steps)")
