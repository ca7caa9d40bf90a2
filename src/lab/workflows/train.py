"""Orchestration of one training run: config -> runtime -> data -> model -> optimizer -> Trainer -> records.

Returns the monitored metric (`optimized_metric`, default val/acc_best) so Hydra sweepers can optimise it.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import hydra.utils
import torch
from omegaconf import DictConfig, OmegaConf

from lab import checkpoint, data, diagnostics, models, provenance, runtime, tracking
from lab.engine import Trainer, batches_per_epoch
from lab.optim import build_optimizer, build_scheduler
from lab.tasks import Classification

log = logging.getLogger(__name__)


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _overfit_subset(dataset: torch.utils.data.Dataset, batches: int, batch_size: int) -> torch.utils.data.Dataset:
    """The same few samples for training and validation: a model that cannot fit them is wired wrong."""
    size = min(len(dataset), batches * batch_size)
    return torch.utils.data.Subset(dataset, range(size))


def _planned_steps(trainer_cfg: Any, steps_per_epoch: int) -> int:
    total = trainer_cfg.max_epochs * steps_per_epoch
    return min(total, trainer_cfg.max_steps) if trainer_cfg.max_steps > 0 else total


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float | None:
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    resume = checkpoint.load(cfg.ckpt_path) if cfg.ckpt_path else None  # fail on a bad path before any work

    runtime.seed_everything(cfg.seed)
    device = runtime.select_device(cfg.trainer.device)
    runtime.configure_backends(cfg.trainer, device)
    precision = runtime.resolve_precision(cfg.precision, device)

    datamodule = data.build(cfg.data)
    meta = datamodule.meta
    train_set, val_set = datamodule.train, datamodule.val
    if cfg.trainer.overfit_batches:
        train_set = val_set = _overfit_subset(train_set, cfg.trainer.overfit_batches, cfg.data.batch_size)
    # Pinned host memory only pays off with asynchronous copies to a CUDA device.
    pin = cfg.data.pin_memory if cfg.data.pin_memory is not None else device.type == "cuda"
    generator = torch.Generator().manual_seed(cfg.seed)
    train_loader = data.make_loader(train_set, cfg.data, train=True, generator=generator, pin_memory=pin)
    val_loader = data.make_loader(val_set, cfg.data, train=False, generator=None, pin_memory=pin)

    model = models.build(cfg.model, meta).to(device)
    if cfg.trainer.channels_last:
        model = model.to(memory_format=torch.channels_last)
    task = Classification(meta["num_classes"])
    optimizer = build_optimizer(cfg.optimizer, model)
    batches = batches_per_epoch(train_loader, cfg.trainer.limit_train_batches)
    steps_per_epoch = math.ceil(batches / cfg.trainer.grad_accum_steps)
    scheduler = build_scheduler(cfg.scheduler, optimizer, _planned_steps(cfg.trainer, steps_per_epoch))

    prov = provenance.collect()
    tracker = tracking.from_config(cfg, run_dir, "train", prov).start()
    extras = {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "data_meta": meta,
        "provenance": {
            "git_commit": prov["git_commit"],
            "git_dirty": prov["git_dirty"],
            "versions": prov["versions"],
            **tracker.run_ref(),  # lets eval/export runs link back to this training run
        },
    }
    trainer = Trainer(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        task=task,
        train_loader=train_loader,
        val_loader=val_loader,
        device=device,
        precision=precision,
        trainer_cfg=cfg.trainer,
        tracker=tracker,
        run_dir=run_dir,
        checkpoint_extras=extras,
        seed=cfg.seed,
        train_generator=generator,
        callbacks=[hydra.utils.instantiate(spec) for spec in cfg.callbacks.values()],
    )
    status = "failed"
    try:
        _report(trainer, train_loader, meta, run_dir)
        if resume is not None:
            trainer.restore(resume)
        summary = trainer.fit()
        summary.update(_test(trainer, datamodule.test, cfg, pin, run_dir))
        tracker.summary(summary)
        if cfg.logger.log_checkpoints != "none":
            which = cfg.logger.log_checkpoints
            tracker.log_checkpoint(run_dir / "checkpoints" / f"{which}.pt", alias=which)
        status = "completed"
    except BaseException as err:
        status = getattr(err, "run_status", "failed")  # e.g. a pruned sweep trial
        raise
    finally:
        tracker.finish(status)
    result = summary.get(cfg.optimized_metric)
    log.info("done: %s = %s; run dir %s", cfg.optimized_metric, result, run_dir)
    return result


def _report(trainer: Trainer, loader: torch.utils.data.DataLoader, meta: dict, run_dir: Path) -> None:
    """What is about to train, on what: logged and kept in the run dir."""
    inputs, targets = next(iter(loader))
    first_batch = diagnostics.check_first_batch(inputs, targets, meta["num_classes"])
    example, _ = trainer._to_device(inputs[:2], targets[:2])
    summary = diagnostics.model_summary(trainer.model, example)
    (run_dir / "model_summary.txt").write_text(summary + "\n")
    trainer.tracker.save_file(run_dir / "model_summary.txt")
    counts = diagnostics.parameter_counts(trainer.model)
    log.info("device %s, precision %s", trainer.device, trainer.precision.describe())
    log.info("%s", first_batch)
    log.info("model:\n%s", summary)
    log.info(
        "parameters: %s trainable, %s frozen; %d optimizer steps per epoch",
        f"{counts['trainable']:,}",
        f"{counts['frozen']:,}",
        trainer.steps_per_epoch,
    )
    diagnostics.warn_if_frozen(trainer.model)


def _test(trainer: Trainer, test_set: Any, cfg: DictConfig, pin: bool, run_dir: Path) -> dict[str, float]:
    """Score the best checkpoint on the held-out test split, once, after training."""
    best = run_dir / "checkpoints" / "best.pt"
    if test_set is None or not best.is_file():
        return {}
    checkpoint.load_model_state(trainer.model, checkpoint.load(best)["model"])
    loader = data.make_loader(test_set, cfg.data, train=False, generator=None, pin_memory=pin)
    metrics = {f"test/{k}": v for k, v in trainer.evaluate(loader, cfg.trainer.limit_val_batches).items()}
    trainer.tracker.log(metrics, step=trainer.progress.global_step)
    log.info("test (best checkpoint): %s", "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    return metrics
