"""Run the export steps once the formats are written, checked and published.

An export step is an `export_step` option (lab.config.tools.ExportStepConfig), such as an extension's INT8
quantization. It runs with its settings `export.<name>` and adds its files, manifest sections and figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from lab.config.tools import ExportOptions
from lab.errors import UserError
from lab.tasks.outputs import Layout


@dataclass
class Export:
    """What a step gets, and what it adds."""

    run_dir: Path  # holds the published files (model.onnx, ...); a step writes its own beside them
    task: Any  # the checkpoint's task (lab.tasks), with its metrics, monitor and mode
    example: torch.Tensor  # a batch of validation inputs, as the formats were written with
    val_loader: DataLoader  # the validation split
    train_loader: Callable[[], DataLoader]  # the training split without augmentation, made when a step asks
    artifacts: dict[str, dict[str, Any]]  # the manifest entries of the published files; a step adds its own
    sections: dict[str, Any] = field(default_factory=dict)  # top-level manifest entries a step adds
    figures: dict[str, float] = field(default_factory=dict)  # export/... metrics a step adds, logged and summarised


def check(opts: ExportOptions, outputs: Any, layout: Layout) -> None:
    """Raise a UserError, before any work, if a step of the `export` node cannot take a model with these outputs."""
    for step in opts.steps():
        why = step.refuse_model(outputs, layout)
        if why is not None:
            raise UserError(why)


def run(opts: ExportOptions, export: Export) -> Export:
    """Run every export step of the `export` node `opts` on `export`."""
    for step in opts.steps():
        step.run(export)
    return export
