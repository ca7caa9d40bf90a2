"""The optimizers and LR schedules the core ships, one option each (their kinds: lab.config.optim)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lab.config.checks import in_range
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.optim import OptimizerConfig, SchedulerConfig

if TYPE_CHECKING:
    import torch

    from lab.optim.schedulers import Schedule


@dataclass
class AdamwConfig(OptimizerConfig):
    """torch.optim.AdamW (decoupled weight decay)."""

    lr: float = 3e-3
    weight_decay: float = 0.05
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    fused: bool | None = None  # null: fused kernel on CUDA (no host sync with a GradScaler), default elsewhere

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            len(self.betas) == 2,
            f"optimizer.betas must be two numbers [beta1, beta2], got {list(self.betas)}",
        )
        for index, beta in enumerate(self.betas):  # at 1 or more the running averages never forget, or blow up
            in_range(f"optimizer.betas[{index}]", beta, 0, 1, open_high=True)
        in_range("optimizer.eps", self.eps, 0, math.inf, open_low=True, open_high=True)

    def build(self, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        import torch

        return torch.optim.AdamW(
            groups, lr=self.lr, betas=(self.betas[0], self.betas[1]), eps=self.eps, fused=self.fused
        )


@dataclass
class SGDConfig(OptimizerConfig):
    """torch.optim.SGD with Nesterov momentum."""

    lr: float = 0.1
    weight_decay: float = 5e-4
    momentum: float = 0.9
    nesterov: bool = True
    fused: bool | None = None  # null: torch's fused kernel on CUDA, default elsewhere

    def __post_init__(self) -> None:
        super().__post_init__()
        in_range("optimizer.momentum", self.momentum, 0, math.inf, open_high=True)
        _require(not self.nesterov or self.momentum > 0, "optimizer.nesterov=true needs optimizer.momentum > 0")

    def build(self, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        import torch

        return torch.optim.SGD(groups, lr=self.lr, momentum=self.momentum, nesterov=self.nesterov, fused=self.fused)


@dataclass
class CosineConfig(SchedulerConfig):
    """Linear warmup, then cosine decay to lr * min_lr_ratio at the last optimizer step."""

    warmup_steps: int = 20
    min_lr_ratio: float = 0.0  # final lr = lr * min_lr_ratio

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0 <= self.min_lr_ratio <= 1, f"scheduler.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")

    def build(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Schedule:
        from lab.optim.schedulers import cosine_decay, warmup_lambda

        return warmup_lambda(
            optimizer, self.warmup_steps, cosine_decay(total_steps - self.warmup_steps, self.min_lr_ratio)
        )


@dataclass
class StepConfig(SchedulerConfig):
    """Linear warmup, then lr *= gamma every step_size optimizer steps."""

    step_size: int = 1000  # optimizer steps between decays
    gamma: float = 0.1  # decay factor

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.step_size >= 1, f"scheduler.step_size must be >= 1, got {self.step_size}")
        _require(0 < self.gamma <= 1, f"scheduler.gamma must be in (0, 1], got {self.gamma}")

    def build(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Schedule:
        from lab.optim.schedulers import step_decay, warmup_lambda

        return warmup_lambda(optimizer, self.warmup_steps, step_decay(self.step_size, self.gamma))


@dataclass
class OnecycleConfig(SchedulerConfig):
    """torch's OneCycleLR, rising for warmup_steps (at least one step)."""

    warmup_steps: int = 50

    def build(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Schedule:
        from lab.optim.schedulers import one_cycle

        return one_cycle(optimizer, self.warmup_steps, total_steps)


@dataclass
class PlateauConfig(SchedulerConfig):
    """Linear warmup per optimizer step, then ReduceLROnPlateau stepped once per validation on `monitor`."""

    monitor: str = "val/${task.monitor}"  # metric it watches; by default the task's
    mode: str = "${task.mode}"  # min | max; by default the task's direction
    factor: float = 0.5  # lr *= factor when the metric stops improving
    patience: int = 2  # validations without improvement before decaying

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("scheduler.mode", self.mode, ("min", "max"))
        _require(0 < self.factor < 1, f"scheduler.factor must be in (0, 1), got {self.factor}")
        _require(self.patience >= 0, f"scheduler.patience must be >= 0, got {self.patience}")

    def build(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Schedule:
        from lab.optim.schedulers import WarmupPlateau

        return WarmupPlateau(optimizer, self.warmup_steps, self.monitor, self.mode, self.factor, self.patience)


@dataclass
class ConstantConfig(SchedulerConfig):
    """Linear warmup, then the optimizer's lr unchanged."""

    def build(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Schedule:
        from lab.optim.schedulers import warmup_lambda

        return warmup_lambda(optimizer, self.warmup_steps, lambda done: 1.0)
