"""data.loader=device: keep splits as tensors on the training device and batch them there, without a DataLoader.

Each split moves once; an epoch is one permutation, sliced into batches, each fetched with one gather and augmented
by batched tensor ops: no worker processes, per-sample Python, collate or host-to-device copy per step. The order is
the DataLoader path's (DistributedSampler's permutation of `epoch_generator_seed(seed, epoch)`, padded the same way,
rank r taking every r-th index), so without augmentation both loaders give the same batches. Augmentation is seeded
per batch from the rank's seed, epoch and position, so a resumed run starts at its batch without drawing anything
before it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler, Subset

from lab.data.batches import check_batch_fits, stream_seed
from lab.data.common import InMemoryDataset
from lab.errors import UserError
from lab.runtime import epoch_generator_seed

# Share of free device memory a split may take; the model, optimizer state and activations need the rest
MEMORY_SHARE = 0.5


def in_memory(dataset: Dataset, split: str) -> InMemoryDataset:
    """Return the split's tensors (a Subset's parent), refusing a split not held in memory as tensors."""
    held = dataset.dataset if isinstance(dataset, Subset) else dataset
    if not isinstance(held, InMemoryDataset):
        raise UserError(
            f"data.loader=device: the {split} split ({type(held).__name__}) is not held in memory as tensors "
            "(an InMemoryDataset of lab.data.common); use data.loader=torch"
        )
    return held


def resident(dataset: Dataset, device: torch.device, split: str) -> tuple[Any, torch.Tensor | None]:
    """Return (`dataset` on `device`, the rows it stands for or None).
    A Subset (trainer.overfit_batches) moves its parent and keeps its indices. Raises UserError when the dataset
    cannot live on the device or would not fit."""
    rows = None
    if isinstance(dataset, Subset):
        rows = torch.as_tensor(list(dataset.indices), dtype=torch.long, device=device)
    dataset = in_memory(dataset, split)
    if device.type == "cuda":
        need = sum(v.nbytes for v in vars(dataset).values() if isinstance(v, torch.Tensor))
        free, _ = torch.cuda.mem_get_info(device)
        if need > MEMORY_SHARE * free:
            raise UserError(
                f"data.loader=device: the {split} split needs {need / 2**30:.2f} GiB but {device} has "
                f"{free / 2**30:.2f} GiB free (at most {MEMORY_SHARE:.0%} of it goes to data); use data.loader=torch"
            )
    return dataset.to(device), rows


class DeviceLoader:
    """Give the training batches of a split on the device, with `EpochLoader`'s interface: `epoch(e, start)` and
    `len()`, the batches per epoch after `limit` (-1 means all). Iterating gives epoch 0."""

    def __init__(
        self,
        dataset: Dataset,
        cfg: Any,
        device: torch.device,
        *,
        seed: int,
        augment_seed: int,
        rank: int = 0,
        world_size: int = 1,
        limit: int = -1,
    ) -> None:
        self.size = len(dataset)  # type: ignore[arg-type]
        self.per_rank = math.ceil(self.size / world_size)  # DistributedSampler pads every rank to this
        check_batch_fits(self.per_rank, cfg.batch_size)
        self.dataset, self.rows = resident(dataset, device, "train")
        self.batch_size, self.device = cfg.batch_size, device
        self.seed, self.augment_seed, self.rank, self.world_size = seed, augment_seed, rank, world_size
        full = self.per_rank // self.batch_size  # drop the last partial batch, as training's DataLoader does
        self.batches = full if limit < 0 else min(limit, full)
        self.generator = torch.Generator(device=device)  # for augmentation, reseeded for every batch

    def __len__(self) -> int:
        return self.batches

    def order(self, epoch: int) -> torch.Tensor:
        """Return this rank's samples of `epoch` in order, as rows of the resident split (on the device)."""
        shuffle = torch.Generator().manual_seed(epoch_generator_seed(self.seed, epoch))
        order = torch.randperm(self.size, generator=shuffle)
        total = self.per_rank * self.world_size
        if total > self.size:  # pad with the permutation's head, so every rank has as many batches
            order = order.repeat(math.ceil(total / self.size))[:total]
        order = order[self.rank :: self.world_size].to(self.device)
        return order if self.rows is None else self.rows[order]

    def epoch(self, epoch: int, start: int = 0) -> Iterator[Any]:
        order, batch = self.order(epoch), self.batch_size
        epoch_seed = epoch_generator_seed(self.augment_seed, epoch)
        for index in range(start, self.batches):
            self.generator.manual_seed(stream_seed(epoch_seed, index * batch))
            yield self.dataset.fetch(order[index * batch : (index + 1) * batch], self.generator)

    def __iter__(self) -> Iterator[Any]:
        return self.epoch(0)


class DeviceEvalLoader:
    """Give an evaluation split on the device in `sampler`'s order (a rank's shard), keeping every sample.
    `sampler` stays an attribute because the evaluation loop reads its `num_valid` (padding excluded)."""

    def __init__(self, dataset: Dataset, batch_size: int, device: torch.device, sampler: Sampler, split: str) -> None:
        self.dataset, rows = resident(dataset, device, split)
        self.sampler, self.batch_size = sampler, batch_size
        order = torch.as_tensor(list(sampler), dtype=torch.long, device=device)  # once, as eval order is fixed
        self.order = order if rows is None else rows[order]

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self.order), self.batch_size):
            yield self.dataset.fetch(self.order[start : start + self.batch_size])
