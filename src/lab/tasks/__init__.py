"""Tasks: what is learned, how it is scored and reported (``lab.tasks.base.Task``). The engine and the workflows
call only that interface; ``build(cfg.task, meta)`` returns the configured one."""

from lab.tasks.base import Metrics, Predictions, ReportContext, Task
from lab.tasks.classification import Classification
from lab.tasks.registry import build, register

__all__ = ["Classification", "Metrics", "Predictions", "ReportContext", "Task", "build", "register"]
