"""The model table behind :func:`lab.models.build`: a fork adds a model as a new module in ``lab/models/`` whose
builder is decorated with ``@register("name")`` (found without editing any ``__init__``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from lab.errors import ConfigError
from lab.models.freeze import freeze
from lab.registry import Registry

# A builder receives the model config (read by attribute) and the dataset's meta (input_shape, num_outputs, ...).
Builder = Callable[[Any, Mapping[str, Any]], nn.Module]

MODELS = Registry("model", "lab.models")
register = MODELS.register
available = MODELS.available


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
    """Build the model named ``cfg.name`` for the data described by ``meta``, with ``cfg.freeze``'s parameters
    frozen (every model has the key: it is in the base ModelConfig)."""
    model = MODELS.build(cfg, meta)
    freeze(model, list(getattr(cfg, "freeze", None) or []))
    return model
