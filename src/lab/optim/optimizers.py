"""The optimizer over two parameter groups (no weight decay on norms and biases), and LR scaling for the
effective batch."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from lab.config import options

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


def build_optimizer(optimizer_cfg: Any, model: nn.Module, device: torch.device | None = None) -> torch.optim.Optimizer:
    """The configured optimizer (the option's ``build``) over `parameter_groups`. On CUDA, torch's fused
    implementation when the option has a ``fused`` key left null: one kernel per step, and with a GradScaler it skips
    overflowed steps on the device, where the unfused path reads `found_inf` back to the host every step."""
    option = options.instantiate("optimizer", optimizer_cfg)
    if getattr(option, "fused", False) is None and device is not None and device.type == "cuda":
        option = dataclasses.replace(option, fused=True)
    return option.build(parameter_groups(model, option.weight_decay))
