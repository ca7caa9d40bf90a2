"""The training loop: autocast, loss scaling, accumulation, clipping, validation, best tracking, checkpoints.

It knows nothing of classification: the task supplies the loss and the metrics. Host-device syncs happen only at
logging, validation and checkpoint time, so the step itself runs as fast as a hand-written loop.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from tqdm import tqdm

from lab import checkpoint
from lab.batches import size as batch_size
from lab.batches import split as split_batch
from lab.batches import to_device
from lab.distributed.parallel import Parallel
from lab.errors import UserError
from lab.evaluation import evaluate
from lab.optim import WarmupPlateau
from lab.runtime import Precision, epoch_generator_seed, peak_memory_mb, reset_peak_memory
from lab.step_window import StepWindow
from lab.tracking import Tracker
from lab.training_state import Progress, TrainingState

log = logging.getLogger(__name__)
# With fp16 the GradScaler skips the optimizer step when gradients overflowed (the first steps, typically) while the
# schedule still advances one step: intended, so torch's warning about the order would only mislead.
warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`")


def batches_per_epoch(loader: torch.utils.data.DataLoader, limit: int) -> int:
    """Training batches per epoch after `trainer.limit_train_batches` (-1 = all)."""
    batches = len(loader) if limit < 0 else min(limit, len(loader))
    if batches == 0:
        raise UserError("the training loader yields no batch; lower data.batch_size or check the dataset")
    return batches


class Trainer:
    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        task: Any,
        train_loader: torch.utils.data.DataLoader,
        val_loader: torch.utils.data.DataLoader | None,
        device: torch.device,
        precision: Precision,
        trainer_cfg: Any,
        tracker: Tracker,
        run_dir: Path,
        checkpoint_extras: dict[str, Any],
        seed: int,
        train_generator: torch.Generator | None,
        callbacks: Sequence[Any] = (),
        forward: nn.Module | None = None,
        parallel: Parallel | None = None,
    ) -> None:
        # A plain dataclass, not a DictConfig: OmegaConf attribute access costs microseconds, several per step.
        self.cfg = OmegaConf.to_object(trainer_cfg) if isinstance(trainer_cfg, DictConfig) else trainer_cfg
        self.model = model  # the plain module: what checkpoints hold
        self.parallel = parallel or Parallel()
        # the DDP / FSDP view of the model (the model itself in one process)
        self.wrapped = model if forward is None else forward
        self.optimizer, self.scheduler, self.task = optimizer, scheduler, task
        self.train_loader, self.val_loader = train_loader, val_loader
        self.device, self.precision = device, precision
        self.tracker = tracker
        self.ckpt_dir = Path(run_dir) / "checkpoints"
        self.seed, self.train_generator = seed, train_generator
        self.callbacks = list(callbacks)
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision.grad_scaler)
        self.state = TrainingState(model, optimizer, scheduler, self.scaler, self.parallel, device, checkpoint_extras)
        # fp16 steps the GradScaler skipped, counted on the device: reading the scale every step would sync
        self.skipped_steps = torch.zeros((), dtype=torch.int64, device=device)
        self.last_val: dict[str, float] = {}
        self.window = StepWindow()
        self.forward = torch.compile(self.wrapped) if trainer_cfg.compile else self.wrapped
        self.batches_per_epoch = batches_per_epoch(train_loader, trainer_cfg.limit_train_batches)
        self.bar_enabled = {"on": True, "off": False, "auto": sys.stderr.isatty()}[trainer_cfg.progress_bar]

    # ------------------------------------------------------------------ public
    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        self.window = StepWindow()
        reset_peak_memory(self.device)  # the peak of training alone: not the model summary, not a previous job
        with torch.autograd.set_detect_anomaly(cfg.detect_anomaly):
            for epoch in range(self.progress.epoch, cfg.max_epochs):
                self.progress.epoch = epoch
                finished = self.train_epoch(epoch)
                last = self._done() or epoch == cfg.max_epochs - 1
                improved = False
                if self.val_loader is not None and ((epoch + 1) % cfg.val_every_n_epochs == 0 or last):
                    improved = self._validate_and_track(epoch)
                if finished:
                    self.progress.epoch, self.progress.batch_in_epoch = epoch + 1, 0
                self._save_checkpoints(best=improved)
                if self._done():
                    break
        summary = self.summary()
        self._call("on_fit_end", summary)
        return summary

    def evaluate(self, loader: torch.utils.data.DataLoader, limit: int = -1) -> dict[str, float]:
        """Exact metrics over the loader (eval mode, no autograd); restores the previous mode."""
        metrics = self.task.metrics(self.device)
        self.parallel.sync_buffers(self.model)  # every rank scores with the statistics the checkpoint will hold
        evaluate(
            self.model,
            loader,
            metrics,
            device=self.device,
            precision=self.precision,
            # the plain module: DDP's forward would sync buffers; FSDP's module is the model itself
            forward=self.model if self.parallel.strategy == "ddp" else self.forward,
            limit=limit,
            channels_last=self.cfg.channels_last,
        )
        self.parallel.reduce_metrics(metrics)
        return metrics.compute()

    def summary(self) -> dict[str, Any]:
        monitor = f"val/{self.task.monitor}"
        out = {
            f"{monitor}_best": self.progress.best_metric,
            "best_epoch": self.progress.best_epoch,
            "global_step": self.progress.global_step,
            "epochs": self.progress.epoch,
        }
        out.update(self.last_val)
        if self.scaler.is_enabled():
            out["train/skipped_steps"] = int(self.skipped_steps)
        return out

    @property
    def progress(self) -> Progress:
        return self.state.progress  # replaced when a checkpoint is loaded

    def _call(self, hook: str, *args: Any) -> None:
        """Run a hook on every callback that has it (a callback may raise to stop the run, e.g. pruning)."""
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(self, *args)

    # ------------------------------------------------------------------ training
    def _done(self) -> bool:
        return 0 < self.cfg.max_steps <= self.progress.global_step

    def train_epoch(self, epoch: int) -> bool:
        """One pass over the training loader; False when max_steps stopped it early."""
        self.model.train()
        if self.train_generator is not None:
            # Reseeded per epoch so the order depends on (seed, epoch) only: resume replays it exactly.
            self.train_generator.manual_seed(epoch_generator_seed(self.seed, epoch))
        sampler = getattr(self.train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # DistributedSampler: a new shuffle every epoch, the same on every rank
        accum, total = self.cfg.grad_accum_steps, self.batches_per_epoch
        position = self.progress.batch_in_epoch  # resumed mid-epoch: a group boundary of the same order
        batches = iter(self.train_loader)
        for _ in range(position):  # skip what the checkpoint already trained on
            next(batches)
        bar = tqdm(
            total=total,
            initial=position,
            desc=f"epoch {epoch + 1}/{self.cfg.max_epochs}",
            leave=False,
            disable=not self.bar_enabled,
            dynamic_ncols=True,
        )
        while position < total:
            group = [self._next_batch(batches) for _ in range(min(accum, total - position))]  # the last may be short
            self.train_step(group)
            position += len(group)
            bar.update(len(group))
            self.progress.batch_in_epoch = position
            step = self.progress.global_step
            if step % self.cfg.log_every_n_steps == 0:
                self._log_window(epoch, bar)
            if self.cfg.ckpt_every_n_steps and step % self.cfg.ckpt_every_n_steps == 0:
                self._save_checkpoints(best=False)
            if self._done():
                bar.close()
                return position == total
        bar.close()
        return True

    def train_step(self, group: list[tuple[Any, Any]]) -> None:
        """One optimizer step over the micro-batches of an accumulation group.

        Each micro-batch's summed loss is divided by the weight (samples, or unmasked tokens) of the whole group
        averaged over ranks, so the gradient equals that of one large batch even when micro-batches carry
        different token counts; DDP/FSDP then average over ranks. No host sync: all of it stays on the device.
        """
        weights = [self.task.weight(targets) for _, targets in group]
        total = self.parallel.mean_over_ranks(weights[0] if len(group) == 1 else torch.stack(weights).sum())
        # backward seeded with 1/total instead of differentiating loss / total: no extra autograd node per step
        inverse_total = total.reciprocal()
        for index, (inputs, targets) in enumerate(group):
            # no gradient all-reduce until the group's last micro-batch (DDP no_sync / FSDP sync off)
            with self.parallel.accumulation(self.wrapped, sync=index == len(group) - 1):
                with self.precision.autocast(self.device):
                    outputs = self.forward(inputs)
                loss = self.task.loss(outputs, targets)  # summed, fp32
                self.scaler.scale(loss).backward(inverse_total)
            self.window.add(loss, weights[index], step=self.progress.global_step + 1, samples=batch_size(targets))
        self._optimizer_step()

    def _next_batch(self, batches: Iterator[Any]) -> tuple[Any, Any]:
        fetch_start = time.perf_counter()
        batch = to_device(split_batch(next(batches)), self.device, self.cfg.channels_last)
        self.window.data_time += time.perf_counter() - fetch_start
        return batch

    def _optimizer_step(self) -> None:
        cfg = self.cfg
        logging_now = (self.progress.global_step + 1) % cfg.log_every_n_steps == 0
        # the scale as a device tensor (get_scale() would copy it to the host): it drops only when a step is skipped
        scale_before = self.scaler._get_scale_async().clone() if self.scaler.is_enabled() else None
        if cfg.grad_clip is not None or logging_now:
            # Gradients must be unscaled before their norm means anything (and before clipping).
            self.scaler.unscale_(self.optimizer)
            max_norm = cfg.grad_clip if cfg.grad_clip is not None else float("inf")
            self.window.grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.scaler.step(self.optimizer)  # skips the update when fp16 gradients overflowed
        self.scaler.update()
        if scale_before is not None:
            self.skipped_steps += self.scaler._get_scale_async() < scale_before
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.progress.global_step += 1

    def _check_losses(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The window's per-micro-batch losses (averaged over ranks); stop at the first non-finite one, unless a
        GradScaler skips such steps itself. Every rank sees the same values, so every rank stops."""
        losses, weights = self.window.losses_over_ranks(self.parallel)
        bad = (~torch.isfinite(losses)).nonzero()
        if len(bad) and not self.scaler.is_enabled():
            index = int(bad[0])
            raise UserError(
                f"loss became {losses[index].item()} at optimizer step {self.window.steps[index]} "
                f"(epoch {self.progress.epoch + 1}); lower optimizer.lr, set trainer.grad_clip, try precision=bf16 "
                "or fp32, or check the inputs (the first-batch report in the log)"
            )
        return losses, weights

    def _log_window(self, epoch: int, bar: tqdm) -> None:
        loss = self.window.mean_loss(*self._check_losses())
        throughput, data_wait = self.window.rates(self.parallel.world_size)
        metrics = {
            "train/loss": loss,
            "train/lr": self.scheduler.get_last_lr()[0],
            "train/grad_norm": self.window.grad_norm_value(),
            "train/throughput": throughput,
            "train/data_wait": data_wait,
            "train/mem_peak_mb": peak_memory_mb(self.device),
        }
        if self.scaler.is_enabled():
            metrics["train/grad_scale"] = self.scaler.get_scale()
            metrics["train/skipped_steps"] = int(self.skipped_steps)
        step = self.progress.global_step
        self.tracker.log(metrics, step=step, epoch=epoch + 1)
        if bar.disable:
            log.info(
                "epoch %d step %d  loss %.4f  lr %.3g  grad_norm %.3g  %.0f samples/s  data %.0f%%",
                epoch + 1,
                step,
                loss,
                metrics["train/lr"],
                metrics["train/grad_norm"],
                throughput,
                100 * data_wait,
            )
        else:
            bar.set_postfix(loss=f"{loss:.4f}", lr=f"{metrics['train/lr']:.2e}", refresh=False)
        self.window = StepWindow()
        reset_peak_memory(self.device)  # each logged peak covers its own window

    # ------------------------------------------------------------------ validation and checkpoints
    def _validate_and_track(self, epoch: int) -> bool:
        with self.window.paused():
            metrics = {f"val/{k}": v for k, v in self.evaluate(self.val_loader, self.cfg.limit_val_batches).items()}
        monitor = f"val/{self.task.monitor}"
        if monitor not in metrics:
            raise UserError(
                f"task.monitor={self.task.monitor!r} is not a validation metric; choose one of {', '.join(metrics)}"
            )
        improved = self.progress.record(metrics[monitor], epoch + 1, self.task.mode)
        metrics[f"{monitor}_best"] = self.progress.best_metric
        if isinstance(self.scheduler, WarmupPlateau):
            self.scheduler.step_validation(metrics)
        self.last_val = metrics
        reset_peak_memory(self.device)  # validation's activations are not training's peak
        self.tracker.log(metrics, step=self.progress.global_step, epoch=epoch + 1)
        log.info(
            "epoch %d/%d step %d  %s",
            epoch + 1,
            self.cfg.max_epochs,
            self.progress.global_step,
            "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
        )
        self._call("on_validation_end", metrics, epoch + 1)
        return improved

    def _save_checkpoints(self, best: bool) -> None:
        with self.window.paused():
            self._check_losses()  # never write weights that went NaN over good ones
            payload = self.state.payload()
            if self.parallel.is_main:  # one writer; the others wait so nobody reads a half-written file
                last = self.ckpt_dir / "last.pt"
                checkpoint.save(last, payload)
                if best:
                    checkpoint.copy(last, self.ckpt_dir / "best.pt")
            self.parallel.barrier()
