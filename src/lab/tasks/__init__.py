"""Tasks: what is learned, how it is scored and reported (``lab.tasks.base.Task``). The trainer and the workflows
call only that interface; ``build(cfg.task, meta)`` returns the configured one."""

from lab.tasks.base import BaseTask, Metrics, Predictions, ReportContext, Task
from lab.tasks.classification import Classification
from lab.tasks.common import build

__all__ = [
    "BaseTask",
    "Classification",
    "Metrics",
    "Predictions",
    "ReportContext",
    "Task",
    "build",
]
