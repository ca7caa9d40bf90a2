"""The task table behind :func:`lab.tasks.build`: a fork adds a task as a new module in ``lab/tasks/`` whose
builder ``(cfg, meta) -> Task`` is decorated with ``@register("name", config=<its schema>)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.registry import Registry

TASKS = Registry("task", "lab.tasks")
register = TASKS.register


def build(cfg: Any, meta: Mapping[str, Any], train_set: Any = None) -> Any:
    """The task named ``cfg.name`` for the data ``meta`` describes (a class-label task needs ``num_classes``...).
    Its monitor and mode are the config's (``task.monitor=loss``), for every task alike. To train, pass the training
    split: a task with a ``prepare(train_set)`` method takes what it needs from it (balanced class weights)."""
    task = TASKS.build(cfg, meta)
    task.monitor, task.mode = cfg.get("monitor", task.monitor), cfg.get("mode", task.mode)
    if train_set is not None and hasattr(task, "prepare"):
        task.prepare(train_set)
    return task
