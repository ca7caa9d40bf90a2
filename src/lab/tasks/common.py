"""`build`: make the task of a `task` option, with the settings every task shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.config import options


def build(cfg: Any, meta: Mapping[str, Any], train_set: Any = None) -> Any:
    """Build the task of option `cfg` for the data `meta` describes (a class-label task needs `num_classes`).
    The task takes its name, monitor and mode from the option (e.g. `task.monitor=loss`). To train, pass the
    training split: `prepare(train_set)` takes what the task needs from it, such as balanced class weights."""
    option = options.instantiate("task", cfg)
    task = option.build(meta)
    task.name, task.monitor, task.mode = option.name, option.monitor, option.mode
    if train_set is not None:
        task.prepare(train_set)
    return task
