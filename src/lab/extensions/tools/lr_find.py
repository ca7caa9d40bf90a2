"""LR range test (Smith 2015, fastai's lr_find).

Train a copy of the model for a few steps while the learning rate grows exponentially. Stop once the loss diverges
and suggest the LR where the loss falls fastest.

    python -m lab.extensions.tools.lr_find [train overrides ...] [--start-lr 1e-7] [--end-lr 10] [--steps 100]

Every train override works (`experiment=char_lm`, `model=mlp optimizer=sgd`, `data.batch_size=128`...). The sweep
stops when the smoothed loss exceeds --diverge times its best. The run dir (outputs/lr_find/<stamp>/) gets
lr_find.png (loss vs LR, suggestion marked) and lr_find.json. The suggested LR and its override are printed.

`range_test` is the method. It trains a deep copy with a fresh optimizer, so the model, optimizer and global RNG
streams it is given stay untouched. `run` is the command built on the train config. torch is imported only once
the config is checked, so `--help` and `--cfg job` stay fast.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import logging
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
import numpy as np
from omegaconf import DictConfig

from lab import cli
from lab.errors import UserError
from lab.files import write_json

if TYPE_CHECKING:  # torch is imported where used, so flags are checked without it
    import torch
    from torch import nn

log = logging.getLogger(__name__)

JSON_FILE = "lr_find.json"
PLOT_FILE = "lr_find.png"


@dataclass
class Options:
    start_lr: float = 1e-7
    end_lr: float = 10.0
    steps: int = 100  # at most, one batch each; stops earlier if the loss diverges
    diverge: float = 4.0  # stop when the smoothed loss exceeds this many times the best one
    smoothing: float = 0.9  # of the loss's moving average (0 = raw losses)

    def __post_init__(self) -> None:
        if not 0 < self.start_lr < self.end_lr:
            raise UserError(f"--start-lr must be > 0 and below --end-lr, got {self.start_lr} and {self.end_lr}")
        if self.steps < 5:
            raise UserError(f"--steps must be >= 5, got {self.steps}")
        if self.diverge <= 1:
            raise UserError(f"--diverge must be > 1, got {self.diverge}")
        if not 0 <= self.smoothing < 1:
            raise UserError(f"--smoothing must be in [0, 1), got {self.smoothing}")


@dataclass
class Result:
    lrs: list[float]  # the LR of each step taken
    losses: list[float]  # the loss of each step's batch (mean per sample or token)
    smoothed: list[float]  # their bias-corrected exponential moving average
    suggestion: float | None  # steepest descent of the smoothed loss, None if too few steps
    min_loss_lr: float  # where the smoothed loss was lowest
    stopped: str  # "diverged" | "non-finite loss" | "end of range"
    optimizer: str  # the class that trained the copy, e.g. AdamW

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def exponential_lrs(start: float, end: float, steps: int) -> list[float]:
    """`steps` LRs from start to end, evenly spaced on a log scale."""
    ratio = end / start
    return [start * ratio ** (i / (steps - 1)) for i in range(steps)]


def suggest(lrs: Sequence[float], smoothed: Sequence[float]) -> float | None:
    """Return the LR where the smoothed loss falls fastest against log(LR).

    The search skips the noisy first tenth of the sweep and ends at the lowest loss. If that stretch is too short,
    return a tenth of the lowest loss's LR. Return None with fewer than 5 points."""
    n = len(smoothed)
    if n < 5:
        return None
    lowest = int(np.argmin(smoothed))
    start = max(1, n // 10)
    if lowest - start < 3:
        return lrs[lowest] / 10
    x = np.log10(np.asarray(lrs[start : lowest + 1], dtype=np.float64))
    slope = np.gradient(np.asarray(smoothed[start : lowest + 1], dtype=np.float64), x)
    return float(lrs[start + int(np.argmin(slope))])


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def range_test(
    model: nn.Module,
    task: Any,
    batches: Iterator[Any],
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    *,
    device: torch.device,
    options: Options | None = None,
    autocast: Callable[[], Any] | None = None,
    grad_clip: float | None = None,
    grad_scaler: bool = False,
    on_step: Callable[[int, float, float, float], None] | None = None,
) -> Result:
    """Sweep the LR over a deep copy of `model`, trained by `make_optimizer(copy)`.

    `model` and the global RNG states are left as they were: dropout in the copy draws from a forked stream.
    `autocast()` returns the precision's context and `grad_scaler` scales float16 losses as training does.
    `on_step(step, lr, loss, smoothed)` is called after each step."""
    import torch
    from torch import nn

    from lab.data.batches import split as split_batch
    from lab.data.batches import to_device

    options = options or Options()
    lrs = exponential_lrs(options.start_lr, options.end_lr, options.steps)
    trial = copy.deepcopy(model).train()
    optimizer = make_optimizer(trial)
    scaler = torch.amp.GradScaler(device.type, enabled=grad_scaler)
    taken, losses, smoothed = [], [], []
    best, average, stopped = math.inf, 0.0, "end of range"
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        for step, lr in enumerate(lrs):
            set_lr(optimizer, lr)
            inputs, targets = to_device(split_batch(next(batches)), device)
            with autocast() if autocast is not None else torch.autocast(device.type, enabled=False):
                outputs = trial(inputs)
            loss = task.loss(outputs, targets) / task.weight(targets)  # per sample/token
            scaler.scale(loss).backward()
            if grad_clip is not None:
                scaler.unscale_(optimizer)  # clip the true gradient norm
                nn.utils.clip_grad_norm_(trial.parameters(), grad_clip)
            scaler.step(optimizer)  # skips the update when float16 gradients overflowed
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            value = float(loss.detach())
            if not math.isfinite(value):
                stopped = "non-finite loss"
                break
            average = options.smoothing * average + (1 - options.smoothing) * value
            current = average / (1 - options.smoothing ** (step + 1))
            taken.append(lr)
            losses.append(value)
            smoothed.append(current)
            if on_step is not None:
                on_step(step, lr, value, current)
            best = min(best, current)
            if current > options.diverge * best:
                stopped = "diverged"
                break
    if not taken:
        raise UserError(
            f"the loss was not finite at the first step (lr {lrs[0]:.2e}): check the data and the model with "
            "`python scripts/train.py debug=[fast,anomaly]`"
        )
    lowest = int(np.argmin(smoothed))
    kind = type(optimizer).__name__
    return Result(taken, losses, smoothed, suggest(taken, smoothed), taken[lowest], stopped, kind)


# --------------------------------------------------------------------------- the plot
def lr_find_png(result: Result, path: str | Path, title: str = "") -> Path:
    """Plot loss against log LR: raw losses grey, smoothed loss blue, suggestion red."""
    from PIL import Image, ImageDraw

    from lab.tasks.figures import draw_text, load_font, paste_vertical

    width, height, left, top, right, bottom = 640, 360, 72, 48, 24, 56
    lrs, smoothed = np.log10(result.lrs), result.smoothed
    low, high = min(*smoothed, *result.losses), max(*smoothed, result.losses[0])  # raw spikes are clipped
    span = (high - low) or max(abs(high), 1.0)
    low, high = low - 0.05 * span, high + 0.1 * span
    x0, x1 = math.floor(lrs.min()), math.ceil(lrs.max())
    x1 = x1 if x1 > x0 else x0 + 1

    def at(log_lr: float, loss: float) -> tuple[float, float]:
        y = min(max(loss, low), high)  # raw losses outside the smoothed range are drawn on its edge
        return left + (log_lr - x0) / (x1 - x0) * width, top + height - (y - low) / (high - low) * height

    font = load_font(12)
    image = Image.new("RGB", (left + width + right, top + height + bottom), "white")
    draw = ImageDraw.Draw(image)
    draw.text((8, 4), title, fill="black", font=font)
    draw.rectangle([left, top, left + width, top + height], outline="black")
    for decade in range(x0, x1 + 1):
        x, _ = at(decade, low)
        draw.line([(x, top + height), (x, top + height + 4)], fill="black")
        draw_text(draw, (x, top + height + 14), f"1e{decade}", font, "black", "center")
    for value in (low, (low + high) / 2, high):
        _, y = at(x0, value)
        draw_text(draw, (left - 6, y), f"{value:.3g}", font, "black", "right")
    draw_text(draw, (left + width / 2, top + height + 38), "learning rate (log scale)", font, "black", "center")
    paste_vertical(image, "loss", font, (14, top + height / 2))
    draw.line([at(x, y) for x, y in zip(lrs, result.losses)], fill=(190, 190, 190), width=1)
    draw.line([at(x, y) for x, y in zip(lrs, smoothed)], fill=(40, 80, 200), width=2)
    if result.suggestion is not None:
        index = int(np.argmin(np.abs(np.asarray(result.lrs) - result.suggestion)))
        x, y = at(math.log10(result.suggestion), smoothed[index])
        draw.line([(x, top), (x, top + height)], fill=(200, 60, 60), width=1)
        draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=(200, 60, 60))
        label = f"suggested lr {result.suggestion:.2e}"
        align = "left" if x < left + width - 160 else "right"
        draw_text(draw, (x + 6 if align == "left" else x - 6, top + 12), label, font, (200, 60, 60), align)
    path = Path(path)
    image.save(path)
    return path


# --------------------------------------------------------------------------- the command
def _forever(loader: Any) -> Iterator[Any]:
    """Yield the loader's batches epoch after epoch, as long as the sweep asks."""
    return itertools.chain.from_iterable(loader for _ in itertools.count())


def run(cfg: Any, run_dir: str | Path, options: Options) -> Result:
    """Run the LR range test on the train config and write lr_find.json and lr_find.png into `run_dir`.

    It uses the config's shuffled training split, task, model, precision and gradient clipping, with a fresh
    optimizer of the configured kind. One process, one device, one batch per step (no accumulation)."""
    import torch
    from omegaconf import OmegaConf

    from lab import runtime, tracking
    from lab.config.options import instantiate
    from lab.data.datasets import build as build_data
    from lab.data.loaders import make_loader
    from lab.models.common import build as build_model
    from lab.models.common import prepare as prepare_model
    from lab.optim.optimizers import build_optimizer
    from lab.tasks.common import build as build_task
    from lab.tracking import provenance

    run_dir = Path(run_dir)
    runtime.seed_everything(cfg.seed)
    device = runtime.select_device(cfg.trainer.device)
    runtime.configure_backends(cfg.trainer, device)
    precision = runtime.resolve_precision(cfg.precision, device)
    if instantiate("dist", cfg.dist).spawns_ranks or cfg.trainer.grad_accum_steps > 1:
        log.info(
            "lr_find runs one process with one batch of data.batch_size=%d per step: with dist.lr_scaling the "
            "trainer scales the LR you set from there; without it, retune for the larger effective batch",
            cfg.data.batch_size,
        )

    datamodule = build_data(prepare_model(cfg.model, cfg.data))
    task = build_task(cfg.task, datamodule.meta, datamodule.train)
    pin = cfg.data.pin_memory if cfg.data.pin_memory is not None else device.type == "cuda"
    generator = torch.Generator().manual_seed(cfg.seed)
    loader = make_loader(
        datamodule.train, cfg.data, train=True, generator=generator, pin_memory=pin, collate=datamodule.train_collate
    )
    model = build_model(cfg.model, datamodule.meta).to(device)
    model = runtime.apply_channels_last(model, cfg.trainer.channels_last, shards_weights=False)  # one process
    optimizer_cfg = OmegaConf.merge(cfg.optimizer, {"lr": options.start_lr})

    tracker = tracking.from_config(cfg, run_dir, "lr_find", provenance.collect())
    with tracker.session():

        def record(step: int, lr: float, loss: float, smoothed: float) -> None:
            tracker.log({"lr_find/lr": lr, "lr_find/loss": loss, "lr_find/smoothed_loss": smoothed}, step=step)

        result = range_test(
            model,
            task,
            _forever(loader),
            lambda trial: build_optimizer(optimizer_cfg, trial, cfg.model, device),
            device=device,
            options=options,
            autocast=lambda: precision.autocast(device),
            grad_clip=cfg.trainer.grad_clip,
            grad_scaler=precision.grad_scaler,
            on_step=record,
        )
        write_json(run_dir / JSON_FILE, {**result.to_json(), "options": asdict(options)})
        title = f"LR range test: {cfg.model.name} on {cfg.data.name}, {result.optimizer}, batch {cfg.data.batch_size}"
        lr_find_png(result, run_dir / PLOT_FILE, title)
        for name in (JSON_FILE, PLOT_FILE):
            tracker.save_file(run_dir / name)
        tracker.summary({"lr_find/suggestion": result.suggestion, "lr_find/min_loss_lr": result.min_loss_lr})
    _report(result, run_dir, cfg.optimizer.lr)
    return result


def _report(result: Result, run_dir: Path, configured: float) -> None:
    end = f"{result.stopped} at lr {result.lrs[-1]:.2e} after {len(result.lrs)} steps"
    print(f"lr_find: {end}; lowest smoothed loss {min(result.smoothed):.4g} at lr {result.min_loss_lr:.2e}")
    if result.suggestion is None:
        print("lr_find: too few steps to suggest an LR; widen the range or raise --steps")
    else:
        print(f"suggested lr: {result.suggestion:.2e} (steepest descent of the loss; configured {configured:.2e})")
        print(f"use: optimizer.lr={result.suggestion:.2e}")
    print(f"lr_find: {run_dir / PLOT_FILE}  {run_dir / JSON_FILE}")


HELP = {
    "start_lr": "first LR of the sweep",
    "end_lr": "last LR of the sweep",
    "steps": "batches (optimizer steps) at most",
    "diverge": "stop once the smoothed loss exceeds this many times its best",
    "smoothing": "factor of the loss's exponential moving average (0 = none)",
}


def parse_options(argv: list[str]) -> tuple[Options, list[str]]:
    """Split the command line into the tool's --flags and the rest, which goes to Hydra."""
    parser = argparse.ArgumentParser(
        prog="python -m lab.extensions.tools.lr_find",
        usage="python -m lab.extensions.tools.lr_find [train overrides ...] [--start-lr LR] [--end-lr LR] "
        "[--steps N] ...",
        add_help=False,
        allow_abbrev=False,
    )
    for field in fields(Options):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, dest=field.name, type=type(field.default), default=argparse.SUPPRESS,
                            help=f"{HELP[field.name]} (default {field.default:g})")  # fmt: skip
    if {"-h", "--help"} & set(argv):
        print(parser.format_help())  # then Hydra's help: the train overrides
    ours, rest, tokens = [], [], iter(argv)
    flags = {"--" + field.name.replace("_", "-") for field in fields(Options)}
    for token in tokens:  # Hydra's arguments keep their order (`--cfg job`, `-m a=1,2`)
        if token.split("=", 1)[0] in flags:
            ours += [token] if "=" in token else [token, next(tokens, "")]
        else:
            rest.append(token)
    return Options(**vars(parser.parse_args(ours))), rest


OPTIONS = Options()


@hydra.main(config_path=str(Path(__file__).resolve().parents[4] / "conf"), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from lab.config import validate

    with cli.user_errors():
        validate(cfg)
        return run(cfg, HydraConfig.get().runtime.output_dir, OPTIONS).suggestion


if __name__ == "__main__":
    try:
        OPTIONS, hydra_args = parse_options(sys.argv[1:])
    except UserError as err:
        sys.exit(f"error: {err}")
    if not any(arg.startswith("task_name=") for arg in hydra_args):
        hydra_args.append("task_name=lr_find")  # run dirs under outputs/lr_find/
    sys.argv = [sys.argv[0], *hydra_args]
    cli.main(main, "lr_find")
