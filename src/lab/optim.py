"""Optimizer with no weight decay on norms and biases, and LR schedules with linear warmup."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import hydra.utils
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, OneCycleLR, ReduceLROnPlateau

from lab.errors import UserError

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.RMSNorm)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and norm parameters + biases (decaying those only hurts)."""
    decay, no_decay, seen = [], [], set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            skip = isinstance(module, _NORM_TYPES) or name.endswith("bias") or param.ndim <= 1
            (no_decay if skip else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def lr_scale(dist_cfg, batch_size: int, world_size: int, grad_accum_steps: int) -> float:
    """LR multiplier for the effective batch (per device x devices x accumulation) against the batch the LR was
    tuned for (dist.base_batch_size, default data.batch_size): linear (Goyal et al.) or square-root scaling."""
    if dist_cfg.lr_scaling == "none":
        return 1.0
    ratio = batch_size * world_size * grad_accum_steps / (dist_cfg.base_batch_size or batch_size)
    return ratio if dist_cfg.lr_scaling == "linear" else math.sqrt(ratio)


def build_optimizer(optimizer_cfg, model: nn.Module, device: torch.device | None = None) -> torch.optim.Optimizer:
    """The configured optimizer over `parameter_groups`. On CUDA, torch's fused implementation when the optimizer
    has one and the config does not choose: one kernel per step, and with a GradScaler it skips overflowed steps
    on the device, where the unfused path reads `found_inf` back to the host every step."""
    factory = hydra.utils.instantiate(optimizer_cfg, _convert_="all")  # a functools.partial (_partial_: true)
    choosable = "fused" in inspect.signature(factory.func).parameters and factory.keywords.get("fused") is None
    extra = {"fused": True} if choosable and device is not None and device.type == "cuda" else {}
    return factory(parameter_groups(model, optimizer_cfg.weight_decay), **extra)


def warmup_multiplier(
    name: str, total_steps: int, warmup_steps: int, min_lr_ratio: float = 0.0, step_size: int = 1, gamma: float = 1.0
) -> Callable[[int], float]:
    """LR multiplier per optimizer step: linear warmup, then the chosen decay shape.

    A plain function on purpose: LambdaLR checkpoints only its step counter then, so a resumed run follows the
    schedule of its *current* config (e.g. more epochs) from the step where it stopped.
    """

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        done = step - warmup_steps
        if name == "cosine":
            # T_max = the steps after warmup, so the last optimizer step lands on min_lr_ratio.
            progress = min(1.0, done / max(1, total_steps - warmup_steps - 1))
            return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        if name == "step":
            return gamma ** (done // step_size)
        return 1.0  # constant

    return multiplier


class WarmupPlateau:
    """ReduceLROnPlateau (stepped per validation) after a per-step linear warmup."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, warmup_steps: int, monitor: str, mode: str, factor: float, patience: int
    ) -> None:
        self.optimizer, self.warmup_steps, self.steps = optimizer, warmup_steps, 0
        self.monitor = monitor  # the validation metric it watches, e.g. val/loss
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.plateau = ReduceLROnPlateau(optimizer, mode=mode, factor=factor, patience=patience)
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
        """Step on this epoch's validation metrics, by the one named in `monitor`."""
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


def build_scheduler(scheduler_cfg, optimizer: torch.optim.Optimizer, total_steps: int):
    """A scheduler stepped once per optimizer step (`plateau` also takes `step_metric` per validation)."""
    cfg = scheduler_cfg
    if cfg.name == "plateau":
        return WarmupPlateau(optimizer, cfg.warmup_steps, cfg.monitor, cfg.mode, cfg.factor, cfg.patience)
    if cfg.name == "onecycle":
        max_lrs = [group["lr"] for group in optimizer.param_groups]
        pct_start = min(0.99, max(1, cfg.warmup_steps) / max(total_steps, 1))
        return OneCycleLR(optimizer, max_lr=max_lrs, total_steps=max(total_steps, 2), pct_start=pct_start)
    return LambdaLR(
        optimizer,
        warmup_multiplier(cfg.name, total_steps, cfg.warmup_steps, cfg.min_lr_ratio, cfg.step_size, cfg.gamma),
    )
