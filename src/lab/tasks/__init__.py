"""Tasks: what is learned, how it is scored and what eval and infer write.
The trainer and workflows call only the `base.Task` interface. `build(cfg.task, meta)` returns the configured one."""

from lab.tasks.base import NORMALISERS, BaseTask, EvalContext, InferContext, Metrics, Predictions, Task
from lab.tasks.classification import Classification
from lab.tasks.common import build

__all__ = [
    "NORMALISERS",
    "BaseTask",
    "Classification",
    "EvalContext",
    "InferContext",
    "Metrics",
    "Predictions",
    "Task",
    "build",
]
