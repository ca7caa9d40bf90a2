"""What every model shares: :func:`build` (the option's ``build`` plus ``model.freeze``) and the input checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from lab.config import options
from lab.errors import ConfigError
from lab.models.freeze import freeze


def image_channels(meta: Mapping[str, Any], model: str) -> int:
    """Channels of (C, H, W) image inputs; a clear error when the dataset's samples are not images."""
    shape = list(meta["input_shape"])
    if len(shape) != 3:
        raise ConfigError(
            f"model={model} takes images (C, H, W) but the dataset's samples have shape {shape}; "
            "use model=mlp (tables) or a model for this kind of input"
        )
    return int(shape[0])


def build(cfg: Any, meta: Mapping[str, Any]) -> nn.Module:
    """The model of the ``model`` option ``cfg`` (a composed node, a checkpoint's saved dict or the option object)
    for the data described by ``meta``, with ``cfg.freeze``'s parameters frozen."""
    option = options.instantiate("model", cfg)
    model = option.build(meta)
    freeze(model, list(option.freeze))
    return model
