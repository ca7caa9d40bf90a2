"""Build the loaders a run reads, of the kind data.loader names, with reproducible shuffling and worker seeding."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import multiprocessing
import random
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler, Subset

from lab import upstream
from lab.data.batches import check_batch_fits, stream_seed
from lab.data.common import DataCfg, DataModule, dataset_len
from lab.data.device import DeviceEvalLoader, DeviceLoader, in_memory
from lab.errors import UserError
from lab.runtime import epoch_generator_seed


class Ranks(Protocol):
    """What the loaders need of a `lab.distributed.parallel.Parallel`, which data sits below and cannot import."""

    rank: int
    world_size: int

    def train_sampler(self, dataset: Any, seed: int) -> Sampler[int]: ...

    def eval_sampler(self, dataset: Any) -> Sampler[int]: ...


def seed_worker(worker_id: int) -> None:
    """Seed `random` and `numpy` from this worker's torch seed (the loader's `worker_init_fn`).

    torch seeds each worker with `base_seed + worker_id`, base_seed drawn from the loader's generator. Recent torch
    also reseeds `random`/`numpy` per worker, but only as an implementation detail; older versions left forked
    workers sharing the parent's numpy state. Doing it here keeps numpy augmentation distinct per worker and
    reproducible per loader seed, whatever the torch version.
    """
    seed = torch.initial_seed() % 2**32  # numpy seeds must fit in 32 bits
    random.seed(seed)
    np.random.seed(seed)


class EpochSampler(Sampler):
    """Sample one epoch of the wrapped shuffle, from sample `start` on.

    `start` lets a resumed run begin mid-epoch without loading the batches it already trained on. With workers
    (`tagged`), each index travels as `(tag, position, index)`. Persistent workers are seeded only once, so their
    own streams would run on across epochs and depend on which worker got which batch. Instead,
    `EpochSeededDataset` reseeds every batch from the epoch tag and position.
    """

    def __init__(self, sampler: Sampler, seed: int, tagged: bool) -> None:
        self.sampler, self.seed, self.tagged = sampler, seed, tagged
        self.epoch = self.start = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[int] | Iterator[tuple[int, int, int]]:
        indices = itertools.islice(self.sampler, self.start, None)
        if not self.tagged:
            return indices
        tag = epoch_generator_seed(self.seed, self.epoch)
        return ((tag, position, index) for position, index in enumerate(indices, self.start))

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]  # the whole epoch, so batches per epoch stay fixed


class EpochSeededDataset(Dataset):
    """Reseed torch, numpy and random before each batch, from the `(tag, position, index)` keys of `EpochSampler`.
    So augmentation depends on where the batch sits in the epoch, not on the worker or what it fetched before."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int, int]) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[tuple[int, int, int]]) -> list[Any]:
        tag, position, _ = keys[0]
        seed = stream_seed(tag, position)
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        indices = [index for _, _, index in keys]
        fetch = getattr(self.dataset, "__getitems__", None)
        return fetch(indices) if fetch is not None else [self.dataset[i] for i in indices]


def training_splits(datamodule: DataModule, cfg: Any, world_size: int) -> DataModule:
    """Return the splits a run reads (`cfg` is the run's config), raising ConfigError if a rank gets no full batch
    and UserError if data.loader=device cannot hold a split.
    With trainer.overfit_batches, training and validation share a few samples: a model that cannot fit them is
    wired wrong. The global batch (per device x ranks) sizes them, so each rank has its own fixed batches."""
    batch_size, batches = cfg.data.batch_size, cfg.trainer.overfit_batches
    if cfg.data.loader == "device":  # refused here, before the run's records are opened
        for split in ("train", "val", "test"):
            if getattr(datamodule, split) is not None:
                in_memory(getattr(datamodule, split), split)
    if not batches:
        check_batch_fits(math.ceil(dataset_len(datamodule.train) / world_size), batch_size)
        return datamodule
    subset = Subset(datamodule.train, range(min(dataset_len(datamodule.train), batches * batch_size * world_size)))
    return dataclasses.replace(datamodule, train=subset, val=subset)


def training_batches(datamodule: DataModule, cfg: Any, parallel: Ranks, device: torch.device) -> tuple[Any, Any]:
    """Return (what the Trainer walks each epoch, the loader the start-of-run report reads a first batch from).
    data.loader=device cuts and augments batches of a split held on the device, otherwise a DataLoader does.
    `cfg` is the run's config (its seed, data and trainer.limit_train_batches)."""
    train_set, limit = datamodule.train, cfg.trainer.limit_train_batches
    loader_seed = cfg.seed * 1000 + parallel.rank  # worker augmentation streams differ per rank
    if cfg.data.loader == "device":
        on_device = DeviceLoader(
            train_set,
            cfg.data,
            device,
            seed=cfg.seed,
            augment_seed=loader_seed,
            rank=parallel.rank,
            world_size=parallel.world_size,
            limit=limit,
        )
        return on_device, on_device
    generator = torch.Generator().manual_seed(loader_seed)
    sampler = parallel.train_sampler(train_set, seed=epoch_generator_seed(cfg.seed, 0))
    pin, collate = _pinned(cfg.data, device), datamodule.train_collate
    loader = make_loader(
        train_set, cfg.data, train=True, generator=generator, pin_memory=pin, sampler=sampler, collate=collate
    )
    return EpochLoader(loader, generator, loader_seed, limit), loader


def eval_loader(dataset: Dataset, split: str, cfg: DataCfg, parallel: Ranks, device: torch.device) -> Any:
    """Load validation/test batches of this rank's shard, with the same kind of loader as training."""
    sampler = parallel.eval_sampler(dataset)
    if cfg.loader == "device":
        return DeviceEvalLoader(dataset, cfg.eval_batch_size or cfg.batch_size, device, sampler, split)
    return make_loader(dataset, cfg, train=False, generator=None, pin_memory=_pinned(cfg, device), sampler=sampler)


def _pinned(cfg: DataCfg, device: torch.device) -> bool:
    """Return data.pin_memory, else pin on CUDA, where pinned memory speeds up asynchronous copies."""
    return cfg.pin_memory if cfg.pin_memory is not None else device.type == "cuda"


def make_loader(
    dataset: Dataset,
    cfg: DataCfg,
    *,
    train: bool,
    generator: torch.Generator | None,
    pin_memory: bool,
    sampler: Sampler | None = None,
    collate: Callable[[list[Any]], Any] | None = None,
) -> DataLoader:
    """Build a train or eval DataLoader; eval loaders keep every sample in order.
    Train loaders shuffle (unless a sampler is given) and drop the last partial batch, since a batch of 1 breaks
    BatchNorm. Their `EpochSampler` lets a resume start mid-epoch. With workers, augmentation is reseeded per batch
    from the loader's seed (`generator`'s initial seed), the epoch and the batch's position. `collate` (train only,
    e.g. MixUp/CutMix) runs in the worker right after the batch's items, so it draws from the same reseeded stream."""
    batch_size = cfg.batch_size if train else (cfg.eval_batch_size or cfg.batch_size)
    seed = generator.initial_seed() if generator is not None else torch.initial_seed()
    if generator is None:
        # Each new iterator draws its workers' base seed from this generator. Without one it would use the global
        # RNG, and every validation would shift the training stream (dropout)
        generator = torch.Generator().manual_seed(0)
    if train:
        check_batch_fits(len(sampler) if sampler is not None else len(dataset), batch_size)  # type: ignore[arg-type]
        sampler = EpochSampler(
            sampler if sampler is not None else RandomSampler(dataset, generator=generator),  # type: ignore[arg-type]
            seed=seed,
            tagged=cfg.num_workers > 0,  # without workers, augmentation uses the global RNG (checkpointed)
        )
        if cfg.num_workers > 0:
            dataset = EpochSeededDataset(dataset)
    context = None
    if cfg.num_workers > 0:
        # torch's SIGCHLD handler raises a dead worker's RuntimeError at whatever line the main process is on (inside
        # an `except`, a context manager's exit, the write of summary.json), where no handler can be sure to catch it.
        # Kept out through a private torch flag: the loader notices a dead worker itself while waiting for a batch
        # (within 5 s), and `worker_deaths` reports it there
        upstream.torch_loader_sigchld_handler_kept_out()
        # data.multiprocessing_context, else the platform's default (the first listed), not the process's current
        # one: a process started by spawn (dist=ddp's ranks) or loky (joblib's jobs) inherits that. Workers would
        # then each start a fresh interpreter importing torch (seconds per loader), or, under loky, fail to start
        context = cfg.multiprocessing_context or multiprocessing.get_all_start_methods()[0]
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,  # a train loader's sampler shuffles
        sampler=sampler,
        drop_last=train,
        num_workers=cfg.num_workers,
        persistent_workers=bool(cfg.persistent_workers and cfg.num_workers > 0),
        multiprocessing_context=context,
        worker_init_fn=seed_worker,
        generator=generator,
        pin_memory=pin_memory,
        collate_fn=collate if train else None,
    )


# How torch's DataLoader reports a dead worker in the main process, e.g.
# "DataLoader worker (pid(s) 123) exited unexpectedly"
WORKER_DIED = "DataLoader worker (pid"
# What reading a batch's shared memory from a dying worker raises before the loader notices
_BROKEN_PIPES = (ConnectionResetError, BrokenPipeError, EOFError)


@contextlib.contextmanager
def worker_deaths(next_step: str) -> Iterator[None]:
    """End the run with one UserError line when a loader worker died (OOM killer, kill -9 or a crash).
    The line says what to do next (`next_step`), instead of a traceback of whatever the main process was doing."""
    try:
        yield
    except (RuntimeError, *_BROKEN_PIPES) as err:
        if isinstance(err, RuntimeError):
            died = str(err).startswith(WORKER_DIED)
        else:  # a broken pipe raised inside torch's loader, not one of the run's own connections
            frames = traceback.walk_tb(err.__traceback__)
            died = any(str(frame.f_globals.get("__name__", "")).startswith("torch.utils.data") for frame, _ in frames)
        if not died:
            raise
        what = str(err).strip() if isinstance(err, RuntimeError) else f"the connection to it broke: {err}"
        raise UserError(
            f"a DataLoader worker process died ({what}): the kernel's OOM killer, a kill or a crash in "
            f"native code ends one so; lower data.num_workers if memory ran out; {next_step}"
        ) from err


class EpochLoader:
    """Wrap the training loader as the trainer walks it.
    `epoch(e, start)` yields epoch e's batches from batch `start` on, in an order that depends on seed and e alone.
    So a resumed run sees exactly what an uninterrupted one would have. `len()` is the batches per epoch after
    `limit` (trainer.limit_train_batches, -1 means all). A `make_loader` loader starts its sampler at `start`, so
    nothing before it is loaded. Any other loader draws and drops its first `start` batches."""

    def __init__(self, loader: DataLoader, generator: torch.Generator | None, seed: int, limit: int = -1) -> None:
        self.loader, self.generator, self.seed = loader, generator, seed
        self.batches = len(loader) if limit < 0 else min(limit, len(loader))
        if self.batches == 0:
            raise UserError("the training loader yields no batch; lower data.batch_size or check the dataset")

    def __len__(self) -> int:
        return self.batches

    def epoch(self, epoch: int, start: int = 0) -> Iterator[Any]:
        if self.generator is not None:
            self.generator.manual_seed(epoch_generator_seed(self.seed, epoch))  # this epoch's shuffle
        sampler: Any = getattr(self.loader, "sampler", None)  # a DataLoader's; another loader may have none
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # DistributedSampler: a new shuffle each epoch, the same on every rank
        skip = start  # when resumed mid-epoch, the batches the checkpoint already trained on
        if isinstance(sampler, EpochSampler):
            sampler.start, skip = start * self.loader.batch_size, 0  # type: ignore[operator]
        batches = iter(self.loader)
        for _ in range(skip):
            next(batches)
        return itertools.islice(batches, self.batches - start)
