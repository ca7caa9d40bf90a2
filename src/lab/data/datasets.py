"""``build(cfg)``: the one entry point that turns a ``data`` config into a :class:`DataModule`.

Datasets register their builder with ``@register("name", config=<schema>)`` in any module of ``lab/data/``; a fork
adds one as a new module there plus ``conf/data/<name>.yaml`` (no list to edit).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from omegaconf import OmegaConf

from lab.data.common import DataModule
from lab.registry import Registry

DATASETS = Registry("data", "lab.data", noun="dataset")
register = DATASETS.register
_last_built: tuple[str, DataModule] | None = None  # (data config, what it built): see build(reuse=True)


def build(cfg: Any, reuse: bool = False) -> DataModule:
    """Train/val(/test) datasets and their ``meta`` (whatever the models and the task need: input_shape and
    num_outputs always; class names, normalization, target statistics or a vocabulary as the data has them).
    Raises ConfigError (naming the key and the fix) on a bad config or missing files.

    ``reuse=True`` (the jobs of a sweep, run one after another in one process by Hydra's basic launcher): when the
    data config is the one built last, its splits are returned again instead of read, decoded and split anew
    (datasets are read-only; `meta` is copied, so a job cannot change the next one's)."""
    global _last_built
    if not reuse:
        return DATASETS.build(cfg)
    key = json.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True, default=str)
    if _last_built is None or _last_built[0] != key:
        _last_built = None  # never two datasets in memory at once
        _last_built = (key, DATASETS.build(cfg))
    module = _last_built[1]
    return dataclasses.replace(module, meta=copy.deepcopy(module.meta))


def checked_config(cfg: Any) -> Any:
    """``cfg`` merged into its dataset's schema and value-checked (eval/export rebuild data from checkpoints)."""
    return DATASETS.checked(cfg)
