"""Batched prediction and the predictions.csv / predictions.json files every task's records go into."""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from lab.files import atomic_path, write_json
from lab.inference.backends import Backend

log = logging.getLogger(__name__)


def batched_outputs(
    backend: Backend,
    samples: Iterable[tuple[str, torch.Tensor]],
    batch_size: int,
    skipped: list[dict[str, str]] | None = None,
) -> Iterator[tuple[list[str], torch.Tensor]]:
    """(names, outputs) per batch of `batch_size` samples stacked together. A sample with NaN or inf values gets
    no prediction (a model answers it as confidently as any other): it goes into `skipped` with the reason."""
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    for name, tensor in samples:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            log.warning("skipped %s: NaN or inf in the input", name)
            if skipped is not None:
                skipped.append({"path": name, "reason": "NaN or inf in the input"})
            continue
        names.append(name)
        tensors.append(tensor)
        if len(tensors) == batch_size:
            yield names, backend(torch.stack(tensors)).float()
            names, tensors = [], []
    if tensors:
        yield names, backend(torch.stack(tensors)).float()


def top_k_records(
    backend: Backend,
    samples: Iterable[tuple[str, torch.Tensor]],
    batch_size: int,
    top_k: int,
    labels: Sequence[str],
    skipped: list[dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Class predictions: the top-k labels with softmax probabilities, most likely first."""
    records = []
    for names, logits in batched_outputs(backend, samples, batch_size, skipped):
        probs, indices = logits.softmax(dim=1).topk(min(top_k, logits.shape[1]), dim=1)
        for name, index, prob in zip(names, indices.tolist(), probs.tolist()):
            ranked = [{"label": labels[i], "index": i, "prob": p} for i, p in zip(index, prob)]
            records.append({"path": name, "label": ranked[0]["label"], "top_k": ranked})
    return records


def _csv_row(record: dict[str, Any]) -> dict[str, Any]:
    """A record's scalar fields; a ranked "top_k" list becomes top1_label, top1_prob, top2_label, ..."""
    ranked = "top_k" in record  # its first label is top1_label
    row = {k: v for k, v in record.items() if not isinstance(v, list | dict) and not (ranked and k == "label")}
    for rank, entry in enumerate(record.get("top_k", []), 1):
        row[f"top{rank}_label"], row[f"top{rank}_prob"] = entry["label"], f"{entry['prob']:.6f}"
    return row


def write_predictions(
    records: Sequence[dict[str, Any]], run_dir: Path, skipped: Sequence[dict[str, str]], header: dict[str, Any]
) -> tuple[Path, Path]:
    """predictions.csv (one row per input, scalar fields only) and predictions.json (the full records plus what
    was skipped and why, and which model made them)."""
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
