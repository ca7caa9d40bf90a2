"""The optimizer over its parameter groups (no weight decay on norms and biases; fine-tuning's per-layer learning
rates), and LR scaling for the effective batch."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from lab.config import ConfigError, options
from lab.models.freeze import head_parameters

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from lab.config.distributed import DistConfig
    from lab.config.models import ModelConfig

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.RMSNorm)


def parameter_groups(
    model: nn.Module,
    weight_decay: float,
    lr: float = 0.0,
    scales: Mapping[str, float] | None = None,
    include_frozen: bool = False,
) -> list[dict]:
    """Decayed weights apart from norm parameters and biases (decaying those only hurts); with fine-tuning's
    learning-rate multipliers (`scales`, parameter name -> multiplier: :func:`_lr_scales`), each of those split
    again by learning rate, every group with its own ``lr`` (`lr` times its scale), which the schedules then scale
    as a whole. Frozen parameters are left out unless `include_frozen` (trainer.unfreeze_at_epoch: no gradient, no
    update until they are unfrozen)."""
    scales = scales or {}
    groups: dict[tuple[float, bool], list[nn.Parameter]] = {(1.0, True): [], (1.0, False): []}
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if (not param.requires_grad and not include_frozen) or id(param) in seen:
                continue
            seen.add(id(param))
            decays = not (isinstance(module, _NORM_TYPES) or name.endswith("bias") or param.ndim <= 1)
            scale = scales.get(f"{module_name}.{name}" if module_name else name, 1.0)
            groups.setdefault((scale, decays), []).append(param)
    return [
        {
            "params": params,
            "weight_decay": weight_decay if decays else 0.0,
            **({"lr": lr * scale} if scale != 1 else {}),
        }
        for (scale, decays), params in groups.items()
        if params or scale == 1.0
    ]


def _lr_scales(
    model: nn.Module, option: ModelConfig, head_lr_scale: float, layer_decay: float | None
) -> dict[str, float]:
    """Parameter name -> learning-rate multiplier (absent: 1). Layer-wise decay gives the i-th of the L layer groups
    `option` (the model's option) names (stem first, classifier last: ``ModelConfig.layer_groups``)
    layer_decay ** (L - 1 - i); the head's parameters (``ModelConfig.head``) are then scaled by head_lr_scale."""
    scales: dict[str, float] = {}
    if layer_decay is not None and layer_decay != 1:
        layers = option.layer_groups(model)
        if layers is None:
            raise ConfigError(
                "optimizer.layer_decay needs a model that names its layers in order (timm models: model=timm); "
                "use optimizer.head_lr_scale to give the head its own learning rate"
            )
        for index, names in enumerate(layers):
            for name in names:
                scales[name] = layer_decay ** (len(layers) - 1 - index)
    if head_lr_scale != 1:
        for name in head_parameters(model, option, "optimizer.head_lr_scale"):
            scales[name] = scales.get(name, 1.0) * head_lr_scale
    return scales


def lr_scale(dist_cfg: DistConfig | DictConfig, batch_size: int, world_size: int, grad_accum_steps: int) -> float:
    """LR multiplier for the effective batch (per device x devices x accumulation) against the batch the LR was
    tuned for (dist.base_batch_size, default data.batch_size): linear (Goyal et al.) or square-root scaling."""
    if dist_cfg.lr_scaling == "none":
        return 1.0
    ratio = batch_size * world_size * grad_accum_steps / (dist_cfg.base_batch_size or batch_size)
    return ratio if dist_cfg.lr_scaling == "linear" else math.sqrt(ratio)


def build_optimizer(
    optimizer_cfg: Any,
    model: nn.Module,
    model_cfg: Any,
    device: torch.device | None = None,
    include_frozen: bool = False,
) -> torch.optim.Optimizer:
    """The configured optimizer (the option's ``build``) over `parameter_groups` of `model`, built by the model
    option `model_cfg` (which names its head and layer groups: :func:`_lr_scales`). On CUDA, torch's fused
    implementation when the option has a ``fused`` key left null: one kernel per step, and with a GradScaler it skips
    overflowed steps on the device, where the unfused path reads `found_inf` back to the host every step."""
    option = options.instantiate("optimizer", optimizer_cfg)
    if getattr(option, "fused", False) is None and device is not None and device.type == "cuda":
        option = dataclasses.replace(option, fused=True)
    scales = _lr_scales(model, options.instantiate("model", model_cfg), option.head_lr_scale, option.layer_decay)
    return option.build(parameter_groups(model, option.weight_decay, option.lr, scales, include_frozen))
