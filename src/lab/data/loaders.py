"""DataLoader construction with reproducible shuffling and per-worker seeding."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from lab.config import ConfigError
from lab.data.common import DataCfg


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
    1 and break BatchNorm; eval loaders keep every sample in order."""
    batch_size = cfg.batch_size if train else (cfg.eval_batch_size or cfg.batch_size)
    if train:
        n = len(sampler) if sampler is not None else len(dataset)  # type: ignore[arg-type]
        if n < batch_size:
            raise ConfigError(
                f"data.batch_size={batch_size} is larger than the {n} training samples, so an epoch "
                f"would have no full batch; set data.batch_size <= {n}"
            )
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
