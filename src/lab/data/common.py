"""Pieces every dataset builder shares: the DataModule result, config checks, normalization stats and splits."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch.utils.data import Dataset, Sampler

from lab.config import DataConfig, ImageDataConfig
from lab.data import splits
from lab.errors import ConfigError

DataCfg = DataConfig | DictConfig
PoolSplitter = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

# A run's own split of the train+val pool, replacing data.val_fraction's (TrainNodeConfig.pool_splitter: a
# cross-validation fold). Set while the run builds its data; given the labels and the pool, it returns (train, val).
# The list holds it and then whether the data used it; None: no run set one.
_pool_splitter: ContextVar[list[Any] | None] = ContextVar("pool_splitter", default=None)


@contextlib.contextmanager
def splitting_pool(splitter: PoolSplitter | None) -> Iterator[Callable[[], bool]]:
    """Split the train+val pool with `splitter` (None: by data.val_fraction) while the block builds the data.
    Yields a function telling whether the data was split so: a dataset with its own val split never is."""
    state = [splitter, False]
    token = _pool_splitter.set(state)
    try:
        yield lambda: bool(state[1])
    finally:
        _pool_splitter.reset(token)


def pool_splitter() -> PoolSplitter | None:
    state = _pool_splitter.get()
    return state[0] if state else None


@dataclass
class DataModule:
    """Hold the splits of one dataset and what a model and a checkpoint need to know about it.

    `meta` holds plain Python types only, because checkpoints save it and load with `torch.load(weights_only=True)`.
    """

    train: Dataset
    val: Dataset
    test: Dataset | None
    meta: dict[str, Any]
    # How the training loader collates a batch (MixUp/CutMix use `augment.MixBatch`). None means torch's default,
    # which validation, test and evaluation loaders always use.
    train_collate: Callable[[list[Any]], Any] | None = None


class InMemoryDataset(Dataset):
    """A split held in memory as tensors, so data.loader=device can batch it on the training device.
    A dataset opts in by subclassing this and writing both methods, as the shipped images, tables and text do."""

    def fetch(self, index: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return items `index` as one batch `(x, y)` on the tensors' device.
        Random augmentation draws from `generator`, or from the global RNG when it is None."""
        raise NotImplementedError(f"{type(self).__name__} has no fetch(index, generator)")

    def to(self, device: torch.device) -> InMemoryDataset:
        """Return this split with its tensors on `device`."""
        raise NotImplementedError(f"{type(self).__name__} has no to(device)")


class OrderedDataset(Dataset):
    """A split with its own training order, such as shard by shard for locality (data=shards).
    `lab.distributed.Parallel.train_sampler` uses it instead of its shuffle. A dataset opts in by subclassing this."""

    def train_sampler(self, rank: int, world_size: int, seed: int) -> Sampler[int]:
        """Return rank `rank`'s order of the samples; together the ranks see each sample once.
        It depends on `seed` and the epoch (`set_epoch`) alone, so a resumed epoch continues it by position."""
        raise NotImplementedError(f"{type(self).__name__} has no train_sampler(rank, world_size, seed)")


def dataset_len(dataset: Dataset) -> int:
    """Return `len()` of a map-style dataset, such as a DataModule's splits.
    torch's `Dataset` declares no `__len__` (an `IterableDataset` may lack one), so type checkers refuse `len()`."""
    return len(dataset)  # type: ignore[arg-type]


def resolve_num_classes(cfg: ImageDataConfig, dataset: str, actual: int) -> int:
    if cfg.num_classes is not None and cfg.num_classes != actual:
        raise ConfigError(
            f"data.num_classes={cfg.num_classes} but {dataset} has {actual} classes; "
            f"set data.num_classes={actual} or null"
        )
    return actual


def resolve_stats(
    cfg: ImageDataConfig, in_channels: int, default_mean: Sequence[float], default_std: Sequence[float]
) -> tuple[list[float], list[float]]:
    """Return the config's mean/std when given (one value is broadcast to every channel), else the defaults."""
    if cfg.mean is None or cfg.std is None:
        return [float(m) for m in default_mean], [float(s) for s in default_std]
    mean, std = [float(m) for m in cfg.mean], [float(s) for s in cfg.std]
    for key, values in (("data.mean", mean), ("data.std", std)):
        if len(values) not in (1, in_channels):
            raise ConfigError(
                f"{key} has {len(values)} values but the images have {in_channels} channel(s); "
                f"give 1 or {in_channels} values"
            )
    return mean * (in_channels // len(mean)), std * (in_channels // len(std))


def make_meta(
    num_classes: int,
    in_channels: int,
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    class_names: Sequence[str],
    crop_pct: float | None = None,
    interpolation: str | None = None,
) -> dict[str, Any]:
    """Build an image classification dataset's meta: the keys every model reads (one sample's `input_shape`,
    `num_outputs`), plus what preprocessing (`eval_transform`) and class labels need."""
    return {
        "input_shape": [int(in_channels), int(image_size), int(image_size)],
        "num_outputs": int(num_classes),
        "num_classes": int(num_classes),
        "in_channels": int(in_channels),
        "image_size": int(image_size),
        "mean": [float(m) for m in mean],
        "std": [float(s) for s in std],
        "crop_pct": float(crop_pct if crop_pct is not None else 1.0),
        "interpolation": str(interpolation or "bilinear"),
        "class_names": [str(c) for c in class_names],
    }


def train_val_test(labels: torch.Tensor, cfg: DataCfg) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Return (train, val, test) indices by data.val_fraction, test_fraction and split_seed.
    Test is None when test_fraction is 0. Test is carved first and val from the rest, so changing val_fraction
    leaves the test split as it was."""
    if cfg.test_fraction > 0:
        rest, test = split_indices(labels, cfg.test_fraction, cfg.split_seed)
    else:
        rest, test = torch.arange(len(labels)), None
    state = _pool_splitter.get()
    if state and state[0] is not None:
        state[1] = True
        return (*state[0](labels, rest), test)
    keep, held = split_indices(labels[rest], cfg.val_fraction / (1 - cfg.test_fraction), cfg.split_seed)
    return rest[keep], rest[held], test


def split_indices(labels: torch.Tensor, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split `range(len(labels))` into (kept, held_out) with `fraction` held out.

    The split depends only on the labels, `fraction` and `seed`, never on the training seed, so a run and its
    evaluation see the same split. It is stratified by class when every class can appear on both sides.
    """
    y = labels.numpy()
    n_held = math.ceil(len(y) * fraction)
    counts = torch.bincount(labels)
    counts = counts[counts > 0]
    stratify = bool(counts.min() >= 2 and len(counts) <= min(n_held, len(y) - n_held))
    kept, held = splits.held_out(y, fraction, seed, stratify)
    # Sort so item order follows the source data, not the shuffle. numpy's sort, because torch's also allocates
    # the permutation: 8 more bytes a row, for a memory-mapped table of millions of rows
    return torch.from_numpy(np.sort(kept)), torch.from_numpy(np.sort(held))
