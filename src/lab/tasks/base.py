"""The Task interface: everything the trainer and the four workflows need to know about *what* is learned.

The trainer and the workflows call only these methods; classification, regression and language modelling (and a
fork's own task) differ here and nowhere else. A task is built per run from its config node and the dataset's
``meta`` by ``lab.tasks.build``: a ``task`` option's ``build(meta)`` (``lab.config.tasks``) makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

_COUNTS: dict[tuple[float, torch.device], torch.Tensor] = {}


def count(n: float, device: torch.device) -> torch.Tensor:
    """``n`` as a device scalar for ``Task.weight``, made once per (n, device): the batch size repeats every step,
    and a fill per step is a kernel launch the step does not need. Read-only: the trainer never changes it."""
    key = (float(n), device)
    if key not in _COUNTS:
        _COUNTS[key] = torch.full((), float(n), device=device)
    return _COUNTS[key]


class Metrics(Protocol):
    """An exact metric accumulator. Running *sums* live in tensor attributes on the device (no host sync per
    batch); ``Parallel.reduce_metrics`` sums every tensor attribute across ranks once; ``compute`` divides once."""

    def update(self, outputs: Any, targets: Any) -> None: ...

    def compute(self) -> dict[str, float]: ...


@dataclass
class ReportContext:
    """What a task may use to write its eval artifacts (plots, sample generations) into ``run_dir``."""

    run_dir: Path
    title: str  # checkpoint, split and sample count, for figure titles
    model: nn.Module  # eval mode, on `device`
    device: torch.device
    meta: dict[str, Any]


@dataclass
class Predictions:
    """What infer writes: one record per input (flat dicts become predictions.csv rows) and what was skipped."""

    records: list[dict[str, Any]]
    skipped: list[dict[str, str]]


class Task(Protocol):
    name: str
    monitor: str  # the validation metric (without "val/") that best.pt, plateau scheduling and sweeps follow
    mode: str  # "max" or "min": the direction in which `monitor` improves
    dynamic_dims: tuple[int, ...]  # input dims an exported model must accept at any size: (0,) batch; (0, 1) +sequence

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        """Raise UserError when the data cannot fit the task (labels out of range, non-finite targets, tokens out
        of the vocabulary); return a one-line description for the start-of-run report."""

    def weight(self, targets: Any) -> torch.Tensor:
        """What one batch's loss averages over, as a device scalar: its samples, or its unmasked tokens. The trainer
        divides each micro-batch's summed loss by the weight of the whole accumulation group (over all ranks)."""

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        """The batch's loss *summed* over its weighted items, computed in fp32 (outputs may be bf16/fp16)."""

    def metrics(self, device: torch.device, full: bool = False) -> Metrics:
        """A fresh accumulator; ``full`` adds what only an evaluation run reports (e.g. a confusion matrix)."""

    def report(self, metrics: Metrics, context: ReportContext) -> tuple[dict[str, Any], list[Path]]:
        """eval.py: the extra eval.json entries and the artifact files written into ``context.run_dir``."""

    def agreement(self, reference: torch.Tensor, outputs: torch.Tensor) -> float | None:
        """Export parity beyond max |diff|: the share of samples whose decision agrees (top-1), or None."""

    def predict(self, backend: Any, infer_cfg: Any, meta: dict[str, Any]) -> Predictions:
        """infer.py: read ``infer_cfg.input`` (files, rows, a prompt), run ``backend`` and turn outputs into records."""


class BaseTask:
    """Defaults for a new task: subclass it and write ``loss`` and ``metrics`` (``lab.tasks.build`` sets ``name``,
    ``monitor`` and ``mode`` from the task's option). Every sample weighs the same; eval writes eval.json only;
    export parity is max |diff| alone; infer runs the model on the rows of a .npy / .pt array and records the raw
    outputs."""

    name = "task"
    monitor = "loss"
    mode = "min"
    dynamic_dims: tuple[int, ...] = (0,)

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        return f"targets {tuple(targets.shape)} {targets.dtype}" if isinstance(targets, torch.Tensor) else ""

    def weight(self, targets: Any) -> torch.Tensor:
        from lab.data.batches import size

        device = targets.device if isinstance(targets, torch.Tensor) else torch.device("cpu")
        return count(size(targets), device)

    def report(self, metrics: Metrics, context: ReportContext) -> tuple[dict[str, Any], list[Path]]:
        return {}, []

    def agreement(self, reference: torch.Tensor, outputs: torch.Tensor) -> float | None:
        return None

    def predict(self, backend: Any, cfg: Any, meta: dict[str, Any]) -> Predictions:
        from lab.inference.inputs import load_array
        from lab.inference.predict import batched_outputs

        rows, skipped = load_array(cfg.input, meta), []
        records = [
            {"path": name, "output": output}
            for names, outputs in batched_outputs(backend, rows, cfg.infer.batch_size, skipped)
            for name, output in zip(names, outputs.tolist())
        ]
        return Predictions(records, skipped)
