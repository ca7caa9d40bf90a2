"""The page's fine-tuning end to end, offline: its `experiment=finetune_folder ... model.weights_path=...` command
on an image folder of non-square images without val/, from a "pretrained" timm file the test writes; then eval,
export and infer from the checkpoint alone (the pretrained file moved away), each applying validation's
preprocessing. And the page's fine-tuning benchmark, on its shortest settings."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import Run, run_script, script_env
from warm_python import run_python

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "README.md"
# the page's commands, as written (test_readme checks that each line of its ```sh blocks is quoted by its tests)
FROM_A_FILE = "python scripts/train.py experiment=finetune_folder data.root=/path/to/images model.weights_path=/path/to/weights.safetensors"  # noqa: E501
BENCH = "python -m lab.extensions.pretrained.bench_finetune"
CLASSES = {"red": (200, 40, 40), "green": (40, 200, 40), "blue": (40, 40, 200)}


def _page_args(command: str, **paths: str) -> list[str]:
    """A command of the page, checked to be there as written: its arguments after `python`, placeholders replaced."""
    assert command in PAGE.read_text(), command
    for placeholder, path in paths.items():
        command = command.replace(placeholder, path)
    python, *args = shlex.split(command)
    assert python == "python", command
    return args


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    timm = pytest.importorskip("timm")
    root = tmp_path_factory.mktemp("finetune")
    rng = np.random.default_rng(0)
    for name, colour in CLASSES.items():
        (root / "images" / "train" / name).mkdir(parents=True)
        for i in range(6):  # 24 x 40: the eval transform must crop the centre, not squash
            pixels = (np.array(colour) + rng.normal(0, 40, (24, 40, 3))).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / "images" / "train" / name / f"{i}.png")
    torch.manual_seed(0)
    weights = root / "pretrained.pth"
    torch.save(timm.create_model("test_resnet").state_dict(), weights)  # ImageNet-shaped: 1000 classes, RGB
    run_dir = root / "train"
    paths = {"/path/to/images": str(root / "images"), "/path/to/weights.safetensors": str(weights)}
    script, *args = _page_args(FROM_A_FILE, **paths)
    proc = run_script(
        Path(script).name,
        *args,
        "model.arch=test_resnet",  # timm's smallest ResNet (the preset's resnet18.a1_in1k: the hub's)
        "data.image_size=32",  # test_resnet's own 160 px: the same code, 25x the compute
        "data.val_fraction=0.25",
        "data.batch_size=6",
        "data.num_workers=0",
        "trainer.max_epochs=1",
        "scheduler.warmup_steps=1",
        "logger=none",
        f"hydra.run.dir={run_dir}",
    )
    run = Run(proc, run_dir)
    assert proc.returncode == 0, run.output[-4000:]
    weights.rename(root / "moved-away.pth")  # a checkpoint holds every weight: nothing below may read the file
    return run


def _ok(proc, what):
    assert proc.returncode == 0, f"{what}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def test_the_pretrained_weights_and_their_preprocessing_are_used(finetuned):
    assert "loaded by timm; a new head for 3 classes (the file's has 1000)" in finetuned.output
    meta = torch.load(finetuned.dir / "checkpoints/best.pt", weights_only=True)["data_meta"]
    # test_resnet's pretrained config, except the size the run set
    assert (meta["image_size"], meta["crop_pct"], meta["interpolation"]) == (32, 0.95, "bilinear")
    assert meta["mean"] == [0.5] * 3 and meta["std"] == [0.5] * 3


def test_eval_export_and_infer_reproduce_validation_from_the_checkpoint_alone(finetuned, tmp_path):
    best = f"ckpt_path={finetuned.dir}/checkpoints/best.pt"
    proc = run_script("eval.py", best, "eval.split=val", "logger=none", f"hydra.run.dir={tmp_path / 'eval'}")
    _ok(proc, "eval")
    evaluated = json.loads((tmp_path / "eval/eval.json").read_text())["metrics"]
    validated = [row for row in finetuned.metrics() if "val/acc" in row]
    best_val = max(row["val/acc"] for row in validated)
    assert evaluated["acc"] == pytest.approx(best_val, abs=1e-12)  # eval = validation, exactly

    # torch.export (ONNX export of the same program costs half as much again; test_eval_export_infer covers it)
    proc = run_script("export.py", best, "export.formats=[pt2]", "logger=none", f"hydra.run.dir={tmp_path / 'x'}")
    _ok(proc, "export")  # it refuses an export whose outputs leave the eager model's (the parity check)
    assert "top-1 agreement 1.0000" in proc.stdout + proc.stderr

    # infer on the raw (non-square) validation files: the predictions validation's own transform gives
    from lab.workflows import restore

    restored = restore.rebuild(f"{finetuned.dir}/checkpoints/best.pt")
    val = restore.rebuild_data(restored).val
    proc = run_script(
        "infer.py",
        best,
        f"input={val.samples[0][0].rsplit('/', 2)[0]}",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'infer'}",
    )
    _ok(proc, "infer")
    with open(tmp_path / "infer/predictions.csv") as f:
        predicted = {row["path"]: float(row["top1_prob"]) for row in csv.DictReader(f)}
    with torch.no_grad():
        for index, (path, _) in enumerate(val.samples):
            probabilities = restored.model(val[index][0].unsqueeze(0)).softmax(-1)
            assert predicted[path] == pytest.approx(probabilities.max().item(), abs=1e-5), path


def test_the_fine_tuning_benchmark_runs(tmp_path):
    """Its shortest settings: four runs of a few steps on 4-8 images per class (2 epochs: the second is timed)."""
    pytest.importorskip("timm")
    quick = "--epochs 2 --images-per-class 4 --val-images 4 --source-images 8 --source-epochs 1"
    proc = run_python([*_page_args(BENCH), *shlex.split(quick)], cwd=tmp_path, env=script_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "(1) fine-tuned / scratch val accuracy:" in proc.stdout and "(3) preprocessing" in proc.stdout
