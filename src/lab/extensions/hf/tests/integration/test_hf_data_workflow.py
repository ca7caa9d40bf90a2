"""data=hf end to end, the README's *Data larger than memory* commands on a small CSV: prepared into Arrow parts by
scripts/prepare_data.py, a classifier trained on it (DataLoader workers reading the memory-mapped parts), eval.py
reproducing its validation metrics, infer.py on a CSV of rows. (--verify, the refusals: tests/test_hf_data.py.)"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import run_script

pytestmark = pytest.mark.slow

FEATURES = ["size", "rooms", "age"]
NAMES = ["cheap", "fair", "dear"]


def _table(path: Path, rows: int) -> tuple[np.ndarray, list[str]]:
    """Prices in three classes that the features decide (learnable in a few epochs), with a text column."""
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(80, 20, rows), rng.integers(1, 6, rows), rng.normal(30, 10, rows)])
    score = (x[:, 0] - 80) / 20 + (x[:, 1] - 3) / 2 - (x[:, 2] - 30) / 20
    labels = [NAMES[int(np.digitize(s, [-0.6, 0.6]))] for s in score]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["street", *FEATURES, "price_class"])
        writer.writerows(
            [f"st{i}", f"{a:.3f}", int(b), f"{c:.2f}", y] for i, ((a, b, c), y) in enumerate(zip(x, labels))
        )
    return x, labels


def _ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def test_prepare_train_eval_infer(tmp_path: Path) -> None:
    source, arrow = tmp_path / "houses.csv", tmp_path / "houses-arrow"
    x, _ = _table(source, 600)
    data = ["data=hf", f"data.source={source}", f"data.path={arrow}"]
    _ok(run_script("prepare_data.py", *data, "data.rows_per_part=250"))
    manifest = json.loads((arrow / "manifest.json").read_text())
    assert [p["rows"] for p in manifest["parts"]] == [250, 250, 100]

    run = tmp_path / "train"
    train = [*data, "data.target=price_class", "task=classification", "model=mlp", "logger=none"]
    train += ["trainer.max_epochs=3", "data.batch_size=32", "data.num_workers=1", f"hydra.run.dir={run}"]
    _ok(run_script("train.py", *train))
    best = run / "checkpoints/best.pt"
    ckpt = torch.load(best, weights_only=True)
    meta = ckpt["data_meta"]
    assert meta["class_names"] == sorted(NAMES) and meta["feature_names"] == FEATURES

    # eval.py rebuilds the memory-mapped splits and scores best.pt as validation did
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    at_best = next(r for r in logged if "val/acc" in r and r["step"] == ckpt["progress"]["global_step"])
    assert at_best["val/acc"] > 0.6  # learning, not chance (1/3)
    _ok(
        run_script(
            "eval.py", f"ckpt_path={best}", "eval.split=val", "logger=none", f"hydra.run.dir={tmp_path / 'eval'}"
        )
    )
    evaluated = json.loads((tmp_path / "eval/eval.json").read_text())["metrics"]
    assert evaluated["acc"] == at_best["val/acc"]
    assert evaluated["loss"] == pytest.approx(at_best["val/loss"], rel=1e-6, abs=1e-7)

    # infer.py on rows given as a CSV (columns in another order, an extra one): data=csv's path, the same meta
    rows = tmp_path / "rows.csv"
    with rows.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["age", "note", "size", "rooms"])
        writer.writerows([[c, "x", a, b] for a, b, c in x[:8].tolist()])
    _ok(run_script("infer.py", f"ckpt_path={best}", f"input={rows}", "logger=none", f"hydra.run.dir={tmp_path / 'i'}"))
    with (tmp_path / "i/predictions.csv").open() as f:
        predicted = [row for row in csv.DictReader(f)]
    standardised = (torch.tensor(x[:8]) - torch.tensor(meta["feature_mean"])) / torch.tensor(meta["feature_std"])
    from lab.workflows import restore

    with torch.inference_mode():
        expected = restore.rebuild(best).model(standardised.float()).argmax(1)
    assert [row["top1_label"] for row in predicted] == [meta["class_names"][i] for i in expected.tolist()]
