"""The Trainer's one extension seam: a `Callback` is told what happens in training and may add to it.

A callback is switched on one way: `callback=<name>`, an option of lab.config.callbacks (the core's EMA of the
weights and early stopping, an extension's, a fork's, a test's), which the Trainer builds once it is set up. What
`trainer.*` keys switch on (a fine-tuning's unfreeze, train/mfu) is the Trainer's own, not a callback. The Trainer
knows no callback by name.

Subclass `Callback` and override the hooks you need: the Trainer calls each hook on every callback, so every one
is a `Callback` (lab.config.callbacks refuses anything else). Per-step hooks are looked up once, when `fit()`
starts, and only the overridden ones are called: a callback costs a step nothing unless it hooks the step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lab.training.trainer import Trainer


class Callback:
    """Hooks in the order a run calls them. A hook may raise to end the run (a pruned trial, a NaN found)."""

    def fitting(self, trainer: Trainer) -> AbstractContextManager[Any]:
        """A context entered around the whole of `fit()` and left however it ends (a profiler, anomaly hooks)."""
        return contextlib.nullcontext()

    def on_train_epoch_start(self, trainer: Trainer, epoch: int) -> None:
        """Before each epoch's first batch, a resumed one's too (0-based `epoch`): what changes with the epoch is
        set here, so a resumed run sets it again."""

    def on_before_optimizer_step(self, trainer: Trainer) -> None:
        """After the group's backward passes, before clipping and the update: the gradients are there (scaled
        under fp16: `trainer.scaler` knows the scale)."""

    def on_train_step_end(self, trainer: Trainer) -> None:
        """After each optimizer step; `trainer.progress.global_step` counts it already."""

    def on_train_log(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        """Each `trainer.log_every_n_steps`: add entries to `metrics` before they are logged."""

    def on_validation_start(self, trainer: Trainer) -> None:
        """Before the validation split is scored (the EMA puts its average in the model's place)."""

    def on_validation_end(self, trainer: Trainer, metrics: dict[str, float], epoch: int) -> None:
        """After scoring and best tracking, before the metrics are logged: read them, add to them, or set
        `trainer.should_stop` to end the run after this epoch's checkpoint."""

    def on_save_checkpoint(self, trainer: Trainer, checkpoint: dict[str, Any]) -> None:
        """Every rank, before a checkpoint is written: add entries, or replace `model` (keep the weights training
        continues from as `raw_model` then: a resume loads those)."""

    def on_load_checkpoint(self, trainer: Trainer, checkpoint: dict[str, Any]) -> None:
        """After the training state was restored from `checkpoint` on a resume."""

    def on_fit_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        """After the last epoch: add entries to the run's summary."""


HOOKS = tuple(name for name in vars(Callback) if name.startswith("on_"))


def hooks(callbacks: list[Callback], name: str) -> list[Callable[..., Any]]:
    """The `name` hooks the callbacks override, in the callbacks' order: a `Callback`'s inherited no-op is left
    out, so a step calls only what does something."""
    return [getattr(c, name) for c in callbacks if getattr(type(c), name) is not getattr(Callback, name)]
