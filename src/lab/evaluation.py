"""Evaluation shared by training (validation, test) and the eval/export workflows: batches to the device, the
model in eval mode without autograd, exact sums in the task's metric accumulator."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lab.runtime import Precision


def to_device(
    inputs: torch.Tensor, targets: torch.Tensor, device: torch.device, channels_last: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The one place batches move to the device. non_blocking overlaps the copy with compute only when the
    loader pinned the memory (pin_memory, on CUDA)."""
    inputs = inputs.to(device, non_blocking=True)
    if channels_last and inputs.ndim == 4:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, targets.to(device, non_blocking=True)


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    loader: torch.utils.data.DataLoader,
    metrics: Any,
    *,
    device: torch.device,
    precision: Precision,
    forward: Any = None,
    limit: int = -1,
    channels_last: bool = False,
) -> Any:
    """Feed the loader through the model in eval mode (no autograd) into `metrics`, a task accumulator.

    `forward` is the callable to run (a compiled or DDP-wrapped view of `model`); the model's train/eval mode
    is restored afterwards. Returns `metrics` for the caller to `compute()`.
    """
    forward = model if forward is None else forward  # not `or`: a compiled module has no truth value
    was_training = model.training
    model.eval()
    # a distributed shard may end in padding (equal batch counts keep ranks in step): count only real samples
    remaining = getattr(loader.sampler, "num_valid", None)
    for index, (inputs, targets) in enumerate(loader):
        if 0 <= limit <= index:
            break
        inputs, targets = to_device(inputs, targets, device, channels_last)
        with precision.autocast(device):
            logits = forward(inputs)
        if remaining is not None:
            logits, targets, remaining = logits[:remaining], targets[:remaining], remaining - len(targets)
        metrics.update(logits, targets)
    model.train(was_training)
    return metrics
