"""scheduler=wsd: the lr at the warmup's end, through the stable part, at the decay's start and at the last step,
for each decay shape and both ways of sizing the decay; its refusals."""

from __future__ import annotations

import math

import pytest
import torch

from lab.config import ConfigError
from lab.extensions.muon.options import WsdConfig


def _lrs(option: WsdConfig, total_steps: int) -> list[float]:
    """The lr (peak 1) of each of the run's optimizer steps."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = option.build(optimizer, total_steps)
    lrs = []
    for _ in range(total_steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return lrs


@pytest.mark.parametrize(("decay", "middle"), [("linear", 0.55), ("cosine", 0.55), ("sqrt", 1 - 0.9 * math.sqrt(0.5))])
def test_warmup_stable_then_decay_over_the_last_fifth(decay, middle) -> None:
    # 100 steps: warmup 10, stable 70 (steps 10-79), decay 20 (steps 80-99) to 0.1
    lrs = _lrs(WsdConfig(warmup_steps=10, min_lr_ratio=0.1, decay=decay), 100)
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # warmup's first and last step
    assert lrs[10:81] == [1.0] * 71  # stable, and the decay's first step still at the peak
    assert lrs[81] < 1.0 and lrs[99] == pytest.approx(0.1)  # down to min_lr_ratio at the last step
    if decay == "cosine":
        middle = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 9.5 / 19))
    assert (lrs[89] + lrs[90]) / 2 == pytest.approx(middle, abs=0.03)  # halfway through the decay


@pytest.mark.parametrize("keys", [{"decay_fraction": 0.5}, {"decay_steps": 50}])
def test_the_decay_is_sized_by_fraction_or_by_steps(keys) -> None:
    lrs = _lrs(WsdConfig(warmup_steps=0, **keys), 100)
    assert lrs[:51] == [1.0] * 51 and lrs[51] < 1.0 and lrs[99] == 0.0


def test_a_decay_longer_than_the_run_starts_after_warmup() -> None:
    lrs = _lrs(WsdConfig(warmup_steps=5, decay_steps=1000), 20)
    assert lrs[5] == 1.0 and lrs[6] < 1.0 and lrs[19] == 0.0


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"decay_fraction": 0.2, "decay_steps": 10}, r"scheduler.decay_fraction=0.2 and scheduler.decay_steps=10 both"),
        ({"decay_fraction": 0.0}, r"scheduler.decay_fraction must be in \(0, 1\], got 0.0"),
        ({"decay_steps": 0}, r"scheduler.decay_steps must be in \[1, inf\), got 0"),
        ({"decay": "exp"}, r"scheduler.decay"),
        ({"min_lr_ratio": 1.5}, r"scheduler.min_lr_ratio must be in \[0, 1\], got 1.5"),
    ],
)
def test_bad_keys_are_refused(keys, message) -> None:
    with pytest.raises(ConfigError, match=message):
        WsdConfig(**keys)
