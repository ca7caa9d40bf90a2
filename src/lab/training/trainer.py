"""The training loop: autocast, loss scaling, accumulation, clipping, validation, best tracking, checkpoints.

The Trainer knows no task, schedule, strategy or extra by name; callbacks (`lab.training.callbacks`) hook in. Read
`train_step` top to bottom. The host syncs with the device only at logging, validation and checkpoint time, so the
step runs as fast as a hand-written loop.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from tqdm import tqdm

from lab.checkpointing import CheckpointManager, read
from lab.config.models import ModelConfig
from lab.config.training import TrainerConfig
from lab.data.batches import size as batch_size
from lab.data.batches import split as split_batch
from lab.data.batches import to_device
from lab.data.device import DeviceLoader
from lab.data.loaders import EpochLoader
from lab.distributed.parallel import Parallel
from lab.errors import UserError
from lab.models.freeze import train_mode
from lab.optim.schedulers import Schedule
from lab.runtime import Precision, reset_peak_memory
from lab.tasks.base import Task
from lab.tracking import Tracker
from lab.training.bad_steps import BadSteps
from lab.training.callbacks import build as build_callbacks
from lab.training.callbacks import hooks
from lab.training.evaluation import score
from lab.training.flops import Utilization
from lab.training.preemption import StopSignals, interrupted
from lab.training.state import Progress, TrainingState
from lab.training.update import clip_grad_norm, scaled_step
from lab.training.window import StepWindow, log_line

log = logging.getLogger(__name__)
# With fp16 the GradScaler skips the optimizer step when gradients overflow (typically the first steps), while the
# schedule still advances. That is intended, so torch's warning about the order would only mislead.
warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`")


class Trainer:
    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Schedule,
        task: Task,
        train_batches: EpochLoader | DeviceLoader,
        val_loader: torch.utils.data.DataLoader | None,
        device: torch.device,
        precision: Precision,
        cfg: TrainerConfig | DictConfig,
        tracker: Tracker,
        checkpoints: CheckpointManager,
        parallel: Parallel | None = None,
        forward: nn.Module | None = None,
        callbacks: Mapping[str, Any] | None = None,
        utilization: Utilization | None = None,
        model_option: ModelConfig | None = None,
    ) -> None:
        """`callbacks` is `cfg.callbacks`, each entry an option's node or the option, built here. `utilization` holds
        a first batch's FLOPs and the devices' peak, for train/mfu (`lab.training.flops`)."""
        # a plain dataclass, not a DictConfig: OmegaConf attribute access costs microseconds, several times per step
        self.cfg = cast(TrainerConfig, OmegaConf.to_object(cfg)) if isinstance(cfg, DictConfig) else cfg
        self.model = model  # the plain module, which checkpoints hold
        self.parallel = parallel or Parallel()
        self.wrapped = model if forward is None else forward  # the DDP/FSDP view, or the model itself when alone
        self.forward = torch.compile(self.wrapped) if self.cfg.compile else self.wrapped
        self.optimizer, self.scheduler, self.task = optimizer, scheduler, task
        self.train_batches, self.val_loader = train_batches, val_loader
        self.device, self.precision, self.utilization = device, precision, utilization
        self.tracker, self.checkpoints = tracker, checkpoints
        self.should_stop = False  # set by a callback (early stopping) to end the run after this epoch's checkpoint
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision.grad_scaler)
        owner = model_option or ModelConfig()
        self.state = TrainingState(model, optimizer, scheduler, self.scaler, self.parallel, device, option=owner)
        # fp16 steps the GradScaler skipped, counted on the device, since reading the scale every step would sync
        self.skipped_steps = torch.zeros((), dtype=torch.int64, device=device)
        self.bad_steps = BadSteps(self.cfg.max_bad_steps, self.parallel) if self.cfg.max_bad_steps else None
        self.last_val: dict[str, float] = {}
        self.window = StepWindow()
        self.resumed_window: dict[str, list[float]] | None = None  # losses of unlogged steps, from a checkpoint
        self.stop = StopSignals()  # installed for the length of fit()
        self.show_bar = {"on": True, "off": False, "auto": sys.stderr.isatty()}[self.cfg.progress_bar]
        self.callbacks = build_callbacks(callbacks or {}, self)
        # the per-step hooks, found when fit() starts rather than per step
        self._step_hooks: list[Any] = []
        self._grad_hooks: list[Any] = []
        self._outputs_checked = False  # what the model returns is checked once, at the first step

    @property
    def progress(self) -> Progress:
        return self.state.progress  # replaced when a checkpoint is resumed

    # ------------------------------------------------------------------ the run
    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        self.window, self.resumed_window = StepWindow(self.resumed_window), None
        reset_peak_memory(self.device)  # the peak of training alone, not of the model summary or a previous job
        self._step_hooks = hooks(self.callbacks, "on_train_step_end")
        self._grad_hooks = hooks(self.callbacks, "on_before_optimizer_step")
        with self.stop, contextlib.ExitStack() as callbacks:
            for callback in self.callbacks:  # e.g. a profiler, on until fit ends, however it ends
                callbacks.enter_context(callback.fitting(self))
            for epoch in range(self.progress.epoch, cfg.max_epochs):
                self.progress.epoch = epoch
                self._unfreeze(epoch)
                self._call("on_train_epoch_start", epoch)
                finished = self.train_epoch(epoch)
                last = self._done() or epoch == cfg.max_epochs - 1
                improved = False
                if self.val_loader is not None and ((epoch + 1) % cfg.val_every_n_epochs == 0 or last):
                    improved = self._validate(epoch)
                if finished:
                    self.progress.epoch, self.progress.batch_in_epoch = epoch + 1, 0
                ending = last or self.should_stop
                self._save(best=improved, final=ending)
                if ending:
                    break
        summary = self.summary()
        self._call("on_fit_end", summary)
        return summary

    def train_epoch(self, epoch: int) -> bool:
        """Train one pass over the batches, from a resumed position. Return False if max_steps ended it early."""
        train_mode(self.model)  # frozen BatchNorm layers stay in eval mode
        cfg, progress = self.cfg, self.progress
        total, position = len(self.train_batches), progress.batch_in_epoch
        batches = self.train_batches.epoch(epoch, start=position)
        bar: tqdm | None = None
        if self.show_bar:
            bar = tqdm(total=total, initial=position, desc=f"epoch {epoch + 1}/{cfg.max_epochs}", leave=False)
        while position < total:
            fetch_start = time.perf_counter()  # the wait for data (train/data_wait)
            # an accumulation group's batches, as loaded (the last group of an epoch may be short)
            group = [split_batch(next(batches)) for _ in range(min(cfg.grad_accum_steps, total - position))]
            self.window.data_time += time.perf_counter() - fetch_start
            self.train_step(group)
            for hook in self._step_hooks:
                hook(self)
            position += len(group)
            progress.batch_in_epoch = position
            if bar is not None:
                bar.update(len(group))
            if progress.global_step % cfg.log_every_n_steps == 0:
                self._log(epoch, bar)
            if self.checkpoints.due(progress.global_step):
                self._save(best=False)
            # the stop signal any rank got (the largest number if two differ), or 0
            signum = self.parallel.largest_at_last_call(self.stop.received or 0)
            if signum:  # every rank saves at this step (a collective under FSDP); the run ends "interrupted"
                self._save(best=False, wait=True)
                raise interrupted(signum, progress.global_step, str(self.checkpoints.last))
            if self._done():
                break
        if bar is not None:
            bar.close()
        return position == total

    def train_step(self, group: list[tuple[Any, Any]]) -> None:
        """Take one optimizer step over the (inputs, targets) micro-batches of an accumulation group.

        Micro-batches go to the device one at a time, so only one micro-batch's tensors and activations are there at
        once. Each summed loss is divided by the weight (samples, tokens, pixels) of the whole group, averaged over
        ranks. So the gradient equals one large batch's, even when micro-batches carry different token counts, and
        DDP/FSDP then average over ranks. Everything stays on the device, with no host sync.
        """
        cfg, task, scaler, progress = self.cfg, self.task, self.scaler, self.progress
        weights = [task.weight(targets).to(self.device, non_blocking=True) for _, targets in group]
        total = self.parallel.mean_over_ranks(weights[0] if len(weights) == 1 else torch.stack(weights).sum())
        inverse_total = total.reciprocal()
        step, last, losses = progress.global_step + 1, len(group) - 1, []
        for index, batch in enumerate(group):
            inputs, targets = to_device(batch, self.device, cfg.channels_last)
            # no gradient all-reduce until the group's last micro-batch (DDP no_sync / FSDP sync off)
            with self.parallel.accumulation(self.wrapped, sync=index == last):
                with self.precision.autocast(self.device):
                    outputs = self.forward(inputs)
                if not self._outputs_checked:
                    self._outputs_checked = True
                    if not isinstance(outputs, torch.Tensor):  # refuse here what export and infer cannot take
                        from lab.tasks.outputs import check  # imported late, as every shipped model returns a tensor

                        check(outputs, task)
                loss = task.loss(outputs, targets)  # summed, fp32
                # seed backward with 1/total rather than differentiating loss / total, to save an autograd node
                scaler.scale(loss).backward(inverse_total)
            losses.append(loss)
            self.window.add(loss, weights[index], step, progress.epoch, batch_size(targets))
        for hook in self._grad_hooks:  # the gradients are there until zero_grad
            hook(self)
        # with trainer.max_bad_steps, a non-finite step still counts but leaves the weights as they were
        if self.bad_steps is None or self.bad_steps.finite(losses, total, progress):
            measure = step % cfg.log_every_n_steps == 0  # the norm is measured only on steps that log it
            if cfg.grad_clip is not None or measure:
                scaler.unscale_(self.optimizer)  # clip (and measure) the true gradients, not the fp16-scaled ones
                self.window.grad_norm = clip_grad_norm(self.model, cfg.grad_clip)
            if scaler.is_enabled():  # it skips the update when fp16 gradients overflow, counted on the device
                self.skipped_steps += scaled_step(self.optimizer, scaler)
            else:
                self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        progress.global_step = step

    def _done(self) -> bool:
        return 0 < self.cfg.max_steps <= self.progress.global_step

    # ------------------------------------------------------------------ evaluation
    def score(self, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        """Return the task's exact metrics over `loader` (`trainer.limit_val_batches` of it), reduced over ranks."""
        forward = self.parallel.evaluation_forward(self.model, self.forward)
        args = (self.task, self.parallel, self.device, self.precision, self.cfg.channels_last)
        return score(self.model, forward, loader, *args, limit=self.cfg.limit_val_batches)

    def test(self, loader: Any) -> dict[str, float]:
        """Score the best checkpoint on the held-out test split, once, after training."""
        best = self.state.option.restore_state(self.model, read(self.checkpoints.best))
        self.parallel.load_model_state(self.model, best)
        metrics = {f"test/{k}": v for k, v in self.score(loader).items()}
        self.tracker.log(metrics, step=self.progress.global_step)
        log.info("test (best checkpoint): %s", "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        return metrics

    def _validate(self, epoch: int) -> bool:
        """Score the validation split, track the best and let the schedule react. True if the monitor improved."""
        with self.window.paused():
            self._call("on_validation_start")
            assert self.val_loader is not None  # fit() validates only when there is a validation split
            metrics = {f"val/{k}": v for k, v in self.score(self.val_loader).items()}
            monitor = f"val/{self.task.monitor}"
            if monitor not in metrics:
                raise UserError(
                    f"task.monitor={self.task.monitor!r} is not a validation metric; choose one of {', '.join(metrics)}"
                )
            improved = self.progress.record(metrics[monitor], epoch + 1, self.task.mode)
            if self.progress.best_metric is not None:  # none yet while every validation so far was NaN
                metrics[f"{monitor}_best"] = self.progress.best_metric
            self.scheduler.step_validation(metrics)
            self._call("on_validation_end", metrics, epoch + 1)  # callbacks may add metrics (the EMA's val_raw/)
        self.last_val = metrics
        reset_peak_memory(self.device)  # validation's activations are not training's peak
        self.tracker.log(metrics, step=self.progress.global_step, epoch=epoch + 1)
        line = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        log.info("epoch %d/%d step %d  %s", epoch + 1, self.cfg.max_epochs, self.progress.global_step, line)
        return improved

    def summary(self) -> dict[str, Any]:
        out = {
            f"val/{self.task.monitor}_best": self.progress.best_metric,
            "best_epoch": self.progress.best_epoch,
            "global_step": self.progress.global_step,
            "epochs": self.progress.epoch,
            **self.last_val,
        }
        if self.scaler.is_enabled():
            out["train/skipped_steps"] = int(self.skipped_steps)
        if self.utilization is not None:
            out["train/flops_per_step"] = self.utilization.flops_per_step(
                self.cfg.grad_accum_steps, self.parallel.world_size
            )
        return out

    # ------------------------------------------------------------------ records
    def _losses(self) -> tuple[list[float], list[float]]:
        skipping = self.scaler.is_enabled() or self.bad_steps is not None  # non-finite steps are skipped, not fatal
        return self.window.checked_losses(self.parallel, skipping)

    def _log(self, epoch: int, bar: tqdm | None) -> None:
        lr = self.scheduler.get_last_lr()[0]
        metrics = self.window.train_metrics(*self._losses(), self.parallel.world_size, lr, self.device)
        if self.scaler.is_enabled():
            metrics["train/grad_scale"] = self.scaler.get_scale()
            metrics["train/skipped_steps"] = int(self.skipped_steps)
        if self.bad_steps is not None:
            metrics["train/bad_steps"] = self.bad_steps.total
        if self.utilization is not None:
            metrics["train/mfu"] = self.utilization.mfu(metrics["train/throughput"], self.parallel.world_size)
        self._call("on_train_log", metrics)  # callbacks may add figures derived from the window
        self.tracker.log(metrics, step=self.progress.global_step, epoch=epoch + 1)
        if bar is None:
            log.info("%s", log_line(epoch + 1, self.progress.global_step, metrics))
        else:
            bar.set_postfix(loss=f"{metrics['train/loss']:.4f}", lr=f"{lr:.2e}", refresh=False)
        self.window = StepWindow()
        reset_peak_memory(self.device)  # each logged peak covers its own window

    def _save(self, best: bool, final: bool = False, wait: bool = False) -> None:
        """Save a checkpoint. It is a collective, so every rank calls it. Under FSDP only best.pt and the `final`
        last.pt gather the whole model. With `wait` or `final`, wait for a background save (trainer.async_save)."""
        with self.window.paused():
            losses, weights = self._losses()  # never write weights that went NaN over good ones
            checkpoint = self.state.payload(consolidate=best or final)
            # the steps since the last log line, so a run resumed from here logs its next line over all of them
            checkpoint["log_window"] = {"losses": losses, "weights": weights}
            self._call("on_save_checkpoint", checkpoint)
            self.checkpoints.save(checkpoint, best, final=final, wait=wait)

    def resume(self, checkpoint: dict[str, Any], path: Path | None = None, batch_size: int | None = None) -> None:
        """Continue a run exactly from `checkpoint` (`lab.run_dir` refused any with no training left). `path` is
        where it was read, so its best.pt comes along. `batch_size` is this run's data.batch_size, in case the
        checkpoint came from another global batch."""
        self.state.resume(checkpoint, batch_size)
        self.resumed_window = checkpoint.get("log_window")  # an older checkpoint has none, so its lines start afresh
        self._call("on_load_checkpoint", checkpoint)
        if path is not None:
            self.checkpoints.adopt_best(path)

    def _unfreeze(self, epoch: int) -> None:
        """From epoch `trainer.unfreeze_at_epoch` on, train the parameters model.freeze froze, BatchNorm statistics
        too. The optimizer has held them from the start (`build_optimizer(..., include_frozen=True)`) but, without
        gradients, never updated them. So its state keeps one layout for the whole run, and a resume on either side
        of the epoch is exact. DDP's reducer knows only the parameters that needed gradients when it was built, so
        the model is wrapped anew."""
        if self.cfg.unfreeze_at_epoch is None or epoch < self.cfg.unfreeze_at_epoch:
            return
        frozen = [p for p in self.model.parameters() if not p.requires_grad]
        if not frozen:
            return
        for param in frozen:
            param.requires_grad_(True)
        wrapped = self.parallel.rewrap(self.model, self.wrapped)
        if wrapped is not self.wrapped:
            self.wrapped = wrapped
            self.forward = torch.compile(wrapped) if self.cfg.compile else wrapped
        log.info("epoch %d: %d frozen parameter tensors unfrozen (trainer.unfreeze_at_epoch)", epoch + 1, len(frozen))

    def _call(self, hook: str, *args: Any) -> None:
        """Run a hook on every callback that overrides it (a callback may raise to stop the run)."""
        for method in hooks(self.callbacks, hook):
            method(self, *args)
