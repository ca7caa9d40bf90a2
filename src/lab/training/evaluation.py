"""The evaluation loop shared by training (validation, test) and the eval workflow: the model in eval mode without
autograd, batches fed into the task's exact metric accumulator."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lab.data import batches
from lab.runtime import Precision


# no_grad, not inference_mode: tensors a module allocates in its first forward and keeps (FSDP's unsharded
# parameter buffers, a model's cached rotary tables) would be inference tensors, which the next training step may
# not update in place. A run resumed at the end of an epoch validates before it trains again.
@torch.no_grad()
def accumulate_metrics(
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

    `forward` is the callable to run (a compiled or DDP-wrapped view of `model`); each module's train/eval mode
    is restored afterwards (frozen BatchNorm layers stay in eval mode while the rest trains). Returns `metrics`
    for the caller to `compute()`.
    """
    forward = model if forward is None else forward  # not `or`: a compiled module has no truth value
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    # a distributed shard may end in padding (equal batch counts keep ranks in step): count only real samples
    remaining = getattr(loader.sampler, "num_valid", None)
    for index, batch in enumerate(loader):
        if 0 <= limit <= index:
            break
        inputs, targets = batches.to_device(batches.split(batch), device, channels_last)
        with precision.autocast(device):
            outputs = forward(inputs)
        if remaining is not None:
            outputs, targets = batches.head(outputs, remaining), batches.head(targets, remaining)
            remaining -= batches.size(targets)
        metrics.update(outputs, targets)
    for module, training in modes:
        module.training = training
    return metrics


def score(
    model: nn.Module,
    forward: Any,
    loader: torch.utils.data.DataLoader,
    task: Any,
    parallel: Any,
    device: torch.device,
    precision: Precision,
    channels_last: bool = False,
    limit: int = -1,
) -> dict[str, float]:
    """The task's exact metrics over `loader`, reduced over ranks. Every rank first takes rank 0's buffers, so all
    score with the BatchNorm statistics the checkpoint will hold."""
    metrics = task.metrics(device)
    parallel.sync_buffers(model)
    accumulate_metrics(
        model,
        loader,
        metrics,
        device=device,
        precision=precision,
        forward=forward,
        limit=limit,
        channels_last=channels_last,
    )
    parallel.reduce_metrics(metrics)
    return metrics.compute()
