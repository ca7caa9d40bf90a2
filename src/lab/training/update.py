"""The gradient norm and the GradScaler step, with no host sync: both stay on the device until a log line reads
them."""

from __future__ import annotations

import torch
from torch import nn


def clip_grad_norm(model: nn.Module, max_norm: float | None) -> torch.Tensor:
    """Return the total gradient norm, after clipping to `max_norm`. With None, only measure it: clipping to inf
    would still multiply every gradient by 1."""
    if max_norm is not None:
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])


def scaled_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> torch.Tensor:
    """Step through the GradScaler and update its scale. Return whether fp16 overflow skipped the update."""
    # read the scale as a device tensor, since get_scale() copies it to the host. It drops only on a skipped step.
    scale = scaler._get_scale_async()
    assert scale is not None, "scaled_step needs an enabled GradScaler"
    before = scale.clone()
    scaler.step(optimizer)  # skips the update when fp16 gradients overflowed
    scaler.update()  # in place, so `scale` holds the new value
    return scale < before
