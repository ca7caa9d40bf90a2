"""Training-step overhead of the template's Trainer against a minimal hand-written PyTorch loop.

Same model, data, loader, optimizer and LR schedule, in one process; the loops alternate so machine noise hits
all of them. Prints steps/s and the ratio to the hand-written loop of (a) the template's step loop with logging
every 50 steps (goal >= 0.95) and (b) its whole fit(), which also writes last.pt after every epoch.

    python bench/loop_overhead.py [--epochs 5] [--repeats 3] [overrides ...]   e.g. model=mlp data=synthetic
    python bench/loop_overhead.py --all-tasks     one row per shipped task: classification, regression, LM

The hand-written loop computes each task's loss the way one writes it by hand (cross-entropy, MSE, token
cross-entropy); the template goes through the Task interface, token weights and accumulation groups included.
"""

from __future__ import annotations

import argparse
import copy
import logging
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir

import lab.config
from lab import runtime
from lab.checkpointing import CheckpointManager
from lab.data.datasets import build as build_data
from lab.data.loaders import EpochLoader, make_loader
from lab.distributed.parallel import Parallel
from lab.models.common import build as build_model
from lab.optim.optimizers import build_optimizer
from lab.optim.schedulers import build_scheduler
from lab.tasks.common import build as build_task
from lab.tracking import Tracker
from lab.training.trainer import Trainer

CONF = Path(__file__).resolve().parents[1] / "conf"


# task -> the loss as one writes it in a hand-written loop
HAND_LOSSES = {
    "classification": lambda out, y: F.cross_entropy(out, y),
    "regression": lambda out, y: F.mse_loss(out.reshape(y.shape), y),
    "language_model": lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)),
}
TASK_ROWS = {  # --all-tasks: the shipped experiment of each task
    "classification": [],
    "regression": ["experiment=diabetes_regression"],
    "language_model": ["experiment=char_lm", "data.max_chars=60000"],
}


def hand_written(model, loader, optimizer, scheduler, device, epochs: int, loss_fn, precision) -> int:
    """The loop a careful user writes by hand: nothing but the math, in the run's precision (autocast, and a
    GradScaler where the precision needs one, as torch's AMP recipe writes it)."""
    model.train()
    scaler = torch.amp.GradScaler(device.type) if precision.grad_scaler else None
    steps = 0
    for _ in range(epochs):
        for inputs, targets in loader:
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            with precision.autocast(device):
                loss = loss_fn(model(inputs), targets)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            steps += 1
    return steps


def template_trainer(model, optimizer, scheduler, task, batches, cfg, device, run_dir) -> Trainer:
    """The template's Trainer over `batches` as a run builds it, minus validation and trackers (the run dir's
    metrics.jsonl only)."""
    return Trainer(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        task=task,
        train_batches=batches,
        val_loader=None,
        device=device,
        precision=runtime.resolve_precision(cfg.precision, device),
        cfg=cfg.trainer,
        tracker=Tracker(run_dir).start(),
        checkpoints=CheckpointManager(run_dir, Parallel()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all-tasks", action="store_true", help="one row per shipped task (ignores overrides)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for overrides in TASK_ROWS.values() if args.all_tasks else [args.overrides]:
        measure(args, overrides)


def measure(args: argparse.Namespace, overrides: list[str]) -> None:

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "trainer.log_every_n_steps=50",
                "trainer.grad_clip=null",
                "trainer.progress_bar=off",
                f"trainer.max_epochs={args.epochs}",
                *overrides,
            ],
        )
    lab.config.validate(cfg)
    runtime.seed_everything(cfg.seed)
    device = runtime.select_device(cfg.trainer.device)
    precision = runtime.resolve_precision(cfg.precision, device)
    datamodule = build_data(cfg.data)
    generator = torch.Generator().manual_seed(cfg.seed)
    loader = make_loader(datamodule.train, cfg.data, train=True, generator=generator, pin_memory=device.type == "cuda")
    task = build_task(cfg.task, datamodule.meta)
    loss_fn = HAND_LOSSES[cfg.task.name]
    template_model = build_model(cfg.model, datamodule.meta).to(device)
    plain_model = copy.deepcopy(template_model)
    total_steps = args.epochs * len(loader) * args.repeats

    def fresh(model):
        optimizer = build_optimizer(cfg.optimizer, model, cfg.model)
        return optimizer, build_scheduler(cfg.scheduler, optimizer, total_steps)

    plain_opt, plain_sched = fresh(plain_model)
    hand_written(
        plain_model, loader, plain_opt, plain_sched, device, 1, loss_fn, precision
    )  # warm-up (allocator, kernels)
    best = {"hand-written": 0.0, "template steps": 0.0, "template fit": 0.0}

    def timed(name: str, fn) -> None:
        start = time.perf_counter()
        steps = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best[name] = max(best[name], steps / (time.perf_counter() - start))

    with tempfile.TemporaryDirectory() as run_dir:
        for _ in range(args.repeats):
            timed(
                "hand-written",
                lambda: hand_written(
                    plain_model, loader, plain_opt, plain_sched, device, args.epochs, loss_fn, precision
                ),
            )
            for name in ("template steps", "template fit"):
                optimizer, scheduler = fresh(template_model)
                batches = EpochLoader(loader, generator, seed=cfg.seed)
                trainer = template_trainer(template_model, optimizer, scheduler, task, batches, cfg, device, run_dir)

                def steps(trainer=trainer, name=name) -> int:
                    if name == "template fit":  # + the per-epoch last.pt checkpoint
                        trainer.fit()
                    else:
                        for epoch in range(args.epochs):
                            trainer.train_epoch(epoch)
                            trainer.progress.batch_in_epoch = 0
                    return trainer.progress.global_step

                timed(name, steps)
                trainer.tracker.finish()

    print(
        f"task={cfg.task.name} model={cfg.model.name} data={cfg.data.name} batch={cfg.data.batch_size} device={device} "
        f"precision={precision.name} steps/epoch={len(loader)} epochs={args.epochs} repeats={args.repeats}"
    )
    for name, value in best.items():
        print(f"{name:>15}: {value:8.1f} steps/s")
    for name in ("template steps", "template fit"):
        print(f"ratio {name}/hand-written: {best[name] / best['hand-written']:.3f}")


if __name__ == "__main__":
    main()
