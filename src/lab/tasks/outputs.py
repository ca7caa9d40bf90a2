"""What a model may return: one tensor (every shipped model), a tuple or list of tensors, or a dict of tensors keyed
by name (e.g. a class head and a box head).

The task's `loss`, `metrics`, `agreement` and own `predict` get the outputs as the model returns them. Export names
each output in the ONNX file and the manifest: a dict by its keys, a tuple by the task's `output_names`, else
output_0, output_1... It compares each with eager's, and every runner returns the model's structure.
`BaseTask.predict` writes one column group per output. Anything else (a nested tuple, a None, a dict keyed by
numbers) can be neither exported nor written, so `check` refuses it at the first training step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from lab.errors import UserError

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
