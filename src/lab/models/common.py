"""What every model shares: :func:`build` (the option's ``build`` plus ``model.freeze``) and the input checks."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from torch import nn

from lab.config import options
from lab.errors import ConfigError
from lab.models.freeze import freeze
from lab.models.pretrained import load_matching, read_weights

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
    freeze(model, list(option.freeze))
    return model


def prepare(model_cfg: Any, data_cfg: Any) -> None:
    """Before a run writes anything: the files the model starts from are found (or refused in one line), and the
    pretrained weights' preprocessing is taken by the data (:func:`adopt_preprocessing`)."""
    option = options.instantiate("model", model_cfg)
    option.locate_weights()
    adopt_preprocessing(data_cfg, option.preprocessing())


def adopt_preprocessing(data_cfg: Any, preprocessing: Mapping[str, Any] | None) -> None:
    """The pretrained weights' input size, crop, interpolation and mean/std, written in place into each of those
    data keys the config leaves null: the run's saved config and data_meta then record what training applied, and
    eval/export/infer apply it again."""
    taken = {}
    for key, value in (preprocessing or {}).items():
        if key in data_cfg and data_cfg[key] is None:
            if key in ("mean", "std") and len(value) != data_cfg.get("in_channels", len(value)):
                # grey images through RGB weights (whose first convolution sums the colour filters): the
                # statistics of a grey pixel are those of its colours averaged
                value = [sum(value) / len(value)] * int(data_cfg.in_channels)
            data_cfg[key] = value
            taken[key] = value
    if taken:
        log.info("data: %s from the pretrained model (set data.<key> to choose otherwise)", taken)
