"""The warmup-stable-decay multiplier after warmup: 1 until the decay starts, then down to min_lr_ratio at the run's
last step. Plain functions (lab.optim.warmup_lambda): a resumed run follows its current config from where it stopped."""

from __future__ import annotations

import math
from collections.abc import Callable

SHAPES: dict[str, Callable[[float], float]] = {  # progress through the decay (0 to 1) -> fraction of the way down
    "linear": lambda progress: progress,
    "cosine": lambda progress: 0.5 * (1 - math.cos(math.pi * progress)),
    "sqrt": math.sqrt,  # 1 - sqrt: Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed ..."
}


def decay_length(total_after_warmup: int, total_steps: int, fraction: float | None, steps: int | None) -> int:
    """The decay's length in steps: `steps`, else `fraction` of the run (0.2 when neither is set); never longer
    than what follows the warmup (then the decay starts right after it)."""
    wanted = steps if steps is not None else round((0.2 if fraction is None else fraction) * total_steps)
    return max(1, min(wanted, total_after_warmup))


def wsd_decay(total_after_warmup: int, decay_steps: int, min_lr_ratio: float, shape: str) -> Callable[[int], float]:
    """Multiplier per step after warmup: 1 for the stable part, then `shape` from 1 to min_lr_ratio over the last
    `decay_steps` (the first decay step still at the peak, the last one at min_lr_ratio, as lab.optim's cosine)."""
    stable, down = total_after_warmup - decay_steps, SHAPES[shape]

    def multiplier(done: int) -> float:
        if done < stable:
            return 1.0
        progress = min(1.0, (done - stable) / max(1, decay_steps - 1))
        return 1 - (1 - min_lr_ratio) * down(progress)

    return multiplier
