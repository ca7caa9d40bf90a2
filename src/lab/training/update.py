"""One optimizer update from the accumulated gradients: unscale them (fp16), clip them or only measure their norm,
and step through the GradScaler, telling whether fp16 overflow made it skip the update. No host sync: the norm and
the skip stay on the device until a log line reads them."""

from __future__ import annotations

import torch
from torch import nn


def apply_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    grad_clip: float | None,
    measure_norm: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(the gradient norm when clipped or `measure_norm`, else None; whether the GradScaler skipped this update as a
    device bool, None without a GradScaler)."""
    norm = None
    if grad_clip is not None or measure_norm:
        scaler.unscale_(optimizer)  # the norm means something (and clipping works) only unscaled
        if grad_clip is not None:
            norm = nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        else:  # the norm alone: clip_grad_norm_(inf) would also multiply every gradient by 1
            norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    if not scaler.is_enabled():
        optimizer.step()
        return norm, None
    # the scale as a device tensor (get_scale() would copy it to the host): it drops only on a skipped step
    scale_before = scaler._get_scale_async().clone()
    scaler.step(optimizer)  # skips the update when fp16 gradients overflowed
    scaler.update()
    return norm, scaler._get_scale_async() < scale_before
