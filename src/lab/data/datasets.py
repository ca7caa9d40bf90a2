"""`build(cfg)`, the one entry point that turns a `data` option into a `DataModule`."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from lab.config import options
from lab.data.common import DataModule, pool_splitter

_last_built: tuple[str, DataModule] | None = None  # (data config, what it built), for build(reuse=True)


def build(cfg: Any, reuse: bool = False) -> DataModule:
    """Build the train, val and (optional) test datasets and their `meta`.
    `meta` holds what the models and the task need: always input_shape and num_outputs, plus class names,
    normalization, target statistics or a vocabulary when the data has them. Raises ConfigError, naming the key
    and the fix, on a bad config or missing files.

    `reuse=True` is for a sweep's jobs, run one after another in one process by Hydra's basic launcher. If the data
    config is the one built last, its splits are returned again, not read anew. `meta` is copied (datasets are
    read-only), so one job cannot change the next one's."""
    global _last_built
    option = options.instantiate("data", cfg)
    if not reuse or pool_splitter() is not None:  # a job's own split of the pool (a fold) is no other job's
        module = option.build()
    else:
        key = json.dumps(dataclasses.asdict(option), sort_keys=True, default=str)
        if _last_built is None or _last_built[0] != key:
            _last_built = None  # never two datasets in memory at once
            _last_built = (key, option.build())
        module = dataclasses.replace(_last_built[1], meta=copy.deepcopy(_last_built[1].meta))
    mixing = option.batch_mixing()  # data.mixup_alpha / cutmix_alpha: the training loader's collate mixes batches
    if mixing is None:
        return module
    from lab.data.augment import MixBatch

    return dataclasses.replace(module, train_collate=MixBatch(int(module.meta["num_classes"]), *mixing))
