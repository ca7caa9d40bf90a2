"""Check that an exported model computes what the eager model computes, on real validation samples."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from lab.data import batches as batching
from lab.errors import UserError
from lab.exporting.writers import axis_limit, check_dims
from lab.tasks import outputs as model_outputs

# an inference backend (lab.inference) to compare with the eager model: a batch in, the model's outputs out
Runner = Callable[[torch.Tensor], Any]


@dataclass
class Parity:
    samples: int
    batch_sizes: list[int]  # distinct batch sizes run; one differs from the traced size, so a fixed axis shows
    max_abs_diff: float  # max |outputs - eager outputs| over every sample and output
    top1_agreement: float | None  # share of argmax decisions that match eager's; None for tasks without one
    tolerance: float
    input_shapes: list[list[int]] = field(default_factory=list)  # distinct per-sample input shapes run
    error: str | None = None  # first line of the runner's error on an input, say a size baked in at export
    # for a model with several outputs, max |diff| of each by name (max_abs_diff is the largest); else None
    max_abs_diff_per_output: dict[str, float] | None = None

    @property
    def passed(self) -> bool:
        return math.isfinite(self.max_abs_diff) and self.max_abs_diff <= self.tolerance

    def as_dict(self) -> dict:
        figures = asdict(self)
        if self.max_abs_diff_per_output is None:  # a one-tensor model's entry keeps its old keys
            del figures["max_abs_diff_per_output"]
        return {**figures, "passed": self.passed}


def take(loader: DataLoader, samples: int) -> list[torch.Tensor]:
    """Return the loader's first `samples` inputs on the CPU, in its own batches; the last may be short."""
    batches, taken = [], 0
    for batch in loader:
        inputs, _ = batching.split(batch)
        if not isinstance(inputs, torch.Tensor):
            what = f"a dict of {', '.join(inputs)}" if isinstance(inputs, dict) else type(inputs).__name__
            raise UserError(
                f"export traces a model that takes one input tensor, and this data gives {what}: put them in one "
                "tensor (a mask as a feature or channel), or export the checkpoint's model with your own script"
            )
        inputs = inputs[: samples - taken].cpu()
        batches.append(inputs)
        taken += len(inputs)
        if taken >= samples:
            break
    return batches


def sample_batches(loader: DataLoader, samples: int, dynamic_dims: Sequence[int] = (0,)) -> list[torch.Tensor]:
    """Return the loader's first `samples` inputs, plus a batch of one and, per other dynamic axis, a batch of 3
    resized there (`other_size`), so a size baked in at export fails parity instead of passing silently."""
    batches = take(loader, samples)
    if not batches:
        raise ValueError("the validation loader is empty: no samples to check parity on")
    first = batches[0]
    check_dims(first, tuple(dynamic_dims))
    extra = [first[:1]]
    for dim in sorted(d for d in dynamic_dims if d != 0):
        resized = other_size(first[:3], dim)
        if resized is not None:
            extra.append(resized)
    return [*batches, *extra]


def other_size(inputs: torch.Tensor, dim: int) -> torch.Tensor | None:
    """Return `inputs` at another size along `dim`, or None for a sequence of one: a token sequence (bounded by the
    traced length) cut to half, other axes doubled by nearest-neighbour upsampling (a strided model still divides)."""
    if axis_limit(inputs, dim) is not None:
        return inputs.narrow(dim, 0, inputs.shape[dim] // 2) if inputs.shape[dim] > 1 else None
    return inputs.repeat_interleave(2, dim=dim)


def compare(
    candidate: Runner,
    batches: Sequence[torch.Tensor],
    reference: Sequence[Any],
    tolerance: float,
    agreement: Callable[[Any, Any], float | None] = lambda ref, out: None,
    layout: model_outputs.Layout | None = None,
) -> Parity:
    """Run `candidate` on `batches` and compare with the eager outputs `reference`, in the same order.

    `agreement` gives the task's share of matching decisions in a batch (top-1 for classes and tokens), or None. An
    input the candidate fails on, or outputs of another shape or structure, fail parity (max |diff| = inf) with the
    reason in `error`. Several outputs are compared one by one, each under its name in `layout`."""
    count = 0
    agree: float | None = 0.0  # None once a batch has no agreement
    sizes = sorted({len(b) for b in batches})
    shapes = [list(shape) for shape in sorted({tuple(b.shape[1:]) for b in batches})]
    layout = layout or model_outputs.check(reference[0])
    each = dict.fromkeys(layout.names, 0.0)  # max |diff| per output
    for inputs, expected in zip(batches, reference):
        try:
            got = model_outputs.apply(torch.Tensor.float, candidate(inputs))
        except Exception as err:  # onnxruntime, torch.export guards, a traced constant: it cannot run this input
            problem = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        else:
            problem = _mismatch(got, expected, layout)
        if problem:
            failed = None if layout.single else dict.fromkeys(each, math.inf)
            error = f"inputs of shape {tuple(inputs.shape)}: {problem}"
            return Parity(count, sizes, math.inf, 0.0, tolerance, shapes, error, failed)
        for name, out, ref in zip(layout.names, model_outputs.tensors(got), model_outputs.tensors(expected)):
            diff = float((out - ref).abs().max()) if out.numel() else 0.0
            each[name] = diff if math.isnan(diff) else max(each[name], diff)  # a NaN stays, so the check fails
        share = agreement(expected, got)
        agree = None if share is None or agree is None else agree + share * len(inputs)
        count += len(inputs)
    worst = math.nan if any(map(math.isnan, each.values())) else max(each.values())
    share = None if agree is None else agree / max(count, 1)
    return Parity(count, sizes, worst, share, tolerance, shapes, None, None if layout.single else each)


def _mismatch(got: Any, expected: Any, layout: model_outputs.Layout) -> str:
    """Return why `got` cannot be compared with eager's `expected` (another structure or shape), or ""."""
    if model_outputs.kind(got) != model_outputs.kind(expected):
        return f"outputs {model_outputs.kind(got)}, eager's {model_outputs.kind(expected)}"
    for name, out, ref in zip(layout.names, model_outputs.tensors(got), model_outputs.tensors(expected)):
        if out.shape != ref.shape:
            which = "outputs" if layout.single else f"output {name!r}"
            return f"{which} {tuple(out.shape)}, eager's {tuple(ref.shape)}"
    return ""
