"""Batched prediction, and the predictions.csv / predictions.json files every task's records go into."""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from lab.errors import UserError
from lab.files import atomic_path, write_json
from lab.inference.backends import Backend
from lab.tasks import outputs as model_outputs

log = logging.getLogger(__name__)


def batched_outputs(
    backend: Backend,
    samples: Iterable[tuple[str, torch.Tensor]],
    batch_size: int,
    skipped: list[dict[str, str]] | None = None,
) -> Iterator[tuple[list[str], Any]]:
    """Yield (names, fp32 outputs as the model returns them) per stacked batch of at most `batch_size` samples.
    A sample of another shape (images kept at their own size) starts a new batch. A sample with NaN or inf gets no
    prediction, since a model would answer it as confidently as any other; it goes into `skipped`."""
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    for name, tensor in samples:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            log.warning("skipped %s: NaN or inf in the input", name)
            if skipped is not None:
                skipped.append({"path": name, "reason": "NaN or inf in the input"})
            continue
        if tensors and tensor.shape != tensors[0].shape:
            yield names, _fp32(backend(torch.stack(tensors)))
            names, tensors = [], []
        names.append(name)
        tensors.append(tensor)
        if len(tensors) == batch_size:
            yield names, _fp32(backend(torch.stack(tensors)))
            names, tensors = [], []
    if tensors:
        yield names, _fp32(backend(torch.stack(tensors)))


def _fp32(outputs: Any) -> Any:
    return model_outputs.apply(torch.Tensor.float, outputs)


def per_input(outputs: Any, count: int, task: Any) -> Iterable[Any]:
    """Split a batch's outputs into one item per input, for `output_record`: a row, or a dict of rows by output
    name for a model of several outputs. Raises UserError for an output without a row per input."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    named = list(zip(model_outputs.check(outputs, task).names, model_outputs.tensors(outputs)))
    for name, tensor in named:
        if tensor.ndim == 0 or len(tensor) != count:
            raise UserError(
                f"output {name!r} has shape {tuple(tensor.shape)}, not one row per input ({count} inputs): "
                f"override {type(task).__name__}.predict(backend, context) to write its records"
            )
    return [{name: tensor[i] for name, tensor in named} for i in range(count)]


def output_record(output: torch.Tensor | dict[str, torch.Tensor], run_dir: Path, index: int, max_csv: int) -> dict:
    """Turn one input's raw outputs into record fields.
    Up to `max_csv` values go in the flat list "output" (plus "output_shape" when not 1-d), which predictions.csv
    spreads over output_0, output_1... A bigger output (a mask, a feature map) goes to <run_dir>/outputs/<index>.npy
    as float32, named in "output_file" with its shape. A dict of outputs gives these fields per output name: cls,
    cls_shape, cls_file..."""
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
    backend: Backend,
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


def _csv_row(record: dict[str, Any]) -> dict[str, Any]:
    """Flatten a record into its scalar fields for the CSV.
    A list of numbers `key` becomes key_0, key_1, ... A ranked "top_k" list becomes top1_label, top1_prob, ..."""
    ranked = "top_k" in record  # its first label is top1_label
    row: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, list) and value and all(isinstance(v, int | float) for v in value):
            row.update({f"{key}_{i}": v for i, v in enumerate(value)})
        elif not isinstance(value, list | dict) and not (ranked and key == "label"):
            row[key] = value
    for rank, entry in enumerate(record.get("top_k", []), 1):
        row[f"top{rank}_label"], row[f"top{rank}_prob"] = entry["label"], f"{entry['prob']:.6f}"
    return row


def write_predictions(
    records: Sequence[dict[str, Any]], run_dir: Path, skipped: Sequence[dict[str, str]], header: dict[str, Any]
) -> tuple[Path, Path]:
    """Write predictions.csv (one row per input, scalar fields only) and predictions.json.
    The JSON holds the full records, what was skipped and why, and which model made them."""
    rows = [_csv_row(record) for record in records]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    csv_path = run_dir / "predictions.csv"
    with atomic_path(csv_path) as tmp, tmp.open("w", newline="") as f:  # a Ctrl-C mid-write leaves no half table
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    json_path = run_dir / "predictions.json"
    write_json(json_path, {**header, "predictions": list(records), "skipped": list(skipped)})
    return csv_path, json_path
