"""Train: own the run dir and start the ranks, then in each rank build everything, resume, fit and test.

Each step's policy lives in the module it calls. Returns the monitored metric (`optimized_metric`, by default
val/<the task's monitor>_best) for Hydra sweepers.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from lab import checkpointing, runtime, tracking
from lab import run_dir as run_dirs
from lab.config import options, train_nodes
from lab.data import loaders
from lab.data.common import DataModule, PoolSplitter, splitting_pool
from lab.data.datasets import build as build_data
from lab.distributed import env as dist_env
from lab.distributed import launch
from lab.distributed.parallel import Parallel
from lab.errors import ConfigError
from lab.models.common import build as build_model
from lab.models.common import prepare as prepare_model
from lab.optim.optimizers import build_optimizer, scaled_lr
from lab.optim.schedulers import build_scheduler, planned_steps
from lab.sweeps import in_multirun
from lab.tasks.common import build as build_task
from lab.tracking import provenance
from lab.training import flops, oom, preemption
from lab.training.start import log_start
from lab.training.trainer import Trainer
from lab.workflows.common import hydra_run_dir

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float | None:
    """Train. With dist=ddp|fsdp outside torchrun or SLURM, spawn the ranks here and return rank 0's result."""
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    dist_env.adopt_slurm_ranks()  # a SLURM task started by submitit runs this, not scripts/train.py
    # A sweep job continues only in its own dir, since the dirs next to it are the other jobs of its sweep.
    with run_dirs.owned(cfg, run_dir, siblings=not in_multirun()) as run_dir:
        identity = tracking.job_identity(cfg, run_dir)  # here, where Hydra runs; spawned ranks receive it
        return launch.start(_train, cfg, run_dir, preemption.resume_hint(run_dir), identity)


def _train(cfg: DictConfig, run_dir: Path, parallel: Parallel, identity: dict) -> float | None:
    """Run one rank, once it is in its process group."""
    resume = checkpointing.read(cfg.ckpt_path) if cfg.ckpt_path else None  # fail on a bad path before any work
    runtime.seed_everything(cfg.seed)  # the same on every rank, for identical initial weights
    device = runtime.select_device(cfg.trainer.device, parallel.local_rank)
    runtime.configure_backends(cfg.trainer, device)
    precision = runtime.resolve_precision(cfg.precision, device)
    # Build the data before any record is opened, so a bad dataset is refused with nothing written. A sweep's jobs
    # share unchanged data.
    data_cfg = prepare_model(cfg.model, cfg.data)  # finds pretrained weights and takes their preprocessing
    splitter = _pool_splitter(cfg, run_dir)
    with splitting_pool(splitter) as split_so:
        built = build_data(data_cfg, reuse=in_multirun())
    if splitter is not None and not split_so():
        raise ConfigError(
            f"data={cfg.data.name} has its own validation split, so {splitter} cannot split its train+val pool; "
            "use a dataset split by data.val_fraction (digits, diabetes, csv)"
        )
    datamodule = loaders.training_splits(built, cfg, parallel.world_size)
    on_meta = options.instantiate("dist", cfg.dist).model_on_meta(cfg.model, datamodule.meta)  # dist=fsdp; may refuse
    # a run continued in its own dir goes on in its own records and wandb run
    continued = resume if run_dirs.inside(cfg.ckpt_path, run_dir) else None
    tracker = tracking.from_config(cfg, run_dir, "train", provenance.collect(), parallel.rank, identity, continued)
    if parallel.rank == 0:
        options.instantiate("model", cfg.model).save_with_run(run_dir, datamodule.meta)
    # Explain a CUDA OOM in the rank it happened in, since a spawned rank is outside lab.cli's handler. A dead loader
    # worker marks the run "failed", keeps the last saved last.pt, and says how to continue from it.
    died = loaders.worker_deaths(preemption.resume_hint(run_dir))
    with oom.explained(cfg), tracker.session(background=True), died:  # trackers start while the model is built
        trainer = _trainer(cfg, run_dir, datamodule, parallel, device, precision, tracker, on_meta)
        if resume is not None:
            trainer.resume(resume, Path(cfg.ckpt_path), cfg.data.batch_size)
        summary = trainer.fit()
        if datamodule.test is not None and trainer.checkpoints.best.is_file():
            summary.update(trainer.test(loaders.eval_loader(datamodule.test, "test", cfg.data, parallel, device)))
        tracker.summary(summary)
        if cfg.logger.log_checkpoints != "none":
            which = cfg.logger.log_checkpoints
            tracker.log_checkpoint(trainer.checkpoints.path(which), alias=which)
    result = summary.get(cfg.optimized_metric)
    log.info("done: %s = %s; run dir %s", cfg.optimized_metric, result, run_dir)
    return result


def _pool_splitter(cfg: DictConfig, run_dir: Path) -> PoolSplitter | None:
    """Return the split of the train+val pool that an extension's top-level node asks for (a cross-validation fold)."""
    splitters = (node.pool_splitter(run_dir) for node in train_nodes(cfg))
    return next((splitter for splitter in splitters if splitter is not None), None)


def _trainer(
    cfg: DictConfig,
    run_dir: Path,
    datamodule: DataModule,
    parallel: Parallel,
    device: torch.device,
    precision: runtime.Precision,
    tracker: tracking.Tracker,
    on_meta: torch.nn.Module | None,
) -> Trainer:
    """Build the task, loaders, model, optimizer and schedule, and the Trainer over them.

    `on_meta` is the model built on the meta device (dist=fsdp), initialised only once sharded."""
    meta = datamodule.meta
    task = build_task(cfg.task, meta, datamodule.train)
    train_batches, train_loader = loaders.training_batches(datamodule, cfg, parallel, device)
    val_loader = loaders.eval_loader(datamodule.val, "val", cfg.data, parallel, device)

    init_rng = torch.random.get_rng_state()  # the build draws from this; on the meta device, once sharded
    model = on_meta if on_meta is not None else build_model(cfg.model, meta).to(device)
    model = runtime.apply_channels_last(model, cfg.trainer.channels_last, parallel.shards_weights)
    peak = flops.peak_flops(cfg.trainer.peak_flops, device, precision.autocast_dtype, cfg.trainer.tf32)
    # count a first batch's FLOPs (train/mfu) before wrapping, as a sharded forward would be a collective
    utilization = log_start(model, task, train_loader, run_dir, device, precision, tracker, parallel, peak)
    model, forward = parallel.wrap(model, device, precision, cfg.model)  # before the optimizer, as FSDP swaps params
    if on_meta is not None:
        options.instantiate("model", cfg.model).materialise(model, device, init_rng)
    if parallel.world_size > 1:
        runtime.seed_everything((cfg.seed + parallel.rank) % 2**32)  # from here on dropout etc. differ per rank

    optimizer_cfg, batch_figures = scaled_lr(cfg, parallel.world_size)
    tracker.summary(batch_figures)
    # with trainer.unfreeze_at_epoch, frozen parameters are in the optimizer from the start (Trainer._unfreeze)
    unfreezes = cfg.trainer.unfreeze_at_epoch is not None
    optimizer = build_optimizer(optimizer_cfg, model, cfg.model, device, include_frozen=unfreezes)
    split = options.instantiate("optimizer", optimizer_cfg).describe(model, optimizer)  # which params get what
    if split:
        log.info("%s", split)
    scheduler = build_scheduler(cfg.scheduler, optimizer, planned_steps(cfg.trainer, len(train_batches)))

    prov = {key: tracker.provenance[key] for key in ("git_commit", "git_dirty", "versions")}
    extras = {"config": OmegaConf.to_container(cfg, resolve=True), "data_meta": meta, "provenance": prov}
    # tracker.run_ref (the wandb id) lets eval/export runs link back to this training run
    checkpoints = checkpointing.CheckpointManager(
        run_dir, parallel, cfg.trainer.ckpt_every_n_steps, extras, tracker.run_ref, cfg.trainer.async_save
    )
    return Trainer(
        model=model,
        forward=forward,
        parallel=parallel,
        optimizer=optimizer,
        scheduler=scheduler,
        task=task,
        train_batches=train_batches,
        val_loader=val_loader,
        device=device,
        precision=precision,
        cfg=cfg.trainer,
        tracker=tracker,
        checkpoints=checkpoints,
        callbacks=cfg.callbacks,
        utilization=utilization,
        model_option=options.instantiate("model", cfg.model),
    )
