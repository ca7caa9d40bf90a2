"""Everything a resume needs: what a checkpoint captures of training (weights, optimizer moments, the LR schedule,
the loss scale, the position, every rank's RNG streams) and how a resume restores it. The `CheckpointManager` adds
the run's config and data_meta."""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from lab.checkpointing import capture_rng, restore_rng
from lab.config.models import ModelConfig
from lab.distributed.parallel import Parallel

log = logging.getLogger(__name__)


@dataclass
class Progress:
    epoch: int = 0  # epoch in progress, 0-based
    global_step: int = 0  # optimizer steps taken
    batch_in_epoch: int = 0  # batches of `epoch` already trained on (mid-epoch checkpoints)
    best_metric: float | None = None
    best_epoch: int | None = None
    # for callback=early_stopping: validations since the monitor last beat the reference by more than min_delta
    stale_validations: int = 0
    early_stopping_reference: float | None = None

    def record(self, value: float, epoch: int, mode: str) -> bool:
        """Keep the best monitored value (`mode` is max or min). Return True if `value` is a new best; NaN never is."""
        if math.isnan(value):  # a NaN best would stay best forever, since every comparison with it is False
            return False
        sign = 1 if mode == "max" else -1
        improved = self.best_metric is None or sign * (value - self.best_metric) > 0
        if improved:
            self.best_metric, self.best_epoch = value, epoch
        return improved


@dataclass
class TrainingState:
    model: nn.Module  # the plain module, never the DDP/FSDP/compiled view, so checkpoints hold no `module.` prefix
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    parallel: Parallel
    device: torch.device  # whose CUDA generator is saved and restored
    progress: Progress = field(default_factory=Progress)
    option: ModelConfig = field(default_factory=ModelConfig)  # the model option: what its checkpoints hold

    def payload(self, consolidate: bool = True) -> dict[str, Any]:
        """Return the training state to checkpoint. It is a collective, so every rank must call it. Under FSDP the
        weights and optimizer moments are this rank's `shards` (`lab.checkpointing.sharded`), and with `consolidate`
        (best.pt, the final last.pt) rank 0 also gets the whole `model`. Elsewhere they are whole."""
        rng = self.parallel.gather(capture_rng(self.device))
        self.parallel.sync_buffers(self.model)  # rank 0 writes, and its BatchNorm statistics are the validated ones
        sharding = self.parallel.shards_checkpoints
        tensors = {"shards": self.parallel.sharded_state(self.model, self.optimizer)} if sharding else {}
        if consolidate or not sharding:
            tensors |= self.option.checkpoint_state(self.model, self.parallel.model_state(self.model))
        if not sharding:
            tensors["optimizer"] = self.parallel.optimizer_state(self.model, self.optimizer)
        return {
            **tensors,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": asdict(self.progress),
            # rank 0's streams, plus every rank's for an exact distributed resume
            "rng": {**rng[0], "per_rank": rng} if len(rng) > 1 else rng[0],
        }

    def resume(self, ckpt: dict[str, Any], batch_size: int | None = None) -> None:
        """Continue a run exactly: weights, optimizer moments, LR schedule, loss scale, position and RNG. Pass
        `batch_size` (this run's data.batch_size) when the checkpoint may come from another global batch."""
        if "shards" in ckpt:  # resharded to this run's ranks and strategy as they are read
            self.parallel.load_sharded_state(self.model, self.optimizer, ckpt["shards"])
        else:
            # if a callback put other weights in `model` (the EMA's average), training goes on from `raw_model`
            weights = self.option.restore_state(self.model, ckpt, "raw_model" if "raw_model" in ckpt else "model")
            self.parallel.load_model_state(self.model, weights)
            self.parallel.load_optimizer_state(self.model, self.optimizer, ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.progress = Progress(**ckpt["progress"])
        if batch_size is not None:
            self.progress.batch_in_epoch = epoch_position(ckpt, batch_size, self.parallel.world_size)
        per_rank = ckpt["rng"].get("per_rank")
        same_world = per_rank is not None and len(per_rank) == self.parallel.world_size
        # on another number of ranks, use rank 0's streams; dropout masks and augmentations differ from here on
        restore_rng(per_rank[self.parallel.rank] if same_world else ckpt["rng"], self.device)
        log.info(
            "resumed at epoch %d, step %d (batch %d of the epoch)",
            self.progress.epoch + 1,
            self.progress.global_step,
            self.progress.batch_in_epoch,
        )


def epoch_position(ckpt: dict[str, Any], batch_size: int, world_size: int) -> int:
    """Return the batch this run resumes from in the epoch `ckpt` was saved in. That is its `batch_in_epoch`,
    unless it was saved with another global batch (other ranks or data.batch_size). Every rank's loader takes a
    strided share of the epoch's one permutation, so the saved run had taken its first batch_in_epoch x global
    batch samples. This run skips that many, rounded down to its own batches: a few samples are seen twice rather
    than any missed."""
    position, per_rank = ckpt["progress"]["batch_in_epoch"], ckpt["rng"].get("per_rank")
    saved = (ckpt["config"]["data"]["batch_size"], len(per_rank) if per_rank is not None else 1)
    if saved[0] * saved[1] == batch_size * world_size:
        return position
    batches = position * saved[0] * saved[1] // (batch_size * world_size)
    log.warning(
        "resuming with %d ranks x batch %d from a checkpoint of %d x %d: the epoch goes on after %d batches (it had "
        "taken %d); the effective batch (and, with dist.lr_scaling, the lr) is this run's",
        world_size,
        batch_size,
        saved[1],
        saved[0],
        batches,
        position,
    )
    return batches
