"""Batched prediction, and the predictions.csv / predictions.json files every task's records go into."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.files import atomic_path, write_json


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
