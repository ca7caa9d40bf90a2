"""Batches as the loaders give them: ``(inputs, targets)`` tuples or dicts, whose parts are tensors or nested
tuples/dicts of tensors. One place splits them, moves them to the device and slices them; what an epoch needs of
them, and the augmentation seed of each (both kinds of loader: ``loaders``, ``device``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lab.errors import ConfigError

TARGET_KEYS = ("targets", "labels")


def split(batch: Any) -> tuple[Any, Any]:
    """(inputs, targets). A dict batch keeps its targets under "targets" (or "labels"); its other entries are the
    inputs (the one tensor when a single entry is left, else the dict the model's forward takes)."""
    # tuples are tested first: the common case, and Mapping is an ABC, slower to test against
    if not isinstance(batch, tuple | list) and isinstance(batch, Mapping):
        key = next((k for k in TARGET_KEYS if k in batch), None)
        if key is None:
            raise ValueError(f"a dict batch needs its targets under one of {TARGET_KEYS}; it has {list(batch)}")
        inputs = {k: v for k, v in batch.items() if k != key}
        return (next(iter(inputs.values())) if len(inputs) == 1 else inputs), batch[key]
    inputs, targets = batch
    return inputs, targets


def to_device(data: Any, device: torch.device, channels_last: bool = False) -> Any:
    """The one place batches move to the device, recursively. non_blocking overlaps the copy with compute when
    the loader pinned the memory (pin_memory, on CUDA). channels_last applies to 4-d float tensors (images)."""
    if isinstance(data, torch.Tensor):
        data = data.to(device, non_blocking=True)
        if channels_last and data.ndim == 4 and data.is_floating_point():
            data = data.contiguous(memory_format=torch.channels_last)
        return data
    if isinstance(data, tuple | list):
        return type(data)([to_device(value, device, channels_last) for value in data])
    if isinstance(data, Mapping):
        return {key: to_device(value, device, channels_last) for key, value in data.items()}
    return data


def head(data: Any, n: int) -> Any:
    """The first ``n`` samples of every tensor (dim 0)."""
    if isinstance(data, torch.Tensor):
        return data[:n]
    if isinstance(data, Mapping):
        return {key: head(value, n) for key, value in data.items()}
    if isinstance(data, tuple | list):
        return type(data)(head(value, n) for value in data)
    return data


def size(data: Any) -> int:
    """Samples in a batch: the length of its first tensor."""
    if isinstance(data, torch.Tensor):
        return len(data)
    values = data.values() if isinstance(data, Mapping) else data
    return size(next(iter(values)))


def check_batch_fits(samples: int, batch_size: int) -> None:
    """Training drops the last partial batch: an epoch needs at least one full one."""
    if samples < batch_size:
        raise ConfigError(
            f"data.batch_size={batch_size} is larger than the {samples} training samples, so an epoch "
            f"would have no full batch; set data.batch_size <= {samples}"
        )


def stream_seed(epoch_seed: int, position: int) -> int:
    """Augmentation seed of the batch that starts at sample `position` of an epoch: a function of the two alone, so
    a resumed run that starts mid-epoch draws what an uninterrupted one drew there, whichever worker fetches it."""
    return (epoch_seed * 1_000_003 + position) % 2**63
