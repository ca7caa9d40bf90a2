"""What a model may return: one tensor (every shipped model), a tuple or list of tensors, or a dict of tensors keyed
by name. Anything else (a nested tuple, a None, a dict keyed by numbers) can be neither exported nor written, so
`check` refuses it at the first training step."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from lab.errors import UserError
from lab.files import atomic_path

log = logging.getLogger(__name__)

INPUT_NAME, OUTPUT_NAME = "input", "output"  # the exported graph's input, and its output when it has one
# A name becomes an ONNX output, predictions.csv columns (<name>_0...) and a file name (outputs/<index>_<name>.npy)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_RESERVED = (INPUT_NAME, "path")  # the graph's input, and the input's column in predictions.csv
_RETURNS = "a model may return a tensor, a tuple or list of tensors, or a dict of tensors keyed by name"


@dataclass(frozen=True)
class Layout:
    """What a model returns, as export and infer see it: its structure and a name per tensor, in order."""

    structure: str  # "tensor", "tuple", "list" or "dict"
    names: tuple[str, ...]

    @property
    def single(self) -> bool:
        return self.structure == "tensor"

    def pack(self, tensors: Sequence[torch.Tensor]) -> Any:
        """Rebuild the model's structure from its tensors in order (onnxruntime gives a flat list)."""
        if self.single:
            return tensors[0]
        if self.structure == "dict":
            return dict(zip(self.names, tensors))
        return tuple(tensors) if self.structure == "tuple" else list(tensors)


def tensors(outputs: Any) -> list[torch.Tensor]:
    """Return the tensors of a model's outputs, in order."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return list(outputs.values() if isinstance(outputs, dict) else outputs)


def apply(fn: Callable[[torch.Tensor], torch.Tensor], outputs: Any) -> Any:
    """Apply `fn` to each tensor of the outputs, keeping their structure (e.g. a runner's fp32 copies on CPU)."""
    if isinstance(outputs, torch.Tensor):
        return fn(outputs)
    if isinstance(outputs, dict):
        return {name: fn(tensor) for name, tensor in outputs.items()}
    mapped = [fn(tensor) for tensor in outputs]
    return mapped if isinstance(outputs, list) else tuple(mapped)


def check(outputs: Any, task: Any = None) -> Layout:
    """Return the layout of a model's outputs, named as `task` names them.
    Raises UserError, naming the fix, for outputs that export and infer cannot take."""
    if isinstance(outputs, torch.Tensor):
        return Layout("tensor", (OUTPUT_NAME,))
    if not isinstance(outputs, tuple | list | dict) or not outputs:
        raise UserError(f"the model returns {kind(outputs)}: {_RETURNS}; make its forward return one of these")
    structure = "dict" if isinstance(outputs, dict) else "list" if isinstance(outputs, list) else "tuple"
    keys = list(outputs) if isinstance(outputs, dict) else list(range(len(outputs)))
    for key, value in zip(keys, tensors(outputs)):
        if not isinstance(value, torch.Tensor):
            raise UserError(
                f"the model's output [{key!r}] is {kind(value)}: {_RETURNS}, nothing nested; make its forward "
                "return its tensors flat (one entry per tensor)"
            )
    task_name, own = type(task).__name__, None if task is None else task.output_names
    if structure == "dict" or own is None:  # a dict's keys name its outputs, whatever the task says
        names = tuple(keys) if structure == "dict" else tuple(f"output_{i}" for i in keys)
    elif len(own) != len(keys):
        raise UserError(
            f"{task_name}.output_names has {len(own)} names for the model's {len(keys)} outputs: give one name per "
            "output, in the model's order"
        )
    else:
        names = tuple(own)
    wrong = next((n for n in names if not isinstance(n, str) or not _NAME.fullmatch(n) or n in _RESERVED), None)
    if wrong is not None:
        where = "the model's dict key" if structure == "dict" else f"{task_name}.output_names entry"
        raise UserError(
            f"{where} {wrong!r} cannot name an exported output: use letters, digits, _ . - (not starting with a "
            f"digit), other than {' or '.join(_RESERVED)}"
        )
    if len(set(names)) != len(names):
        raise UserError(f"{task_name}.output_names {list(names)} repeats a name: give each output its own")
    return Layout(structure, cast("tuple[str, ...]", names))  # each a str by now


def kind(value: Any) -> str:
    """Describe what a model or runner returned: "a tensor", "a tuple of 2", "a dict of cls, box", "None"."""
    if isinstance(value, dict):
        return f"a dict of {', '.join(map(str, value))}" if value else "an empty dict"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}" if value else f"an empty {type(value).__name__}"
    return "a tensor" if isinstance(value, torch.Tensor) else "None" if value is None else f"a {type(value).__name__}"


def batched_outputs(
    backend: Callable[[torch.Tensor], Any],
    samples: Iterable[tuple[str, torch.Tensor]],
    batch_size: int,
    skipped: list[dict[str, str]] | None = None,
) -> Iterator[tuple[list[str], Any]]:
    """Yield (names, fp32 outputs as the model returns them) per stacked batch of at most `batch_size` samples.
    A sample of another shape (images kept at their own size) starts a new batch. A sample with NaN or inf gets no
    prediction, since a model would answer it as confidently as any other; it goes into `skipped`."""
    names: list[str] = []
    batch: list[torch.Tensor] = []
    for name, tensor in samples:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            log.warning("skipped %s: NaN or inf in the input", name)
            if skipped is not None:
                skipped.append({"path": name, "reason": "NaN or inf in the input"})
            continue
        if batch and tensor.shape != batch[0].shape:
            yield names, _fp32(backend(torch.stack(batch)))
            names, batch = [], []
        names.append(name)
        batch.append(tensor)
        if len(batch) == batch_size:
            yield names, _fp32(backend(torch.stack(batch)))
            names, batch = [], []
    if batch:
        yield names, _fp32(backend(torch.stack(batch)))


def _fp32(outputs: Any) -> Any:
    return apply(torch.Tensor.float, outputs)


def per_input(outputs: Any, count: int, task: Any) -> Iterable[Any]:
    """Split a batch's outputs into one item per input, for `output_record`: a row, or a dict of rows by output
    name for a model of several outputs. Raises UserError for an output without a row per input."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    named = list(zip(check(outputs, task).names, tensors(outputs)))
    for name, tensor in named:
        if tensor.ndim == 0 or len(tensor) != count:
            raise UserError(
                f"output {name!r} has shape {tuple(tensor.shape)}, not one row per input ({count} inputs): "
                f"override {type(task).__name__}.predict(backend, context) to write its records"
            )
    return [{name: tensor[i] for name, tensor in named} for i in range(count)]


def output_record(output: torch.Tensor | dict[str, torch.Tensor], run_dir: Path, index: int, max_csv: int) -> dict:
    """Turn one input's raw outputs into record fields: up to `max_csv` values in the flat list "output" (plus
    "output_shape" when not 1-d), a bigger output as float32 in <run_dir>/outputs/<index>.npy ("output_file",
    "output_shape"). A dict of outputs gives these fields per output name: cls, cls_shape, cls_file..."""
    if isinstance(output, dict):
        return {
            key: value
            for name, tensor in output.items()
            for key, value in _output_fields(tensor, run_dir, f"{index}_{name}", max_csv, name).items()
        }
    return _output_fields(output, run_dir, str(index), max_csv, "output")


def _output_fields(output: torch.Tensor, run_dir: Path, stem: str, max_csv: int, key: str) -> dict[str, Any]:
    if output.numel() <= max_csv:
        shape = {} if output.ndim == 1 else {f"{key}_shape": list(output.shape)}
        return {key: output.flatten().tolist(), **shape}
    import numpy as np

    folder = run_dir / "outputs"
    folder.mkdir(exist_ok=True)
    path = folder / f"{stem}.npy"
    with atomic_path(path) as tmp, tmp.open("wb") as f:
        np.save(f, output.float().numpy())
    return {f"{key}_file": str(path.relative_to(run_dir)), f"{key}_shape": list(output.shape)}


def top_k_records(
    backend: Callable[[torch.Tensor], Any],
    samples: Iterable[tuple[str, torch.Tensor]],
    batch_size: int,
    top_k: int,
    labels: Sequence[str],
    skipped: list[dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Predict classes: the top-k labels with softmax probabilities, most likely first."""
    records = []
    for names, logits in batched_outputs(backend, samples, batch_size, skipped):
        probs, indices = logits.softmax(dim=1).topk(min(top_k, logits.shape[1]), dim=1)
        for name, index, prob in zip(names, indices.tolist(), probs.tolist()):
            ranked = [{"label": labels[i], "index": i, "prob": p} for i, p in zip(index, prob)]
            records.append({"path": name, "label": ranked[0]["label"], "top_k": ranked})
    return records
