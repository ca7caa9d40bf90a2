"""Callbacks, the Trainer's one extension seam: a `Callback` hears what happens in training and may add to it.

Switch one on with `callback=<name>`, an option in `lab.config.callbacks`. Subclass `Callback` and override the
hooks you need: only overridden ones are called, so a callback that doesn't hook the step costs it nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeAlias

from lab.config import callbacks as callback_options

# The `lab.training.trainer.Trainer` running the fit. Not imported, not even for type checking: the trainer imports
# this module, and the two would form an import circle.
Trainer: TypeAlias = Any


class Callback:
    """Hooks in the order a run calls them. A hook may raise to end the run (a pruned trial, a NaN found)."""

    def fitting(self, trainer: Trainer) -> AbstractContextManager[Any]:
        """A context entered around the whole of `fit()` and left however it ends (a profiler, anomaly hooks)."""
        return contextlib.nullcontext()

    def on_train_epoch_start(self, trainer: Trainer, epoch: int) -> None:
        """Run before each epoch's first batch, resumed epochs included (`epoch` is 0-based). Set what changes
        with the epoch here, so a resumed run sets it again."""

    def on_before_optimizer_step(self, trainer: Trainer) -> None:
        """Run after the backward passes, before clipping and the update. The gradients are ready, still scaled
        under fp16 (`trainer.scaler` holds the scale)."""

    def on_train_step_end(self, trainer: Trainer) -> None:
        """Run after each optimizer step. `trainer.progress.global_step` already counts it."""

    def on_train_log(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        """Run every `trainer.log_every_n_steps` steps, to add entries to `metrics` before they are logged."""

    def on_validation_start(self, trainer: Trainer) -> None:
        """Run before the validation split is scored. The EMA swaps its average into the model here."""

    def on_validation_end(self, trainer: Trainer, metrics: dict[str, float], epoch: int) -> None:
        """Run after scoring and best tracking, before the metrics are logged. Read or add to `metrics`, or set
        `trainer.should_stop` to end the run after this epoch's checkpoint."""

    def on_save_checkpoint(self, trainer: Trainer, checkpoint: dict[str, Any]) -> None:
        """Run on every rank before a checkpoint is written, to add entries or replace `model`. If you replace
        `model`, store the weights training continues from as `raw_model`, which a resume loads."""

    def on_load_checkpoint(self, trainer: Trainer, checkpoint: dict[str, Any]) -> None:
        """Run on a resume, after the training state was restored from `checkpoint`."""

    def on_fit_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        """Run after the last epoch, to add entries to the run's `summary`."""


HOOKS = tuple(name for name in vars(Callback) if name.startswith("on_"))


def hooks(callbacks: list[Callback], name: str) -> list[Callable[..., Any]]:
    """Return the `name` hooks the callbacks override, in order. Inherited no-ops are left out, so a step calls
    only hooks that do something."""
    return [getattr(c, name) for c in callbacks if getattr(type(c), name) is not getattr(Callback, name)]


def build(callbacks: Mapping[str, Any], trainer: Any) -> list[Any]:
    """Build the callbacks `cfg.callbacks` turns on for `trainer`, refusing one that is not a `Callback`."""
    built = {name: option.build(trainer) for name, option in callback_options.chosen(callbacks).items()}
    for name, callback in built.items():
        if callback is not None and not isinstance(callback, Callback):
            raise TypeError(
                f"the {name} callback option built a {type(callback).__name__}, not a lab.training.callbacks.Callback:"
                " subclass Callback and override the hooks you need"
            )
    return [callback for callback in built.values() if callback is not None]
