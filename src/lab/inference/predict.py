"""Batched top-k prediction and the predictions.csv / predictions.json files."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lab.inference.backends import Backend
from lab.tracking import write_json


@dataclass
class Prediction:
    path: str
    indices: list[int]  # top-k class indices, most likely first
    probs: list[float]  # their softmax probabilities


def predict(
    backend: Backend, samples: Iterable[tuple[str, torch.Tensor]], batch_size: int, top_k: int
) -> list[Prediction]:
    """Stack samples into batches of `batch_size`, run the backend, keep each sample's top-k."""
    out: list[Prediction] = []
    names: list[str] = []
    tensors: list[torch.Tensor] = []

    def flush() -> None:
        logits = backend(torch.stack(tensors)).float()
        probs, indices = logits.softmax(dim=1).topk(min(top_k, logits.shape[1]), dim=1)
        out.extend(Prediction(n, i, p) for n, i, p in zip(names, indices.tolist(), probs.tolist()))
        names.clear()
        tensors.clear()

    for name, tensor in samples:
        names.append(name)
        tensors.append(tensor)
        if len(tensors) == batch_size:
            flush()
    if tensors:
        flush()
    return out


def write_predictions(
    predictions: Sequence[Prediction],
    class_names: Sequence[str],
    run_dir: Path,
    skipped: Sequence[dict[str, str]],
    header: dict[str, Any],
) -> tuple[Path, Path]:
    """predictions.csv (one row per input: path, then label/probability pairs, most likely first) and
    predictions.json (the same plus what was skipped and why, and which model made them)."""
    k = max((len(p.indices) for p in predictions), default=0)
    csv_path = run_dir / "predictions.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", *[f"top{r}_{col}" for r in range(1, k + 1) for col in ("label", "prob")]])
        for p in predictions:
            pairs = [v for i, prob in zip(p.indices, p.probs) for v in (class_names[i], f"{prob:.6f}")]
            writer.writerow([p.path, *pairs])
    json_path = run_dir / "predictions.json"
    rows = [
        {
            "path": p.path,
            "label": class_names[p.indices[0]],
            "top_k": [{"label": class_names[i], "index": i, "prob": prob} for i, prob in zip(p.indices, p.probs)],
        }
        for p in predictions
    ]
    write_json(json_path, {**header, "predictions": rows, "skipped": list(skipped)})
    return csv_path, json_path
