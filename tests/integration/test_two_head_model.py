"""A fork's model of two outputs (class logits and a box, plugins/two_heads.py: its data, model and task, no core
file edited) through every script: train, eval, export in every format with parity per output, infer from the ONNX
file and the checkpoint with a column group per output; a model returning a nested dict is refused before training."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import plugins_env, run_script

pytestmark = pytest.mark.slow
OPTIONS = ["data=box_rows", "model=two_heads", "task=class_and_box", "logger=none"]


def _run(script: str, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    """scripts/<script> with the fork's module imported first (it registers its options)."""
    return run_script(script, f"hydra.run.dir={run_dir}", *overrides, patch="import two_heads\n", env=plugins_env())


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_a_model_of_two_outputs_trains_evaluates_exports_and_infers_per_output(tmp_path):
    _ok(_run("train.py", tmp_path / "train", *OPTIONS, "debug=fast"))
    best = tmp_path / "train/checkpoints/best.pt"
    _ok(_run("eval.py", tmp_path / "eval", f"ckpt_path={best}", "eval.split=val", "logger=none"))
    assert set(json.loads((tmp_path / "eval/eval.json").read_text())["metrics"]) == {"loss"}

    formats = "export.formats=[onnx,pt2,torchscript]"
    _ok(_run("export.py", tmp_path / "export", f"ckpt_path={best}", formats, "logger=none"))
    manifest = json.loads((tmp_path / "export/export_manifest.json").read_text())
    assert manifest["output_structure"] == "tuple" and "output" not in manifest  # named by the task
    assert manifest["outputs"] == [
        {"name": "logits", "shape": ["batch", 3], "dtype": "float32"},
        {"name": "boxes", "shape": ["batch", 4], "dtype": "float32"},
    ]
    for fmt, entry in manifest["artifacts"].items():
        parity = entry["parity"]
        assert entry["status"] == "ok" and set(parity["max_abs_diff_per_output"]) == {"logits", "boxes"}, fmt
        assert parity["max_abs_diff"] == max(parity["max_abs_diff_per_output"].values()) <= 1e-4

    np.save(tmp_path / "rows.npy", np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32))
    tables = {}
    for model in (tmp_path / "export/model.onnx", best):
        run_dir = tmp_path / f"infer-{model.suffix}"
        _ok(_run("infer.py", run_dir, f"ckpt_path={model}", f"input={tmp_path / 'rows.npy'}", "logger=none"))
        with (run_dir / "predictions.csv").open() as f:
            tables[model.suffix] = list(csv.DictReader(f))
    columns = ["path", *(f"logits_{i}" for i in range(3)), *(f"boxes_{i}" for i in range(4))]
    onnx, eager = tables[".onnx"], tables[".pt"]
    assert list(onnx[0]) == columns and len(onnx) == 5 and list(eager[0]) == columns
    for exported, rebuilt in zip(onnx, eager):
        assert all(abs(float(exported[c]) - float(rebuilt[c])) < 1e-4 for c in columns[1:])


def test_a_nested_output_is_refused_before_training_in_one_line(tmp_path):
    proc = _run("train.py", tmp_path / "train", *OPTIONS, "debug=fast", "model.returns=nested")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("error: the model's output ['box'] is a tuple of 2: a model may return a tensor")
    assert "make its forward return its tensors flat" in lines[0]
    assert not (tmp_path / "train/checkpoints").exists()
