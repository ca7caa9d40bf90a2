"""export.dynamic_dims end to end: the default CNN (global average pooling: any image size) exported with dynamic
height and width, parity run at a second size along them, and infer keeping an image at its own size."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import compose_config
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
