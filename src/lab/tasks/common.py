"""``build``: the task of a ``task`` option (``lab.config.tasks``), with the settings every task shares applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.config import options


def build(cfg: Any, meta: Mapping[str, Any], train_set: Any = None) -> Any:
    """The task of the option ``cfg`` for the data ``meta`` describes (a class-label task needs ``num_classes``...).
    Its name, monitor and mode are the option's (``task.monitor=loss``), for every task alike. To train, pass the
    training split: the task's ``prepare(train_set)`` takes what it needs from it (balanced class weights)."""
    option = options.instantiate("task", cfg)
    task = option.build(meta)
    task.name, task.monitor, task.mode = option.name, option.monitor, option.mode
    if train_set is not None:
        task.prepare(train_set)
    return task
