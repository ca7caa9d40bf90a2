"""The warmup-stable-decay multiplier after warmup: 1 until the decay starts, then down to min_lr_ratio at the end.

These are plain functions (see lab.optim.warmup_lambda), so a resumed run follows its current config."""

from __future__ import annotations

import math
from collections.abc import Callable

SHAPES: dict[str, Callable[[float], float]] = {  # progress through the decay (0 to 1) -> fraction of the way down
    "linear": lambda progress: progress,
    "cosine": lambda progress: 0.5 * (1 - math.cos(math.pi * progress)),
    "sqrt": math.sqrt,  # 1 - sqrt: Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed ..."
}


def decay_length(total_after_warmup: int, total_steps: int, fraction: float | None, steps: int | None) -> int:
    """Return the decay's length: `steps`, else `fraction` of the run (default 0.2), at most the steps after warmup."""
    wanted = steps if steps is not None else round((0.2 if fraction is None else fraction) * total_steps)
    return max(1, min(wanted, total_after_warmup))


def wsd_decay(total_after_warmup: int, decay_steps: int, min_lr_ratio: float, shape: str) -> Callable[[int], float]:
    """Return the multiplier of a step after warmup: 1 while stable, then `shape` from 1 to min_lr_ratio.

    The decay covers the last `decay_steps`. Its first step is still at the peak and its last at min_lr_ratio, as
    in lab.optim's cosine."""
    stable, down = total_after_warmup - decay_steps, SHAPES[shape]

    def multiplier(done: int) -> float:
        if done < stable:
            return 1.0
        progress = min(1.0, (done - stable) / max(1, decay_steps - 1))
        return 1 - (1 - min_lr_ratio) * down(progress)

    return multiplier
