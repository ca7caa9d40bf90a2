"""A test's callback: keeps the checkpoint an epoch ended with, as `checkpoints/epoch<n>.pt`, so that one run gives
both the uninterrupted result and a checkpoint to resume from (what a run stopped after epoch n would have left).

last.pt is written after validation: when epoch n + 1's validation ends it still holds epoch n's end. Rank 0 copies
it (under DDP/FSDP it alone writes checkpoints). The callback draws no random numbers: the run stays bit-identical.
A sharded last.pt (FSDP) names its shard directory, which the run replaces at its next save: that directory is
copied too, to `checkpoints/kept/`, and the copy names it."""

from __future__ import annotations

import shutil

import torch

from lab.training.callbacks import Callback


class KeepCheckpoint(Callback):
    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_validation_end(self, trainer, metrics, epoch) -> None:
        if epoch == self.epoch + 1 and trainer.parallel.rank == 0:
            last = trainer.checkpoints.last
            kept = last.with_name(f"epoch{self.epoch}.pt")
            ckpt = torch.load(last, weights_only=True)
            if "shards" not in ckpt:
                shutil.copyfile(last, kept)
                return
            copy = f"kept/epoch{self.epoch}"
            shutil.copytree(last.parent / ckpt["shards"], last.parent / copy)
            torch.save({**ckpt, "shards": copy}, kept)
