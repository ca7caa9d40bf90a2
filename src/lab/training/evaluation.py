"""The evaluation loop, shared by training (validation, test) and the eval workflow."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lab.data import batches
from lab.runtime import Precision


# no_grad, not inference_mode. Tensors a module allocates in its first forward and keeps (FSDP's unsharded
# parameter buffers, cached rotary tables) would become inference tensors, which the next training step cannot
# update in place. A run resumed at the end of an epoch validates before it trains again.
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
    """Feed the loader through `forward` (`model`, or a compiled or DDP-wrapped view of it) in eval mode into the
    task accumulator `metrics`, and return it. Each module's train/eval mode is restored afterwards, so frozen
    BatchNorm layers stay in eval mode while the rest trains."""
    forward = model if forward is None else forward  # not `or`: a compiled module has no truth value
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    # a distributed shard may end in padding, which keeps ranks in step; count only the real samples
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
    """Return the task's exact metrics over `loader`, reduced over ranks. Every rank first takes rank 0's buffers,
    so all score with the BatchNorm statistics the checkpoint will hold."""
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
