"""Training: the `Trainer` and its step (`trainer`), what a resume restores (`state`), the metrics between two log
lines (`window`), the evaluation loop (`evaluation`) and the report of what is about to train (`start`)."""

from typing import TYPE_CHECKING

from lab import lazy

if TYPE_CHECKING:
    from lab.training.trainer import Trainer

__all__ = ["Trainer"]

__getattr__ = lazy.names(__name__, {"Trainer": "trainer"})
