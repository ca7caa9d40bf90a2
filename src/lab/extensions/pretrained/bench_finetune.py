"""Benchmark fine-tuning a timm model against training it from scratch on a small image folder.

It also compares seconds per epoch with the shipped CNN and shows the preprocessing a fine-tuning run records
(issue 23's "Measure and report").

    python -m lab.extensions.pretrained.bench_finetune [--epochs 20] [--images-per-class 12] [--val-images 40]
        [--source-images 100] [--source-epochs 15] [--image-size 32] [--arch test_resnet] [--threads 1] [overrides ...]

No pretrained weights can be downloaded here, so the script makes its own. It writes two folders of PNG images in a
temporary directory: coloured shapes at random places, sizes and angles on striped, noisy backgrounds of random
colours, so only the shape tells the class.
  - The *source* task: six filled shapes and lines (circle, ring, square, triangle, cross, bar), --source-images
    per class, train/ only. The run holds out a stratified data.val_fraction.
  - The *target* task: four other shapes (star, hexagon, square and triangle outlines), --images-per-class per
    class in train/, and --val-images per class in val/ to score on.
Then it runs scripts/train.py's workflow four times in this process (`lab.workflows.train.run`):
  1. source: `model=timm model.arch=<arch> model.pretrained=false` on the source task, --source-epochs;
  2. fine-tuned: `experiment=finetune_folder model.arch=<arch> model.weights_path=<1's best.pt>` on the target
     task, so the backbone comes from run 1 with a new 4-class head;
  3. from scratch: the same recipe with `model.pretrained=false`, so only the initial weights differ;
  4. `model=cnn` on the target task with the same recipe, for seconds per epoch. It needs its own optimizer keys
     because finetune_folder is a timm preset.
The recipe is finetune_folder's with a batch of 16 and 2 warmup steps, since an epoch of 48 images is 3 steps.
Every run uses `logger=none` and `data.num_workers=0`: workers only cost time on images this small.
Runs 2-4 train for --epochs. Each reports val/acc_best and the median seconds of its training passes after the
first epoch (`EpochClock` below: validation and checkpoint writes are not counted). Runs 1, 3 and 4 set timm's
pretrained preprocessing of <arch> (crop_pct, interpolation, mean, std) explicitly. The fine-tuning run leaves those
keys null so it fills them itself, and table (3) shows what its checkpoint's `data_meta` holds. Every run sets
data.image_size (--image-size), since the pretrained 160 px would cost minutes here.

Prints the table and two ratios: fine-tuned / scratch validation accuracy, and timm / cnn seconds per epoch. Torch
runs one thread by default (--threads). On a shared 2-core machine, two threads made steps 3-5x slower and erratic,
while one thread's time is steady. --threads 0 keeps torch's default.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import MISSING
from PIL import Image, ImageDraw

from lab.config import CallbackConfig, validate
from lab.data.options import ImageFolderConfig
from lab.training.callbacks import Callback
from lab.workflows.train import run

CONF = Path(__file__).resolve().parents[4] / "conf"  # the repository's, which includes this folder's presets
SOURCE_CLASSES = ("circle", "ring", "square", "triangle", "cross", "bar")
TARGET_CLASSES = ("star", "hexagon", "square_outline", "triangle_outline")
PREPROCESSING = ("image_size", "crop_pct", "interpolation", "mean", "std")
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")  # state dict tensors that are not parameters


def polygon(cx: float, cy: float, r: float, corners: int, angle: float, star: bool = False) -> list[tuple]:
    points = 2 * corners if star else corners
    radii = [r * (0.45 if star and i % 2 else 1.0) for i in range(points)]
    return [
        (
            cx + radius * math.cos(angle + 2 * math.pi * i / points),
            cy + radius * math.sin(angle + 2 * math.pi * i / points),
        )
        for i, radius in enumerate(radii)
    ]


def draw(shape: str, rng: np.random.Generator, size: int) -> Image.Image:
    """Draw one shape of random colour, place, size and angle on a striped, noisy two-colour background."""
    back, stripes = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    y, x = np.mgrid[0:size, 0:size] * (32 / size)  # the stripes' width relative to the image
    direction, frequency = rng.uniform(0, math.pi), rng.uniform(0.15, 0.6)
    share = (np.sin((x * math.cos(direction) + y * math.sin(direction)) * frequency) + 1) / 2 * rng.uniform(0.1, 0.25)
    pixels = back * (1 - share[..., None]) + stripes * share[..., None] + rng.normal(0, 8, (size, size, 3))
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    colour = rng.integers(0, 256, 3)
    while np.abs(colour - back).sum() < 150:  # the shape stands out from the background
        colour = rng.integers(0, 256, 3)
    fill = tuple(int(c) for c in colour)
    r = rng.uniform(0.3, 0.42) * size  # at 32 px a smaller shape takes several times the steps to learn
    cx, cy = rng.uniform(r + 1, size - r - 1, 2)
    angle, width = rng.uniform(0, 2 * math.pi), max(2, round(r / 3))
    pen = ImageDraw.Draw(image)
    if shape in ("circle", "ring"):
        box = [cx - r, cy - r, cx + r, cy + r]
        pen.ellipse(box, fill=fill) if shape == "circle" else pen.ellipse(box, outline=fill, width=width)
    elif shape in ("cross", "bar"):
        for a in (angle, angle + math.pi / 2) if shape == "cross" else (angle,):
            ends = [(cx - r * math.cos(a), cy - r * math.sin(a)), (cx + r * math.cos(a), cy + r * math.sin(a))]
            pen.line(ends, fill=fill, width=width)
    else:
        corners = {"square": 4, "triangle": 3, "star": 5, "hexagon": 6}[shape.removesuffix("_outline")]
        points = polygon(cx, cy, r, corners, angle, star=shape == "star")
        pen.polygon(points, outline=fill, width=width) if shape.endswith("_outline") else pen.polygon(points, fill=fill)
    return image


def write_folder(root: Path, classes: tuple[str, ...], counts: dict[str, int], size: int, seed: int) -> Path:
    """Write root/<split>/<class>/<i>.png for each split in `counts`."""
    rng = np.random.default_rng(seed)
    for split, count in counts.items():
        for name in classes:
            folder = root / split / name
            folder.mkdir(parents=True)
            for index in range(count):
                draw(name, rng, size).save(folder / f"{index}.png")
    return root


class EpochClock(Callback):
    """Trainer callback that times each training pass and appends the seconds to the JSON list in `path`.

    A pass is `Trainer.train_epoch`: loading batches and taking steps, not validation or checkpoint writes. The
    wrapper goes in at the end of the first validation, so the first epoch's one-off start-up is not counted."""

    def __init__(self, path: str) -> None:
        self.path, self.times = Path(path), list[float]()

    def on_validation_end(self, trainer: Any, metrics: dict, epoch: int) -> None:
        if "train_epoch" in vars(trainer):  # wrapped already
            return
        train_epoch = trainer.train_epoch

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            finished = train_epoch(*args, **kwargs)
            self.times.append(time.perf_counter() - started)
            self.path.write_text(json.dumps(self.times))
            return finished

        trainer.train_epoch = timed


@dataclass
class EpochClockConfig(CallbackConfig):
    """Config for `+callbacks.epoch_clock={path: ...}`, defined only in this benchmark's process."""

    path: str = MISSING

    def build(self, trainer: Any) -> EpochClock:
        return EpochClock(self.path)


def preprocessing(arch: str) -> dict[str, Any]:
    """Return the preprocessing the data takes from `arch`'s pretrained config, read by TimmConfig.preprocessing."""
    from lab.extensions.pretrained.options import TimmConfig

    pretrained = TimmConfig(name="timm", arch=arch).preprocessing()
    assert pretrained is not None  # model.pretrained's default: true
    return pretrained


def train(run_dir: Path, overrides: list[str]) -> dict:
    """Run the training workflow in this process and return its val/acc_best, median s/epoch and data_meta."""
    clock = run_dir.with_suffix(".epochs.json")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "logger=none",
                "trainer.progress_bar=off",
                "data.num_workers=0",
                f"+callbacks.epoch_clock={{path: '{clock}'}}",
                *overrides,
            ],
        )
    validate(cfg)
    started = time.perf_counter()
    run(cfg, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    best = run_dir / "checkpoints" / "best.pt"
    checkpoint = torch.load(best, map_location="cpu", weights_only=True)
    epochs = json.loads(clock.read_text()) if clock.exists() else []
    return {
        "acc": summary["val/acc_best"],
        "epochs": epochs,
        "s_per_epoch": statistics.median(epochs) if epochs else math.nan,
        "wall": time.perf_counter() - started,
        "best": best,
        "params": sum(t.numel() for name, t in checkpoint["model"].items() if not name.endswith(BUFFERS)),
        "data_meta": checkpoint["data_meta"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="test_resnet", help="a timm architecture with a pretrained config")
    parser.add_argument("--epochs", type=int, default=20, help="epochs of each target run (>= 2: the first is untimed)")
    parser.add_argument("--images-per-class", type=int, default=12, help="target training images per class")
    parser.add_argument("--val-images", type=int, default=40, help="target validation images per class")
    parser.add_argument("--source-images", type=int, default=100, help="source images per class (before the hold-out)")
    parser.add_argument("--source-epochs", type=int, default=15)
    parser.add_argument("--image-size", type=int, default=32, help="data.image_size of every run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default, one per core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="added to every run (e.g. data.batch_size=16)")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the first epoch is not timed")
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    pretrained = preprocessing(args.arch)
    explicit = [f"data.{key}={pretrained[key]}".replace(" ", "") for key in PREPROCESSING[1:]]
    common = [f"seed={args.seed}", f"data.image_size={args.image_size}", *args.overrides]
    # the fine-tuning recipe on a few images: warmup and batch sized to the few steps an epoch has
    recipe = [
        "experiment=finetune_folder",
        f"trainer.max_epochs={args.epochs}",
        f"data.batch_size={min(16, len(TARGET_CLASSES) * args.images_per_class)}",
        "scheduler.warmup_steps=2",
        *common,
    ]
    # the same recipe for the shipped CNN; finetune_folder is a timm preset, so set its optimizer keys here
    cnn_recipe = [
        "data=image_folder",
        "optimizer.lr=3e-4",
        "optimizer.weight_decay=0.05",
        "optimizer.head_lr_scale=10",
        *recipe[1:],
    ]
    source_images = len(SOURCE_CLASSES) * args.source_images
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        size = args.image_size
        source = write_folder(root / "source", SOURCE_CLASSES, {"train": args.source_images}, size, args.seed)
        counts = {"train": args.images_per_class, "val": args.val_images}
        target = write_folder(root / "target", TARGET_CLASSES, counts, size, args.seed + 1)
        images = len(SOURCE_CLASSES) * args.source_images + len(TARGET_CLASSES) * sum(counts.values())
        print(f"wrote {images} PNG images in {time.perf_counter() - started:.1f} s")
        source_run = train(
            root / "source_run",
            [
                "data=image_folder",
                "model=timm",
                f"model.arch={args.arch}",
                "model.pretrained=false",
                f"data.root={source}",
                f"trainer.max_epochs={args.source_epochs}",
                f"data.batch_size={min(32, source_images - math.ceil(source_images * ImageFolderConfig.val_fraction))}",
                *explicit,
                *common,
            ],
        )
        on_target = [f"data.root={target}", f"model.arch={args.arch}"]
        rows = {
            "fine-tuned": train(root / "finetuned", [*recipe, *on_target, f"model.weights_path={source_run['best']}"]),
            "from scratch": train(root / "scratch", [*recipe, *on_target, "model.pretrained=false", *explicit]),
            "cnn": train(root / "cnn", [*cnn_recipe, f"data.root={target}", "model=cnn", *explicit]),
        }
    report(args, source_run, rows, pretrained)


def report(args: argparse.Namespace, source_run: dict, rows: dict[str, dict], pretrained: dict[str, Any]) -> None:
    print(
        f"source task: {len(SOURCE_CLASSES)} shapes x {args.source_images} images, {args.source_epochs} epochs from "
        f"scratch: val/acc_best {source_run['acc']:.3f} ({source_run['wall']:.1f} s)"
    )
    print(
        f"target task: {len(TARGET_CLASSES)} other shapes x {args.images_per_class} training images "
        f"(val: {args.val_images} per class), {args.epochs} epochs each, {args.image_size} px, torch threads "
        f"{torch.get_num_threads()}"
    )
    print(f"{'run':<14} {'model':<22} {'params':>8} {'val/acc_best':>12} {'s/epoch':>8} {'run s':>6}")
    models = {"fine-tuned": f"timm {args.arch}", "from scratch": f"timm {args.arch}", "cnn": "cnn (shipped)"}
    for name, row in rows.items():
        print(
            f"{name:<14} {models[name]:<22} {row['params']:>8,} {row['acc']:>12.3f} {row['s_per_epoch']:>8.3f} "
            f"{row['wall']:>6.1f}"
        )
    tuned, scratch, cnn = rows["fine-tuned"], rows["from scratch"], rows["cnn"]
    print(f"(1) fine-tuned / scratch val accuracy: {tuned['acc'] / max(scratch['acc'], 1e-9):.2f}")
    timm_epoch = statistics.median(tuned["epochs"] + scratch["epochs"])  # both timm runs' timed epochs
    print(
        f"(2) timm {args.arch} / cnn seconds per epoch: {timm_epoch / cnn['s_per_epoch']:.2f} "
        f"({timm_epoch:.3f} s / {cnn['s_per_epoch']:.3f} s, median of {len(tuned['epochs']) * 2} and "
        f"{len(cnn['epochs'])} epochs)"
    )
    meta = tuned["data_meta"]
    print(f"(3) preprocessing in the fine-tuning run's checkpoint (data_meta), against timm's config of {args.arch}:")
    for key in PREPROCESSING:
        source = (
            "= the pretrained config" if meta.get(key) == pretrained[key] else f"set (pretrained: {pretrained[key]})"
        )
        print(f"    {key:<13} {meta.get(key)!s:<22} {source}")


if __name__ == "__main__":
    main()
