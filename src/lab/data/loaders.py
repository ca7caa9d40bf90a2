"""DataLoader construction with reproducible shuffling and per-worker seeding."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler, get_worker_info

from lab.config import ConfigError
from lab.data.common import DataCfg
from lab.errors import UserError
from lab.runtime import epoch_generator_seed


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed ``random`` and ``numpy`` from this worker's torch seed.

    torch seeds each worker with ``base_seed + worker_id`` (base_seed drawn from the loader's generator).
    Recent torch versions also reseed ``random``/``numpy`` per worker, but that is an implementation detail;
    doing it here keeps numpy-based augmentation distinct per worker and reproducible per loader seed
    whatever the torch version (older ones left forked workers sharing the parent's numpy state).
    """
    seed = torch.initial_seed() % 2**32  # numpy seeds must fit in 32 bits
    random.seed(seed)
    np.random.seed(seed)


def _reseed(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


class EpochSeededSampler(Sampler):
    """The training sampler, each index tagged with its epoch's seed: ``(tag, index)``.

    Persistent DataLoader workers are seeded once, when the first iterator starts them, so their augmentation
    streams would run on across epochs and a run resumed at epoch e (fresh workers) would augment differently
    from one that never stopped. The tag travels with the indices into the workers, where
    :class:`EpochSeededDataset` reseeds once per epoch from (loader seed, epoch, worker id) alone.
    """

    def __init__(self, sampler: Sampler, seed: int) -> None:
        self.sampler, self.seed, self.epoch = sampler, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        tag = epoch_generator_seed(self.seed, self.epoch)
        return ((tag, index) for index in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]


class EpochSeededDataset(Dataset):
    """Reads ``(tag, index)`` keys from :class:`EpochSeededSampler`; a worker that sees a new tag reseeds torch,
    numpy and random with (tag, worker id) before fetching, so augmentation depends on the epoch, not the past."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.tag: int | None = None

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def _enter(self, tag: int) -> None:
        if tag != self.tag:
            info = get_worker_info()
            _reseed(tag * 1_009 + (info.id if info is not None else 0))
            self.tag = tag

    def __getitem__(self, key: tuple[int, int]) -> Any:
        tag, index = key
        self._enter(tag)
        return self.dataset[index]

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> list[Any]:
        self._enter(keys[0][0])
        indices = [index for _, index in keys]
        fetch = getattr(self.dataset, "__getitems__", None)
        return fetch(indices) if fetch is not None else [self.dataset[i] for i in indices]


def make_loader(
    dataset: Dataset,
    cfg: DataCfg,
    *,
    train: bool,
    generator: torch.Generator | None,
    pin_memory: bool,
    sampler: Sampler | None = None,
) -> DataLoader:
    """Train loaders shuffle (unless a sampler is given) and drop the last partial batch, whose size could be
    1 and break BatchNorm; eval loaders keep every sample in order. With workers, training augmentation is
    reseeded per epoch (:class:`EpochSeededSampler`); the loader's seed is ``generator``'s initial seed."""
    batch_size = cfg.batch_size if train else (cfg.eval_batch_size or cfg.batch_size)
    if train:
        n = len(sampler) if sampler is not None else len(dataset)  # type: ignore[arg-type]
        if n < batch_size:
            raise ConfigError(
                f"data.batch_size={batch_size} is larger than the {n} training samples, so an epoch "
                f"would have no full batch; set data.batch_size <= {n}"
            )
        if cfg.num_workers > 0:  # worker augmentation seeded per epoch: exact resume with workers
            sampler = EpochSeededSampler(
                sampler if sampler is not None else RandomSampler(dataset, generator=generator),
                seed=generator.initial_seed() if generator is not None else torch.initial_seed(),
            )
            dataset = EpochSeededDataset(dataset)
    if generator is None:
        # every new iterator draws its workers' base seed from this generator, or from the global RNG when there
        # is none: an evaluation loader would then shift the training stream (dropout) at every validation
        generator = torch.Generator().manual_seed(0)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=train and sampler is None,
        sampler=sampler,
        drop_last=train,
        num_workers=cfg.num_workers,
        persistent_workers=bool(cfg.persistent_workers and cfg.num_workers > 0),
        worker_init_fn=seed_worker,
        generator=generator,
        pin_memory=pin_memory,
    )


class EpochLoader:
    """The training loader as the trainer walks it: ``epoch(e, start)`` yields epoch e's batches from batch
    `start` on, in an order that depends on (seed, e) alone, so a resumed run replays exactly what an uninterrupted
    one would have seen. ``len()`` is the batches per epoch after `limit` (trainer.limit_train_batches, -1 = all)."""

    def __init__(self, loader: DataLoader, generator: torch.Generator | None, seed: int, limit: int = -1) -> None:
        self.loader, self.generator, self.seed = loader, generator, seed
        self.batches = len(loader) if limit < 0 else min(limit, len(loader))
        if self.batches == 0:
            raise UserError("the training loader yields no batch; lower data.batch_size or check the dataset")

    def __len__(self) -> int:
        return self.batches

    def epoch(self, epoch: int, start: int = 0) -> Iterator[Any]:
        if self.generator is not None:
            self.generator.manual_seed(epoch_generator_seed(self.seed, epoch))  # the shuffle of this epoch
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # DistributedSampler: a new shuffle every epoch, the same on every rank
        batches = iter(self.loader)
        for _ in range(start):  # resumed mid-epoch: skip what the checkpoint already trained on
            next(batches)
        return itertools.islice(batches, self.batches - start)
