"""data.loader=device through the template against a hand-written loop fed by a DataLoader.

Same model, data, optimizer and LR schedule, in one process; the loops alternate so machine noise hits all of them.
The hand-written loop is what one writes by hand: forward, loss, backward, step over batches moved with
``.to(device)``, from a ``DataLoader(..., batch_size, shuffle=True, drop_last=True)`` over
  - without augmentation, either
    - TensorDataset: the split's normalized tensors, materialised once (the usual in-memory recipe), or
    - the template's own dataset, which already fetches a whole batch with one gather (a demanding baseline);
  - with augmentation (data.augment=true: the row "data=synthetic data.augment=true" is CIFAR-10's recipe, random
    crop after padding 4 + horizontal flip), either
    - per-sample torchvision: the split's images in memory, ``__getitem__`` applying ``v2.RandomCrop(size,
      padding)``, ``v2.RandomHorizontalFlip()`` and ``v2.Normalize`` as torchvision.datasets.CIFAR10(transform=...)
      does, with num_workers 0 and with 2 persistent workers (the same padding and flip as the template's
      augmentation, read from it), or
    - the template's own dataset, augmenting a whole batch at once (a demanding baseline).
The template runs the Trainer's epochs over ``DeviceLoader`` (the split on the device, batches cut and augmented
there). Prints, for each row, samples/s of each (best of the repeats, median and min: the spread), the loaders alone
(batches moved to the device, no model) and the ratios; then every row's ratios together (goal >= 1.5).

    python bench/device_loader.py [--epochs 3] [--repeats 5] [overrides ...]   the three rows below
    python bench/device_loader.py --rows "data=synthetic data.num_samples=8192" -- model=mlp trainer.device=cuda
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from torch.utils.data import DataLoader, Dataset, TensorDataset

import lab.config
from lab import runtime
from lab.data.datasets import build as build_data
from lab.data.device import DeviceLoader
from lab.models.common import build as build_model
from lab.optim.optimizers import build_optimizer
from lab.optim.schedulers import build_scheduler
from lab.tasks.common import build as build_task
from loop_overhead import HAND_LOSSES, hand_written, template_trainer

CONF = Path(__file__).resolve().parents[1] / "conf"
# synthetic: 3x32x32 images, CIFAR-sized; with data.augment=true, CIFAR-10's crop and flip
ROWS = ["data=digits", "data=synthetic", "data=synthetic data.augment=true"]
TEMPLATE = "template + data.loader=device"
cross_entropy = HAND_LOSSES["classification"]


class PerSampleAugmented(Dataset):
    """The hand-written augmented dataset: images in memory (in [0,1], as torchvision's CIFAR10 holds them before
    its transform), each sample transformed on its own in ``__getitem__``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform) -> None:
        self.images, self.labels, self.transform = images, labels.tolist(), transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.images[index]), self.labels[index]


def per_sample_transform(train, size: int):
    """torchvision's per-sample version of the template's batched augmentation (``train.augment``, a
    RandomShiftFlip): the same zero padding before normalization, uniform crop offsets, flip with probability 1/2."""
    from torchvision.transforms import v2

    augment = train.augment
    steps = [v2.RandomCrop(size, padding=augment.padding)] if augment.padding else []
    steps += [v2.RandomHorizontalFlip()] if augment.flip else []
    return v2.Compose([*steps, v2.Normalize(train.mean.tolist(), train.std.tolist())])


def hand_loaders(train, size: int, batch: int, pin: bool) -> dict[str, DataLoader]:
    """The DataLoaders a hand-written loop would use for this split, by name."""
    common = {"batch_size": batch, "shuffle": True, "drop_last": True, "pin_memory": pin}
    if train.augment is None:
        x, y = train.fetch(torch.arange(len(train)))  # normalized once: what a hand-written in-memory loop holds
        return {
            "TensorDataset": DataLoader(TensorDataset(x, y), **common),
            "template dataset": DataLoader(train, **common),
        }
    per_sample = PerSampleAugmented(train.images.float() / train.scale, train.labels, per_sample_transform(train, size))
    return {
        "per-sample v2, 0 workers": DataLoader(per_sample, **common),
        "per-sample v2, 2 workers": DataLoader(per_sample, num_workers=2, persistent_workers=True, **common),
        "template dataset": DataLoader(train, **common),
    }


def measure(args: argparse.Namespace, row: str) -> dict[str, float]:
    """One row (`row`'s overrides + the common ones): prints its table, returns its ratio to each baseline."""
    overrides = [*row.split(), *args.overrides]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "trainer.log_every_n_steps=50",
                "trainer.grad_clip=null",  # the hand-written loop does not clip
                "trainer.progress_bar=off",
                "data.loader=device",
                *overrides,
            ],
        )
    lab.config.validate(cfg)
    runtime.seed_everything(cfg.seed)
    device = runtime.select_device(cfg.trainer.device)
    precision = runtime.resolve_precision(cfg.precision, device)  # the hand-written loops' too
    datamodule = build_data(cfg.data)
    task = build_task(cfg.task, datamodule.meta)
    batch = cfg.data.batch_size
    pin = device.type == "cuda"
    train = datamodule.train
    baselines = hand_loaders(train, datamodule.meta["image_size"], batch, pin)
    batches = DeviceLoader(train, cfg.data, device, seed=cfg.seed, augment_seed=cfg.seed)
    template_model = build_model(cfg.model, datamodule.meta).to(device)
    plain_models = {name: copy.deepcopy(template_model) for name in baselines}
    steps_per_epoch = len(batches)
    total_steps = (args.epochs * args.repeats + 1) * steps_per_epoch

    def fresh(model):
        optimizer = build_optimizer(cfg.optimizer, model, cfg.model)
        return optimizer, build_scheduler(cfg.scheduler, optimizer, total_steps)

    plain = {name: (model, *fresh(model)) for name, model in plain_models.items()}
    for name, (model, optimizer, scheduler) in plain.items():  # warm-up (allocator, kernels)
        hand_written(model, baselines[name], optimizer, scheduler, device, 1, cross_entropy, precision)
    names = {name: f"hand-written + DataLoader({name})" for name in baselines}
    rates: dict[str, list[float]] = {**{label: [] for label in names.values()}, TEMPLATE: []}
    loader_rates: dict[str, list[float]] = {name: [] for name in [*baselines, "DeviceLoader"]}

    def timed(out: list[float], fn) -> None:
        start = time.perf_counter()
        samples = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append(samples / (time.perf_counter() - start))

    with tempfile.TemporaryDirectory() as run_dir:
        optimizer, scheduler = fresh(template_model)
        trainer = template_trainer(template_model, optimizer, scheduler, task, batches, cfg, device, run_dir)
        trainer.train_epoch(0)  # warm-up, as the hand-written loop had
        trainer.progress.batch_in_epoch, epoch = 0, 1

        def template() -> int:
            nonlocal epoch
            for _ in range(args.epochs):
                trainer.train_epoch(epoch)
                trainer.progress.batch_in_epoch, epoch = 0, epoch + 1
            return args.epochs * steps_per_epoch * batch

        for _ in range(args.repeats):
            for name, (model, optimizer, scheduler) in plain.items():
                loader = baselines[name]
                run = (model, loader, optimizer, scheduler, device, args.epochs, cross_entropy, precision)
                timed(rates[names[name]], lambda run=run: hand_written(*run) * batch)  # drop_last: full batches
                timed(loader_rates[name], lambda loader=loader: moved(loader, device))
            timed(rates[TEMPLATE], template)
            timed(loader_rates["DeviceLoader"], lambda: moved(batches.epoch(0), device))
        trainer.tracker.finish()

    augment = train.augment
    augmented = "no augmentation" if augment is None else f"augmented: crop after padding {augment.padding}"
    augmented += " + horizontal flip" if augment is not None and augment.flip else ""
    print(
        f"\n=== row [{row}] model={cfg.model.name}: {cfg.data.name} {datamodule.meta['input_shape']}, {augmented}; "
        f"train={len(train)} batch={batch} device={device} steps/epoch={steps_per_epoch} epochs={args.epochs} "
        f"repeats={args.repeats}"
    )
    for name, values in rates.items():
        print(f"{name:>42}: {spread(values)}")
    for name, values in loader_rates.items():
        print(f"{'loader alone, ' + name:>42}: {spread(values)}")
    ratios = {name: max(rates[TEMPLATE]) / max(rates[label]) for name, label in names.items()}
    for name, label in names.items():
        paired = sorted(t / h for h, t in zip(rates[label], rates[TEMPLATE], strict=True))
        print(
            f"ratio [{row}] template+device / hand-written+DataLoader({name}): {ratios[name]:.2f} "
            f"(best vs best; per repeat {paired[0]:.2f}..{paired[-1]:.2f})"
        )
    return ratios


def spread(values: list[float]) -> str:
    return f"{max(values):9.0f} samples/s (best; median {statistics.median(values):.0f}, min {min(values):.0f})"


def moved(batches, device: torch.device) -> int:
    """The loader alone: every batch on the device, nothing computed."""
    samples = 0
    for inputs, targets in batches:
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        samples += len(targets)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", nargs="*", default=ROWS, help="one quoted string of overrides per row")
    parser.add_argument("overrides", nargs="*", help="applied to every row, e.g. model=mlp trainer.device=cuda")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ratios = {row: measure(args, row) for row in args.rows}
    print(
        f"\n=== ratios, template + data.loader=device / hand-written + DataLoader, best vs best (goal >= 1.5); "
        f"common overrides: {' '.join(args.overrides) or 'none'}"
    )
    for row, by_baseline in ratios.items():
        for name, ratio in by_baseline.items():
            baseline = f"vs hand-written + DataLoader({name})"
            print(f"{row:>34}  {baseline:<56} {ratio:5.2f}")


if __name__ == "__main__":
    main()
