"""Does an exported model compute what the eager model computes? Outputs compared on real validation samples."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from lab.data import batches as batching
from lab.exporting.writers import axis_limit, check_dims
from lab.tasks import outputs as model_outputs

# what parity compares against the eager model: an inference backend (lab.inference), batch in, outputs out (a
# tensor, or the tuple/dict the model returns)
Runner = Callable[[torch.Tensor], Any]


@dataclass
class Parity:
    samples: int
    batch_sizes: list[int]  # distinct batch sizes run: the traced one is not among them, so a fixed axis shows
    max_abs_diff: float  # max |outputs - eager outputs| over every sample and output
    top1_agreement: float | None  # share of decisions (argmax) that match eager's; None for tasks without one
    tolerance: float
    input_shapes: list[list[int]] = field(default_factory=list)  # distinct per-sample input shapes run
    error: str | None = None  # the runner refused or failed an input (a size baked in at export): its first line
    # a model of several outputs: max |diff| of each, by output name (max_abs_diff is the largest); None for one
    max_abs_diff_per_output: dict[str, float] | None = None

    @property
    def passed(self) -> bool:
        return math.isfinite(self.max_abs_diff) and self.max_abs_diff <= self.tolerance

    def as_dict(self) -> dict:
        figures = asdict(self)
        if self.max_abs_diff_per_output is None:  # a one-tensor model's entry keeps the keys it always had
            del figures["max_abs_diff_per_output"]
        return {**figures, "passed": self.passed}


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
    """The first `samples` inputs of the loader in its own batches (the last one possibly short), plus a second
    shape along every dynamic axis: a batch of one, and per other dynamic axis a batch of 3 whose size there differs
    from the traced one (`other_size`). A size baked in at export then fails parity instead of passing silently."""
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
    """`inputs` at another size along `dim`: a token sequence (bounded by the traced length) cut to half; any other
    axis (height, width) doubled by repeating each entry (nearest-neighbour upsampling: sizes a strided model
    divided evenly still divide). None when a sequence of one cannot be shortened."""
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
    """Run `candidate` on `batches` and compare with the eager outputs `reference` (same order). `agreement` is
    the task's share of matching decisions in one batch (top-1 for classes and tokens), or None. An input the
    candidate refuses or fails on, or outputs of another shape (or structure) than eager's, fail parity (max |diff|
    = inf) with the reason in `error`. A model of several outputs is compared output by output, each under its name
    in `layout` (the task's, lab.tasks.outputs; without one, output_0, output_1... or the dict's keys)."""
    count = 0
    agree: float | None = 0.0  # None once a batch has no agreement
    sizes, shapes = _sizes(batches), _shapes(batches)
    layout = layout or model_outputs.check(reference[0])
    each = dict.fromkeys(layout.names, 0.0)  # max |diff| per output
    for inputs, expected in zip(batches, reference):
        try:
            got = model_outputs.apply(torch.Tensor.float, candidate(inputs))
        except Exception as err:  # onnxruntime / torch.export guards / a traced constant: the model cannot run it
            problem = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        else:
            problem = _mismatch(got, expected, layout)
        if problem:
            failed = None if layout.single else dict.fromkeys(each, math.inf)
            error = f"inputs of shape {tuple(inputs.shape)}: {problem}"
            return Parity(count, sizes, math.inf, 0.0, tolerance, shapes, error, failed)
        for name, out, ref in zip(layout.names, model_outputs.tensors(got), model_outputs.tensors(expected)):
            diff = float((out - ref).abs().max()) if out.numel() else 0.0
            each[name] = diff if math.isnan(diff) else max(each[name], diff)  # a NaN stays: it fails the check
        share = agreement(expected, got)
        agree = None if share is None or agree is None else agree + share * len(inputs)
        count += len(inputs)
    worst = math.nan if any(map(math.isnan, each.values())) else max(each.values())
    share = None if agree is None else agree / max(count, 1)
    return Parity(count, sizes, worst, share, tolerance, shapes, None, None if layout.single else each)


def _mismatch(got: Any, expected: Any, layout: model_outputs.Layout) -> str:
    """Why `got` cannot be compared with eager's `expected` (another structure, another shape), or ""."""
    if model_outputs.kind(got) != model_outputs.kind(expected):
        return f"outputs {model_outputs.kind(got)}, eager's {model_outputs.kind(expected)}"
    for name, out, ref in zip(layout.names, model_outputs.tensors(got), model_outputs.tensors(expected)):
        if out.shape != ref.shape:
            which = "outputs" if layout.single else f"output {name!r}"
            return f"{which} {tuple(out.shape)}, eager's {tuple(ref.shape)}"
    return ""


def _sizes(batches: Sequence[torch.Tensor]) -> list[int]:
    return sorted({len(b) for b in batches})


def _shapes(batches: Sequence[torch.Tensor]) -> list[list[int]]:
    return [list(shape) for shape in sorted({tuple(b.shape[1:]) for b in batches})]
