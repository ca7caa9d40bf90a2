"""The Trainer's one extension seam: a `Callback` is told what happens in training and may add to it.

Every optional part of a run is a callback. The loop's own are switched on by `trainer.*` keys (`configured`): the
EMA of the weights, early stopping and a fine-tuning's unfreeze; the workflow adds MFU (it needs the FLOPs of a
first batch); what `cfg.callbacks` names (`callback=<name>`: an option of lab.config.callbacks, an extension's, a
fork's) is built for the Trainer once it is set up. The Trainer itself knows none of them by name.

Subclass `Callback` and override the hooks you need; an object that merely has some of these methods works too
(duck typing). Per-step hooks are looked up once, when the Trainer is built, and only the overridden ones are
called: a callback costs a step nothing unless it hooks the step.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lab.training.trainer import Trainer

log = logging.getLogger(__name__)


class Callback:
    """Hooks in the order a run calls them. A hook may raise to end the run (a pruned trial, a NaN found)."""

    def fitting(self, trainer: Trainer) -> AbstractContextManager[Any]:
        """A context entered around the whole of `fit()` and left however it ends (a profiler, anomaly hooks)."""
        return contextlib.nullcontext()

    def on_train_epoch_start(self, trainer: Trainer, epoch: int) -> None:
        """Before each epoch's first batch, a resumed one's too (0-based `epoch`): what changes with the epoch
        (trainer.unfreeze_at_epoch) is set here, so a resumed run sets it again."""

    def on_before_optimizer_step(self, trainer: Trainer) -> None:
        """After the group's backward passes, before clipping and the update: the gradients are there (scaled
        under fp16: `trainer.scaler` knows the scale)."""

    def on_train_step_end(self, trainer: Trainer) -> None:
        """After each optimizer step; `trainer.progress.global_step` counts it already."""

    def on_train_log(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        """Each `trainer.log_every_n_steps`: add entries to `metrics` before they are logged (train/mfu)."""

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


def hooks(callbacks: list[Any], name: str) -> list[Callable[..., Any]]:
    """The `name` hooks the callbacks implement, in the callbacks' order: a `Callback`'s inherited no-op is left
    out, so a step calls only what does something."""
    found = []
    for callback in callbacks:
        method = getattr(type(callback), name, None)
        if method is not None and method is not getattr(Callback, name):
            found.append(getattr(callback, name))
    return found


def configured(trainer: Trainer) -> list[Callback]:
    """The callbacks the trainer's own config switches on: `trainer.ema` and `trainer.early_stopping` build theirs
    (importing it only then), `trainer.unfreeze_at_epoch` adds `Unfreeze`. They come before the others, so a
    callback of yours sees each hook's final state (the EMA's weights back in the model, its val_raw/ metrics
    added)."""
    cfg = trainer.cfg
    found = [cfg.ema.build(trainer), cfg.early_stopping.build(trainer)]
    if cfg.unfreeze_at_epoch is not None:
        found.append(Unfreeze(cfg.unfreeze_at_epoch))
    return [callback for callback in found if callback is not None]


class Unfreeze(Callback):
    """trainer.unfreeze_at_epoch: from that epoch on, the parameters model.freeze froze train too (their BatchNorm
    layers update their statistics again). The optimizer has held them from the start (``build_optimizer(...,
    include_frozen=True)``: without gradients they were never updated), so its state has one layout for the whole
    run and a resume on either side of the epoch is exact. DDP's reducer knows only the parameters that needed
    gradients when it was built: the model is wrapped anew."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Trainer, epoch: int) -> None:
        frozen = [p for p in trainer.model.parameters() if not p.requires_grad]
        if epoch < self.epoch or not frozen:
            return
        for param in frozen:
            param.requires_grad_(True)
        trainer.rewrap()
        log.info("epoch %d: %d frozen parameter tensors unfrozen (trainer.unfreeze_at_epoch)", epoch + 1, len(frozen))
