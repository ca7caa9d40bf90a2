"""Does an exported model compute what the eager model computes? Outputs compared on real validation samples."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch.utils.data import DataLoader

from lab.data import batches as batching

# what parity compares against the eager model: an inference backend (lab.inference), batch in, outputs out
Runner = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Parity:
    samples: int
    batch_sizes: list[int]  # distinct batch sizes run: the traced one is not among them, so a fixed axis shows
    max_abs_diff: float  # max |outputs - eager outputs| over every sample and output
    top1_agreement: float | None  # share of decisions (argmax) that match eager's; None for tasks without one
    tolerance: float

    @property
    def passed(self) -> bool:
        return math.isfinite(self.max_abs_diff) and self.max_abs_diff <= self.tolerance

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def take(loader: DataLoader, samples: int) -> list[torch.Tensor]:
    """The first `samples` inputs of the loader (on the CPU) in its own batches, the last one possibly short."""
    batches, taken = [], 0
    for batch in loader:
        inputs, _ = batching.split(batch)
        inputs = inputs[: samples - taken].cpu()
        batches.append(inputs)
        taken += len(inputs)
        if taken >= samples:
            break
    return batches


def sample_batches(loader: DataLoader, samples: int, dynamic_dims: Sequence[int] = (0,)) -> list[torch.Tensor]:
    """The first `samples` inputs of the loader in its own batches (the last one possibly short), plus a batch of
    one (and, with a dynamic sequence axis, a shorter sequence): a size baked in at trace time shows up as a
    failure instead of passing silently."""
    batches = take(loader, samples)
    if not batches:
        raise ValueError("the validation loader is empty: no samples to check parity on")
    extra = [batches[0][:1]]
    if 1 in dynamic_dims and batches[0].shape[1] > 1:
        extra.append(batches[0][:3, : batches[0].shape[1] // 2])
    return [*batches, *extra]


def compare(
    candidate: Runner,
    batches: Sequence[torch.Tensor],
    reference: Sequence[torch.Tensor],
    tolerance: float,
    agreement: Callable[[torch.Tensor, torch.Tensor], float | None] = lambda ref, out: None,
) -> Parity:
    """Run `candidate` on `batches` and compare with the eager outputs `reference` (same order). `agreement` is
    the task's share of matching decisions in one batch (top-1 for classes and tokens), or None."""
    worst, agree, count = 0.0, 0.0, 0
    for inputs, expected in zip(batches, reference):
        got = candidate(inputs).float()
        if got.shape != expected.shape:
            return Parity(count, _sizes(batches), math.inf, 0.0, tolerance)
        diff = float((got - expected).abs().max()) if got.numel() else 0.0
        worst = diff if math.isnan(diff) else max(worst, diff)
        share = agreement(expected, got)
        agree = None if share is None else agree + share * len(inputs)
        count += len(inputs)
    return Parity(count, _sizes(batches), worst, None if agree is None else agree / max(count, 1), tolerance)


def _sizes(batches: Sequence[torch.Tensor]) -> list[int]:
    return sorted({len(b) for b in batches})
