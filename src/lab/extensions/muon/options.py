"""The `optimizer=muon` and `scheduler=wsd` options of the core's `optimizer` and `scheduler` groups.

No torch import here; their methods import the code."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lab.config.checks import in_range
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.optim import MAX_LR, OptimizerConfig, SchedulerConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lab.config.models import ModelConfig
    from lab.optim.schedulers import Schedule


@dataclass
class MuonConfig(OptimizerConfig):
    """Muon on the hidden weight matrices at `lr`, AdamW on everything else at `adamw_lr`.

    AdamW gets the embeddings, head, norms, biases and conv kernels (see lab.extensions.muon.optimizer). Weight
    decay is decoupled in both and applied as the core groups it, so norms and biases get none."""

    lr: float = 0.02  # Muon's update is orthogonalised, so its scale differs from AdamW's
    momentum: float = 0.95
    nesterov: bool = True
    ns_steps: int = 5  # Newton-Schulz iterations orthogonalising each update
    adamw_lr: float = 3e-3
    adamw_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])

    def __post_init__(self) -> None:
        super().__post_init__()
        in_range("optimizer.momentum", self.momentum, 0, 1, open_high=True, hint="typical: 0.9 to 0.95")
        in_range("optimizer.ns_steps", self.ns_steps, 1, 99, hint="typical: 5")  # torch refuses 100 and more
        in_range("optimizer.adamw_lr", self.adamw_lr, 0, MAX_LR, open_low=True, hint="typical: 1e-4 to 1e-2")
        _require(
            self.adamw_lr * self.weight_decay < 1,
            f"optimizer.weight_decay={self.weight_decay:g} with optimizer.adamw_lr={self.adamw_lr:g} shrinks every "
            f"AdamW weight by {self.adamw_lr * self.weight_decay:g} per step (>= 1: to zero or past it)",
        )
        _require(
            len(self.adamw_betas) == 2,
            f"optimizer.adamw_betas must be two numbers [beta1, beta2], got {list(self.adamw_betas)}",
        )
        for index, beta in enumerate(self.adamw_betas):
            in_range(f"optimizer.adamw_betas[{index}]", beta, 0, 1, open_high=True)

    def parameter_groups(
        self, model: nn.Module, model_option: ModelConfig, scales: dict[str, float], include_frozen: bool
    ) -> list[dict[str, Any]]:
        from lab.extensions.muon.optimizer import hidden_matrices, split

        groups = super().parameter_groups(model, model_option, scales, include_frozen)
        return split(groups, hidden_matrices(model, model_option), self.lr, self.adamw_lr)

    def build(self, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        from lab.extensions.muon.optimizer import MuonAdamW

        muon = {"lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov, "ns_steps": self.ns_steps}
        adamw = {"lr": self.adamw_lr, "betas": (self.adamw_betas[0], self.adamw_betas[1])}
        return MuonAdamW(groups, muon, adamw)

    def describe(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> str:
        from lab.extensions.muon.optimizer import describe

        return describe(model, optimizer)

    def conflict(self, run: Any) -> str | None:
        if run.dist.shards_weights:
            return (
                "optimizer=muon does not work with dist=fsdp: Muon orthogonalises each weight matrix whole, and "
                "torch.optim.Muon does not gather FSDP's sharded (DTensor) parameters; use dist=ddp, or "
                "optimizer=adamw under FSDP"
            )
        return None


@dataclass
class WsdConfig(SchedulerConfig):
    """Warmup-stable-decay: linear warmup, hold the peak lr, then decay to lr * min_lr_ratio over the last steps."""

    warmup_steps: int = 20
    min_lr_ratio: float = 0.0  # final lr = lr * min_lr_ratio
    # the decay's length as a fraction of the run's steps, or as steps; set one (default: fraction 0.2)
    decay_fraction: float | None = None
    decay_steps: int | None = None
    decay: str = "linear"  # linear | cosine | sqrt (1 - sqrt(progress): a fast drop, then a long tail)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0 <= self.min_lr_ratio <= 1, f"scheduler.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        _require(
            self.decay_fraction is None or self.decay_steps is None,
            f"scheduler.decay_fraction={self.decay_fraction} and scheduler.decay_steps={self.decay_steps} both set "
            "the decay's length; set one of them",
        )
        if self.decay_fraction is not None:
            in_range("scheduler.decay_fraction", self.decay_fraction, 0, 1, open_low=True, hint="typical: 0.1 to 0.2")
        if self.decay_steps is not None:
            in_range("scheduler.decay_steps", self.decay_steps, 1, math.inf, open_high=True)
        _one_of("scheduler.decay", self.decay, ("linear", "cosine", "sqrt"))

    def build(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Schedule:
        from lab.extensions.muon.schedule import decay_length, wsd_decay
        from lab.optim.schedulers import warmup_lambda

        after_warmup = total_steps - self.warmup_steps
        decay_steps = decay_length(after_warmup, total_steps, self.decay_fraction, self.decay_steps)
        return warmup_lambda(
            optimizer, self.warmup_steps, wsd_decay(after_warmup, decay_steps, self.min_lr_ratio, self.decay)
        )
