"""Split, move and slice batches in one place, for both kinds of loader (`loaders`, `device`).
A batch is an `(inputs, targets)` tuple or a dict. Its parts are tensors or nested tuples/dicts of tensors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lab.errors import ConfigError

TARGET_KEYS = ("targets", "labels")


def split(batch: Any) -> tuple[Any, Any]:
    """Split a batch into (inputs, targets). A dict batch keeps its targets under "targets" or "labels"; the other
    entries are the inputs: one tensor if only one is left, else the dict the model's forward takes."""
    # Test for tuples first: they are the common case, and Mapping is an ABC, slower to check
    if not isinstance(batch, tuple | list) and isinstance(batch, Mapping):
        key = next((k for k in TARGET_KEYS if k in batch), None)
        if key is None:
            raise ValueError(f"a dict batch needs its targets under one of {TARGET_KEYS}; it has {list(batch)}")
        inputs = {k: v for k, v in batch.items() if k != key}
        return (next(iter(inputs.values())) if len(inputs) == 1 else inputs), batch[key]
    inputs, targets = batch
    return inputs, targets


def to_device(data: Any, device: torch.device, channels_last: bool = False) -> Any:
    """Move a batch to the device, recursively. channels_last applies only to 4-d float tensors (images).
    non_blocking overlaps the copy with compute when the loader pinned the memory (on CUDA)."""
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
    """Slice the first `n` samples (dim 0) of every tensor."""
    if isinstance(data, torch.Tensor):
        return data[:n]
    if isinstance(data, Mapping):
        return {key: head(value, n) for key, value in data.items()}
    if isinstance(data, tuple | list):
        return type(data)(head(value, n) for value in data)
    return data


def size(data: Any) -> int:
    """Count the samples in a batch, the length of its first tensor."""
    if isinstance(data, torch.Tensor):
        return len(data)
    values = data.values() if isinstance(data, Mapping) else data
    return size(next(iter(values)))


def check_batch_fits(samples: int, batch_size: int) -> None:
    """Raise ConfigError unless an epoch has one full batch, since training drops the last partial one."""
    if samples < batch_size:
        raise ConfigError(
            f"data.batch_size={batch_size} is larger than the {samples} training samples, so an epoch "
            f"would have no full batch; set data.batch_size <= {samples}"
        )


def stream_seed(epoch_seed: int, position: int) -> int:
    """Seed the augmentation of the batch starting at sample `position`, from these two numbers alone, so a run
    resumed mid-epoch draws what an uninterrupted run drew there, whichever worker fetches the batch."""
    return (epoch_seed * 1_000_003 + position) % 2**63
