"""Does an exported model compute what the eager model computes? Logits compared on real validation samples."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch.utils.data import DataLoader

from lab.inference.backends import Backend


@dataclass
class Parity:
    samples: int
    batch_sizes: list[int]  # distinct batch sizes run: the traced one is not among them, so a fixed axis shows
    max_abs_diff: float  # max |logits - eager logits| over every sample and class
    top1_agreement: float  # fraction of samples whose argmax matches eager's
    tolerance: float

    @property
    def passed(self) -> bool:
        return math.isfinite(self.max_abs_diff) and self.max_abs_diff <= self.tolerance

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def sample_batches(loader: DataLoader, samples: int) -> list[torch.Tensor]:
    """The first `samples` inputs of the loader in its own batches (the last one possibly short), plus a batch of
    one: dynamic-batch bugs (a size baked in at trace time) show up as a failure instead of passing silently."""
    batches, taken = [], 0
    for inputs, _ in loader:
        batch = inputs[: samples - taken]
        batches.append(batch)
        taken += len(batch)
        if taken >= samples:
            break
    if not batches:
        raise ValueError("the validation loader is empty: no samples to check parity on")
    return [*batches, batches[0][:1]]


def compare(
    candidate: Backend, batches: Sequence[torch.Tensor], reference: Sequence[torch.Tensor], tolerance: float
) -> Parity:
    """Run `candidate` on `batches` and compare with the eager logits `reference` (same order)."""
    worst, agree, count = 0.0, 0, 0
    for inputs, expected in zip(batches, reference):
        got = candidate(inputs).float()
        if got.shape != expected.shape:
            return Parity(count, _sizes(batches), math.inf, 0.0, tolerance)
        diff = float((got - expected).abs().max()) if got.numel() else 0.0
        worst = diff if math.isnan(diff) else max(worst, diff)
        agree += int((got.argmax(1) == expected.argmax(1)).sum())
        count += len(inputs)
    return Parity(count, _sizes(batches), worst, agree / max(count, 1), tolerance)


def _sizes(batches: Sequence[torch.Tensor]) -> list[int]:
    return sorted({len(b) for b in batches})
