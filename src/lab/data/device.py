"""data.loader=device: splits held as tensors on the training device, batched there without a DataLoader.

Each split is moved once; an epoch is one permutation, cut into batches by slicing and fetched with one gather, and
augmented by batched tensor ops: no worker processes, no per-sample Python, no collate, no host-to-device copy per
step. A dataset opts in by subclassing ``lab.data.common.InMemoryDataset``: ``to(device)`` (the split with its
tensors there) and ``fetch(index, generator)`` (items ``index`` as one batch, random augmentation drawn from
``generator``); the shipped in-memory datasets (images, tables, text) do.

The order is the DataLoader path's: the permutation of ``epoch_generator_seed(seed, epoch)`` that DistributedSampler
draws (padded the same way, rank r taking every r-th index), so without augmentation both loaders give the same
batches. Augmentation is seeded per batch from (rank's seed, epoch, position): a resumed run starts at its batch
without drawing anything before it, and the result does not depend on what ran before.
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

# the share of free device memory a split may take: the model, optimizer state and activations need the rest
MEMORY_SHARE = 0.5


def resident(dataset: Dataset, device: torch.device, split: str) -> tuple[Any, torch.Tensor | None]:
    """(`dataset` on `device`, the rows it stands for or None): a Subset (trainer.overfit_batches) moves its parent
    and keeps its indices. Refused in one line when the dataset cannot live there or would not fit."""
    rows = None
    if isinstance(dataset, Subset):
        rows = torch.as_tensor(list(dataset.indices), dtype=torch.long, device=device)
        dataset = dataset.dataset
    if not isinstance(dataset, InMemoryDataset):
        raise UserError(
            f"data.loader=device: the {split} split ({type(dataset).__name__}) is not held in memory as tensors "
            "(no to()/fetch()); use data.loader=torch"
        )
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
    """The training batches of a split on the device, with :class:`lab.data.EpochLoader`'s interface: ``len()``
    batches per epoch (after `limit`, -1 = all) and ``epoch(e, start)``; iterating it gives epoch 0."""

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
        full = self.per_rank // self.batch_size  # the last partial batch is dropped, as in training's DataLoader
        self.batches = full if limit < 0 else min(limit, full)
        self.generator = torch.Generator(device=device)  # augmentation; reseeded for every batch

    def __len__(self) -> int:
        return self.batches

    def order(self, epoch: int) -> torch.Tensor:
        """This rank's samples of `epoch`, in order, as rows of the resident split (on the device)."""
        shuffle = torch.Generator().manual_seed(epoch_generator_seed(self.seed, epoch))
        order = torch.randperm(self.size, generator=shuffle)
        total = self.per_rank * self.world_size
        if total > self.size:  # padded with the permutation's head, so every rank has as many batches
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
    """An evaluation split on the device, in `sampler`'s order (a rank's shard), in batches of `batch_size`, every
    sample kept. ``sampler`` stays readable: the evaluation loop takes its ``num_valid`` (padding excluded)."""

    def __init__(self, dataset: Dataset, batch_size: int, device: torch.device, sampler: Sampler, split: str) -> None:
        self.dataset, rows = resident(dataset, device, split)
        self.sampler, self.batch_size = sampler, batch_size
        order = torch.as_tensor(list(sampler), dtype=torch.long, device=device)  # once: evaluation order is fixed
        self.order = order if rows is None else rows[order]

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self.order), self.batch_size):
            yield self.dataset.fetch(self.order[start : start + self.batch_size])
