"""``build(cfg)``: the one entry point that turns a ``data`` option (``lab.config.data``) into a
:class:`DataModule`."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from lab.config import options
from lab.config.data import DataConfig
from lab.data.common import DataModule

_last_built: tuple[str, DataModule] | None = None  # (data config, what it built): see build(reuse=True)


def build(cfg: Any, reuse: bool = False) -> DataModule:
    """Train/val(/test) datasets and their ``meta`` (whatever the models and the task need: input_shape and
    num_outputs always; class names, normalization, target statistics or a vocabulary as the data has them).
    Raises ConfigError (naming the key and the fix) on a bad config or missing files.

    ``reuse=True`` (the jobs of a sweep, run one after another in one process by Hydra's basic launcher): when the
    data config is the one built last, its splits are returned again instead of read, decoded and split anew
    (datasets are read-only; `meta` is copied, so a job cannot change the next one's)."""
    global _last_built
    option = options.instantiate("data", cfg)
    if not reuse:
        return _with_mixing(option, option.build())
    key = json.dumps(dataclasses.asdict(option), sort_keys=True, default=str)
    if _last_built is None or _last_built[0] != key:
        _last_built = None  # never two datasets in memory at once
        _last_built = (key, _with_mixing(option, option.build()))
    module = _last_built[1]
    return dataclasses.replace(module, meta=copy.deepcopy(module.meta))


def _with_mixing(option: DataConfig, module: DataModule) -> DataModule:
    """The option's ``batch_mixing()`` (data.mixup_alpha / cutmix_alpha): the training loader's collate mixes its
    batches (lab.data.augment)."""
    mixing = option.batch_mixing()
    if mixing is None:
        return module
    from lab.data.augment import MixBatch

    return dataclasses.replace(module, train_collate=MixBatch(int(module.meta["num_classes"]), *mixing))
