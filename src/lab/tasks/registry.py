"""The task table behind :func:`lab.tasks.build`: a fork adds a task as a new module in ``lab/tasks/`` whose
builder ``(cfg, meta) -> Task`` is decorated with ``@register("name", config=<its schema>)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.registry import Registry

TASKS = Registry("task", "lab.tasks")
register = TASKS.register


def build(cfg: Any, meta: Mapping[str, Any]) -> Any:
    """The task named ``cfg.name`` for the data ``meta`` describes (a class-label task needs ``num_classes``...)."""
    return TASKS.build(cfg, meta)
