"""What every model shares: :func:`build` (the option's ``build`` plus ``model.freeze``) and the input checks."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from torch import nn

from lab.config import options
from lab.errors import ConfigError
from lab.models.freeze import freeze
from lab.models.pretrained import check_shards, load_matching, read_weights

log = logging.getLogger(__name__)


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
    for the data described by ``meta``, started from ``cfg.init_from``'s weights where they fit, with
    ``cfg.freeze``'s parameters frozen."""
    option = options.instantiate("model", cfg)
    model = option.build(meta)
    if option.init_from is not None:
        what = f"model.init_from={option.init_from}"
        load_matching(model, read_weights(option.init_from, what), what)
    freeze(model, option)
    return model


def prepare(model_cfg: Any, data_cfg: Any) -> Any:
    """Before a run writes anything: the files the model starts from are found (or refused in one line); returns
    the data config to build the data from, with the pretrained weights' preprocessing taken
    (:func:`adopt_preprocessing`). The run's own config is left as composed (resume=auto matches it against the
    checkpoint's); the data's ``meta`` records what was taken, and eval/export/infer read it there."""
    option = options.instantiate("model", model_cfg)
    option.locate_weights()
    if option.init_from is not None:
        check_shards(option.init_from, f"model.init_from={option.init_from}")
    return adopt_preprocessing(data_cfg, option.preprocessing())


def adopt_preprocessing(data_cfg: Any, preprocessing: Mapping[str, Any] | None) -> Any:
    """A copy of `data_cfg` with the pretrained weights' input size, crop, interpolation and mean/std in each of
    those keys it leaves null (`data_cfg` itself when there is nothing to take)."""
    taken = {}
    for key, value in (preprocessing or {}).items():
        if key in data_cfg and data_cfg[key] is None:
            if key in ("mean", "std") and len(value) != data_cfg.get("in_channels", len(value)):
                # grey images through RGB weights (whose first convolution sums the colour filters): the
                # statistics of a grey pixel are those of its colours averaged
                value = [sum(value) / len(value)] * int(data_cfg.in_channels)
            taken[key] = value
    if not taken:
        return data_cfg
    log.info("data: %s from the pretrained model (set data.<key> to choose otherwise)", taken)
    adopted = copy.deepcopy(data_cfg)
    for key, value in taken.items():
        adopted[key] = value
    return adopted
