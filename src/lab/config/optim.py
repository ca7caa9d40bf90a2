"""Schemas of the `optimizer` and `scheduler` groups: one dataclass per option, holding that option's defaults
(conf/<group>/<option>.yaml only extends it), so a key of another option (`scheduler=step
scheduler.min_lr_ratio=0.1`) is refused while composing."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from omegaconf import MISSING

from lab.config.checks import in_range, own_choice
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require

# --------------------------------------------------------------------------- optimizer
# A bound no real run comes near (SGD on large batches uses up to ~10): above it, lr is a typo (1e308, 1e3 for 1e-3)
MAX_LR = 100.0


@dataclass
class OptimizerConfig:
    _target_: str = MISSING
    _partial_: bool = True  # lab.optim calls it with the parameter groups
    lr: float = 1e-3
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        # inf, nan or 1e308 would pass a plain `> 0` and turn the weights into NaN at the first step; no optimizer
        # here trains with a learning rate above MAX_LR
        in_range("optimizer.lr", self.lr, 0, MAX_LR, open_low=True, hint="typical: 1e-5 to 1")
        in_range("optimizer.weight_decay", self.weight_decay, 0, math.inf, open_high=True)
        # both optimizers shrink every weight by lr * weight_decay per step (AdamW's decoupled decay, SGD's L2
        # gradient): at 1 or more that sets each weight to zero or flips its sign, every step
        _require(
            self.lr * self.weight_decay < 1,
            f"optimizer.weight_decay={self.weight_decay:g} with optimizer.lr={self.lr:g} shrinks every weight by "
            f"lr * weight_decay = {self.lr * self.weight_decay:g} per step (>= 1: to zero or past it); "
            "typical weight_decay: 0 to 0.1",
        )


@dataclass
class AdamWConfig(OptimizerConfig):
    _target_: str = "torch.optim.AdamW"
    lr: float = 3e-3
    weight_decay: float = 0.05
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    fused: bool | None = None  # null: torch's fused kernel on CUDA (no host sync with a GradScaler), default elsewhere

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            len(self.betas) == 2,
            f"optimizer.betas must be two numbers [beta1, beta2], got {list(self.betas)}",
        )
        for index, beta in enumerate(self.betas):  # 1 or more: the running averages never forget (or blow up)
            in_range(f"optimizer.betas[{index}]", beta, 0, 1, open_high=True)
        in_range("optimizer.eps", self.eps, 0, math.inf, open_low=True, open_high=True)


@dataclass
class SGDConfig(OptimizerConfig):
    _target_: str = "torch.optim.SGD"
    lr: float = 0.1
    weight_decay: float = 5e-4
    momentum: float = 0.9
    nesterov: bool = True
    fused: bool | None = None  # null: torch's fused kernel on CUDA, default elsewhere

    def __post_init__(self) -> None:
        super().__post_init__()
        in_range("optimizer.momentum", self.momentum, 0, math.inf, open_high=True)
        _require(not self.nesterov or self.momentum > 0, "optimizer.nesterov=true needs optimizer.momentum > 0")


# --------------------------------------------------------------------------- scheduler
@dataclass
class SchedulerConfig:
    """Keys every schedule has. `name` says which schedule lab.optim builds: it is fixed by the option's schema
    (choose a schedule with `scheduler=<name>`, which also brings that schedule's own keys)."""

    name: str = MISSING
    warmup_steps: int = 0  # linear warmup, in optimizer steps

    def __post_init__(self) -> None:
        own_choice(self, "scheduler", "name", "schedule")
        _require(self.warmup_steps >= 0, f"scheduler.warmup_steps must be >= 0, got {self.warmup_steps}")


@dataclass
class CosineSchedulerConfig(SchedulerConfig):
    """Linear warmup, then cosine decay to lr * min_lr_ratio at the last optimizer step."""

    name: str = "cosine"
    warmup_steps: int = 20
    min_lr_ratio: float = 0.0  # final lr = lr * min_lr_ratio

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0 <= self.min_lr_ratio <= 1, f"scheduler.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")


@dataclass
class StepSchedulerConfig(SchedulerConfig):
    """Linear warmup, then lr *= gamma every step_size optimizer steps."""

    name: str = "step"
    step_size: int = 1000  # optimizer steps between decays
    gamma: float = 0.1  # decay factor

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.step_size >= 1, f"scheduler.step_size must be >= 1, got {self.step_size}")
        _require(0 < self.gamma <= 1, f"scheduler.gamma must be in (0, 1], got {self.gamma}")


@dataclass
class OneCycleSchedulerConfig(SchedulerConfig):
    """torch's OneCycleLR; its rising phase lasts warmup_steps (at least one step)."""

    name: str = "onecycle"
    warmup_steps: int = 50


@dataclass
class PlateauSchedulerConfig(SchedulerConfig):
    """Linear warmup per optimizer step, then ReduceLROnPlateau stepped once per validation on `monitor`."""

    name: str = "plateau"
    monitor: str = "val/${task.monitor}"  # the metric it watches (default: the task's monitored metric)
    mode: str = "${task.mode}"  # min | max (default: the task's direction)
    factor: float = 0.5  # lr *= factor when the metric stops improving
    patience: int = 2  # validations without improvement before decaying

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("scheduler.mode", self.mode, ("min", "max"))
        _require(0 < self.factor < 1, f"scheduler.factor must be in (0, 1), got {self.factor}")
        _require(self.patience >= 0, f"scheduler.patience must be >= 0, got {self.patience}")


@dataclass
class ConstantSchedulerConfig(SchedulerConfig):
    """Linear warmup, then the optimizer's lr unchanged."""

    name: str = "constant"
