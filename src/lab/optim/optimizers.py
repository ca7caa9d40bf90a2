"""Build optimizers over parameter groups (no decay on norms and biases, per-layer LRs) and scale LR to the batch."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from lab.config import options
from lab.errors import ConfigError
from lab.models.freeze import head_parameters

if TYPE_CHECKING:
    from lab.config.models import ModelConfig

log = logging.getLogger(__name__)

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.RMSNorm)


def parameter_groups(
    model: nn.Module,
    weight_decay: float,
    lr: float = 0.0,
    scales: Mapping[str, float] | None = None,
    include_frozen: bool = False,
) -> list[dict]:
    """Split `model`'s parameters into groups by weight decay and learning rate.

    Norm parameters and biases get no weight decay, since decaying them only hurts. `scales` maps parameter names
    to LR multipliers (`_lr_scales`); each scaled group gets its own `lr` (`lr` times its scale), which schedules
    then scale as a whole. Frozen parameters are left out unless `include_frozen` (trainer.unfreeze_at_epoch)."""
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
    """Map parameter names to learning-rate multipliers; a name left out gets 1.

    Layer-wise decay gives the i-th of the L layer groups of `option.layer_groups` (stem first, classifier last)
    layer_decay ** (L - 1 - i). The head's parameters (`option.head`) are then scaled by head_lr_scale."""
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


def scaled_lr(cfg: Any, world_size: int) -> tuple[DictConfig, dict[str, float]]:
    """Return the optimizer config with optimizer.lr scaled to the effective batch, and figures for the summary.

    The effective batch (per device x devices x accumulation) is compared with the batch the LR was tuned for
    (dist.base_batch_size, default data.batch_size). dist.lr_scaling is linear (Goyal et al.), sqrt or none."""
    batch_size, accumulation, dist_cfg = cfg.data.batch_size, cfg.trainer.grad_accum_steps, cfg.dist
    effective = batch_size * world_size * accumulation
    ratio = effective / (dist_cfg.base_batch_size or batch_size)
    scale = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[dist_cfg.lr_scaling]
    lr = cfg.optimizer.lr * scale
    log.info(
        "effective batch %d (%d per device x %d devices x %d accumulation); lr %.4g (%s scaling x%.3g)",
        effective,
        batch_size,
        world_size,
        accumulation,
        lr,
        dist_cfg.lr_scaling,
        scale,
    )
    optimizer_cfg = cast(DictConfig, OmegaConf.merge(cfg.optimizer, {"lr": lr}))
    return optimizer_cfg, {"effective_batch_size": effective, "lr_scaled": lr}


def build_optimizer(
    optimizer_cfg: Any,
    model: nn.Module,
    model_cfg: Any,
    device: torch.device | None = None,
    include_frozen: bool = False,
) -> torch.optim.Optimizer:
    """Build the configured optimizer over `model`'s parameter groups.

    `model_cfg` names the head and layer groups. On CUDA a null `fused` key turns on torch's fused kernel: one per
    step, and with a GradScaler it skips overflowed steps without reading `found_inf` back to the host each step."""
    option = options.instantiate("optimizer", optimizer_cfg)
    if getattr(option, "fused", False) is None and device is not None and device.type == "cuda":
        option = dataclasses.replace(option, fused=True)
    model_option = options.instantiate("model", model_cfg)
    scales = _lr_scales(model, model_option, option.head_lr_scale, option.layer_decay)
    return option.build(option.parameter_groups(model, model_option, scales, include_frozen))
