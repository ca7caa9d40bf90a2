"""What every model shares: `build` (the option's `build` plus `model.freeze`) and the input checks."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from torch import nn

from lab.config import options
from lab.errors import ConfigError
from lab.models.freeze import freeze

log = logging.getLogger(__name__)


def image_channels(meta: Mapping[str, Any], model: str) -> int:
    """Return the channels of (C, H, W) image inputs, or raise ConfigError when the samples are not images."""
    shape = list(meta["input_shape"])
    if len(shape) != 3:
        raise ConfigError(
            f"model={model} takes images (C, H, W) but the dataset's samples have shape {shape}; "
            "use model=mlp (tables) or a model for this kind of input"
        )
    return int(shape[0])


def build(cfg: Any, meta: Mapping[str, Any]) -> nn.Module:
    """Build option `cfg`'s model (a composed node, a checkpoint's saved dict or the option object) for the data `meta`
    describes, loading `cfg.init_from` and applying `cfg.freeze`."""
    option = options.instantiate("model", cfg)
    model = option.build(meta)
    if option.init_from is not None:
        from lab.models.pretrained import load_matching, read_weights  # only a model that starts from a file

        what = f"model.init_from={option.init_from}"
        load_matching(model, read_weights(option.init_from, what), what)
    freeze(model, option)
    return model


def prepare(model_cfg: Any, data_cfg: Any) -> Any:
    """Check the files the model starts from and return the data config with the weights' preprocessing taken.

    Runs before a run writes anything. The run's own config stays as composed, since resume=auto compares it with
    the checkpoint's. The data's `meta` records what was taken, for eval/export/infer."""
    option = options.instantiate("model", model_cfg)
    option.locate_weights()
    if option.init_from is not None:
        from lab.models.pretrained import check_shards

        check_shards(option.init_from, f"model.init_from={option.init_from}")
    return adopt_preprocessing(data_cfg, option.preprocessing())


def adopt_preprocessing(data_cfg: Any, preprocessing: Mapping[str, Any] | None) -> Any:
    """Return a copy of `data_cfg` whose null input size, crop, interpolation and mean/std come from the weights."""
    taken = {}
    for key, value in (preprocessing or {}).items():
        if key in data_cfg and data_cfg[key] is None:
            if key in ("mean", "std") and len(value) != data_cfg.get("in_channels", len(value)):
                # Grey images through RGB weights: the first convolution sums the colour filters, so a grey
                # pixel's statistics are its colours' averaged.
                value = [sum(value) / len(value)] * int(data_cfg.in_channels)
            taken[key] = value
    if not taken:
        return data_cfg
    log.info("data: %s from the pretrained model (set data.<key> to choose otherwise)", taken)
    adopted = copy.deepcopy(data_cfg)
    for key, value in taken.items():
        adopted[key] = value
    return adopted
