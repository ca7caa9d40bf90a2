"""Tasks: what is learned, how it is scored and what eval and infer write.
The trainer and workflows call only the `base.Task` interface. `build(cfg.task, meta)` returns the configured one."""

from typing import TYPE_CHECKING

from lab import lazy

if TYPE_CHECKING:
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

__getattr__ = lazy.names(
    __name__,
    {
        "NORMALISERS": "base",
        "BaseTask": "base",
        "EvalContext": "base",
        "InferContext": "base",
        "Metrics": "base",
        "Predictions": "base",
        "Task": "base",
        "Classification": "classification",
        "build": "common",
    },
)
