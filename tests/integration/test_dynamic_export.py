"""export.dynamic_dims end to end: the default CNN (global average pooling: any image size) exported with dynamic
height and width, parity run at a second size along them, and infer keeping an image at its own size; a fork's
sequence model exported with a dynamic time axis, and infer taking sequences of another length."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import compose_config, plugins_env, run_script
from lab.config import validate
from lab.inference.inputs import image_transform
from lab.workflows import export, infer, restore


def _run(workflow, config_name: str, run_dir, *overrides: str) -> None:
    """The entry script's work in this process (the training run is the session's, made by a real script)."""
    cfg = compose_config(overrides, config_name)
    validate(cfg)
    workflow.run(cfg, run_dir)


def test_height_and_width_exported_dynamic_and_infer_keeps_the_images_size(finished_run, tmp_path):
    best = finished_run / "checkpoints" / "best.pt"
    export_dir = tmp_path / "export"
    overrides = ["export.formats=[onnx]", "export.dynamic_dims=[0,2,3]", "export.parity_samples=16", "logger=none"]
    _run(export, "export", export_dir, f"ckpt_path={best}", *overrides)
    manifest = json.loads((export_dir / "export_manifest.json").read_text())
    assert manifest["input"]["shape"] == ["batch", 1, "height", "width"] and manifest["dynamic_dims"] == [0, 2, 3]
    parity = manifest["artifacts"]["onnx"]["parity"]
    assert parity["passed"] and [1, 16, 8] in parity["input_shapes"] and [1, 8, 16] in parity["input_shapes"]

    pixels = np.random.default_rng(0).integers(0, 256, (12, 20), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "wide.png")
    infer_dir = tmp_path / "infer"
    image = f"input={tmp_path / 'wide.png'}"
    _run(infer, "infer", infer_dir, f"ckpt_path={export_dir}/model.onnx", image, "logger=none")
    with (infer_dir / "predictions.csv").open() as f:
        (row,) = list(csv.DictReader(f))

    restored = restore.rebuild(best)  # the eager model on the image at its own 12x20, not resized to 8x8
    with Image.open(tmp_path / "wide.png") as image:
        tensor = image_transform(restored.meta, resize=False)(image)
    assert tensor.shape == (1, 12, 20)
    with torch.inference_mode():
        probs = restored.model.eval()(tensor[None]).softmax(-1)[0]
    # onnxruntime against eager torch, printed to 6 decimals: equal within the export's own parity tolerance
    assert float(row["top1_prob"]) == pytest.approx(float(probs.max()), abs=1e-5)


@pytest.mark.slow
def test_a_sequence_model_exported_with_a_dynamic_time_axis_infers_on_sequences_of_another_length(tmp_path):
    def run(script: str, name: str, *overrides: str) -> None:
        args = (f"hydra.run.dir={tmp_path / name}", "logger=none", *overrides)
        proc = run_script(script, *args, patch="import sequences\n", env=plugins_env())
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    run("train.py", "train", "data=sequence_rows", "model=sequence_net", "debug=fast")  # (N, 12, 4) sequences
    best = tmp_path / "train/checkpoints/best.pt"
    run("export.py", "export", f"ckpt_path={best}", "export.formats=[pt2]", "export.dynamic_dims=[0,1]")
    manifest = json.loads((tmp_path / "export/export_manifest.json").read_text())
    assert manifest["input"]["shape"] == ["batch", "dim1", 4] and manifest["dynamic_dims"] == [0, 1]

    sequences = np.random.default_rng(0).normal(size=(3, 7, 4)).astype(np.float32)  # 7 steps, not the trained 12
    np.save(tmp_path / "short.npy", sequences)
    run("infer.py", "infer", f"ckpt_path={tmp_path / 'export/model.pt2'}", f"input={tmp_path / 'short.npy'}")
    with (tmp_path / "infer/predictions.csv").open() as f:
        rows = list(csv.DictReader(f))
    # the fork's model (plugins/sequences.py: each step encoded, the steps averaged) by hand, from its weights
    w = torch.load(best, map_location="cpu", weights_only=True)["model"]
    steps = torch.relu(torch.from_numpy(sequences) @ w["step.0.weight"].T + w["step.0.bias"])
    probs = (steps.mean(1) @ w["head.weight"].T + w["head.bias"]).softmax(-1)
    assert [float(row["top1_prob"]) for row in rows] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-5)
