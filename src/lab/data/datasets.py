"""``build(cfg)``: the one entry point that turns a ``data`` config into a :class:`DataModule`.

Datasets register their builder with ``@register("name", config=<schema>)`` in any module of ``lab/data/``; a fork
adds one as a new module there plus ``conf/data/<name>.yaml`` (no list to edit).
"""

from __future__ import annotations

from typing import Any

from lab.data.common import DataModule
from lab.registry import Registry

DATASETS = Registry("data", "lab.data", noun="dataset")
register = DATASETS.register


def build(cfg: Any) -> DataModule:
    """Train/val(/test) datasets and their ``meta`` (whatever the models and the task need: input_shape and
    num_outputs always; class names, normalization, target statistics or a vocabulary as the data has them).
    Raises ConfigError (naming the key and the fix) on a bad config or missing files."""
    return DATASETS.build(cfg)


def checked_config(cfg: Any) -> Any:
    """``cfg`` merged into its dataset's schema and value-checked (eval/export rebuild data from checkpoints)."""
    return DATASETS.checked(cfg)
