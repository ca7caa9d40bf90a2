"""The RNG streams a checkpoint carries, so a resumed run draws the same dropout masks and augmentations."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """Return the host RNG streams and the CUDA generator of the run's own GPU (`cuda` is None off CUDA). Only one
    device's state is kept, so a resume in an allocation that sees fewer GPUs still finds its own."""
    state = np.random.get_state()
    assert isinstance(state, tuple)  # the global RandomState (MT19937) gives the legacy tuple
    kind, keys, pos, has_gauss, cached = state
    version, internal, gauss_next = random.getstate()
    return {
        "python": [version, list(internal), gauss_next],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device is not None and device.type == "cuda" else None,
    }


def restore_rng(state: dict[str, Any], device: torch.device | None = None) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if isinstance(cuda, list):  # older checkpoints kept one state per GPU that was visible then
        index = (device.index or 0) if device is not None else 0
        cuda = cuda[index] if index < len(cuda) else None
    if cuda is not None and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda, device)
