"""Orchestration of one training run: config -> runtime -> data -> model -> optimizer -> Trainer -> records.

Returns the monitored metric (`optimized_metric`, default val/<the task's monitor>_best) for Hydra sweepers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
from pathlib import Path
from typing import Any, cast

import torch
from omegaconf import DictConfig, OmegaConf
from torch.distributed.elastic.multiprocessing.errors import record

from lab import checkpointing, data, models, runtime, tasks, tracking
from lab import run_dir as run_dirs
from lab.checkpointing import CheckpointManager
from lab.config import TrainConfig, options
from lab.data import loaders
from lab.data.common import dataset_len
from lab.distributed import env as dist_env
from lab.distributed import launch, meta_init
from lab.distributed.parallel import Parallel
from lab.errors import UserError
from lab.optim import build_optimizer, build_scheduler, lr_scale
from lab.sweeps.jobs import in_multirun
from lab.tracking import provenance
from lab.training import Trainer, flops, preemption
from lab.training.start import log_start
from lab.workflows.common import hydra_run_dir

log = logging.getLogger(__name__)


def _overfit_subset(dataset: torch.utils.data.Dataset, batches: int, batch_size: int) -> torch.utils.data.Dataset:
    """The same few samples for training and validation: a model that cannot fit them is wired wrong. `batch_size`
    is the global one (per device x ranks): each rank's share of the subset is then its own fixed batches."""
    size = min(dataset_len(dataset), batches * batch_size)
    return torch.utils.data.Subset(dataset, range(size))


def _planned_steps(trainer_cfg: Any, steps_per_epoch: int) -> int:
    total = trainer_cfg.max_epochs * steps_per_epoch
    return min(total, trainer_cfg.max_steps) if trainer_cfg.max_steps > 0 else total


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float | None:
    """Train; with dist=ddp|fsdp outside torchrun/SLURM, spawn the ranks here and return rank 0's result."""
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    dist_env.adopt_slurm_ranks()  # a SLURM task submitit started runs this, not scripts/train.py
    # the process that writes the run dir decides which run this is and holds the dir (a spawning parent, for its
    # ranks; under torchrun/srun rank 0, whose decision the other ranks receive when they join: _join_and_train)
    writer = not dist_env.launched_as_worker() or dist_env.rank() == 0
    continued = None
    if writer:
        config = cast("dict[str, Any]", OmegaConf.to_container(cfg, resolve=True))
        # a sweep job continues in its own dir only: the dirs next to it are the other jobs of its sweep
        continued = run_dirs.continued_run(cfg.resume, run_dir, config, siblings=not in_multirun())
    last = continued / "checkpoints" / "last.pt" if continued is not None else None
    # one run across resumes: its own dir, checkpoints, metrics and wandb run (a torchrun restart whose failed
    # attempt saved no last.pt yet starts again in that dir, from the start or the user's ckpt_path)
    if last is not None and last.is_file():
        cfg.ckpt_path = str(last)
    checkpointing.require_file(cfg.ckpt_path)  # fail before starting processes
    if writer and cfg.ckpt_path:
        saved = _refuse_finished(Path(cfg.ckpt_path), cfg.trainer)  # before anything is written, in any dir
        _refuse_another_model(Path(cfg.ckpt_path), saved, cfg.model)
    here = continued is not None or _inside(cfg.ckpt_path, run_dir)
    target = continued or run_dir
    with run_dirs.claim(target, resuming_here=here, overwrite=cfg.overwrite) if writer else contextlib.nullcontext():
        if continued is not None and continued != run_dir:
            run_dirs.move_logs(run_dir, continued)  # this start's log goes on in the run's own log file
        if cfg.overwrite and not here:
            run_dirs.forget_replaced(target)  # the replaced run's later configs and log lines: this is a new run
        if writer:
            run_dirs.record_torchrun_job(target)  # torchrun --max-restarts: its restarted workers continue here
        if continued is not None:
            restart = dist_env.torchrun_restart()
            how = f"torchrun restart {restart}: " if restart else ""
            start = "" if last is not None and last.is_file() else " from its start (no last.pt was saved)"
            log.info("%scontinuing the run in %s%s", how, continued, start)
        identity = tracking.job_identity(cfg, target)
        if options.instantiate("dist", cfg.dist).spawns_ranks and not dist_env.launched_as_worker():
            container = OmegaConf.to_container(cfg, resolve=True)
            hint = preemption.resume_hint(target)  # a sweep job's names its sweep
            last_pt = target / "checkpoints" / "last.pt"
            return launch.spawn(_spawned_worker, (container, str(target), identity), cfg.dist, hint, last_pt)
        return _join_and_train(cfg, target, identity)


def _refuse_finished(path: Path, trainer_cfg: Any) -> dict:
    """A checkpoint whose training is over (or stopped early) would train nothing: refused in one line, before
    any tracker or file is opened; so is one that holds the model alone (a dist=fsdp run's best.pt). Returns it
    memory-mapped: only its progress is read here, not its weights."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        progress = ckpt["progress"]
    except Exception:
        ckpt = checkpointing.read(path)  # its one-line reason why the file is unreadable
        progress = ckpt["progress"]
    if "optimizer" not in ckpt and "shards" not in ckpt:
        raise UserError(
            f"{path} holds the model weights alone (a dist=fsdp run's best.pt: the optimizer state stays in the "
            "shards of its last.pt): resume from last.pt, or start a new run from these weights with "
            f"model.init_from={path}"
        )
    if not run_dirs.training_left(progress, trainer_cfg.max_epochs, trainer_cfg.max_steps):
        raise UserError(
            f"{path} has finished training (epoch {progress['epoch']} of trainer.max_epochs="
            f"{trainer_cfg.max_epochs}, step {progress['global_step']}): raise trainer.max_epochs (or max_steps) "
            "to train further, or score it with scripts/eval.py"
        )
    stopping, stale = trainer_cfg.early_stopping, progress.get("stale_validations", 0)
    if stopping.patience and stale >= stopping.patience:
        raise UserError(
            f"{path} stopped early at epoch {progress['epoch']} ({stale} validations without improvement, "
            f"trainer.early_stopping.patience={stopping.patience}): raise the patience (or set it to 0) to train "
            "further, or score it with scripts/eval.py"
        )
    return ckpt


def _refuse_another_model(path: Path, ckpt: dict, model_cfg: Any) -> None:
    """Weights that would fail to load into this run's model, refused before the run's records are touched: the
    model is built on the meta device (no memory, no random draws) for the data the checkpoint was saved with."""
    if "model" not in ckpt:
        return  # a sharded checkpoint: its shards are checked as they load
    try:
        with torch.device("meta"):
            own = models.build(model_cfg, ckpt.get("data_meta") or {}).state_dict()
    except Exception:
        return  # a model that cannot be built this way is checked when its weights load
    why = checkpointing.misfit(own, checkpointing.strip_wrapper_prefixes(ckpt["model"]))
    if why is not None:
        saved = (ckpt.get("config") or {}).get("model") or {}
        raise UserError(
            f"{path} does not fit this run's model ({why}); it was saved by a run of model.name="
            f"{saved.get('name', '?')}: continue it with that run's own command, or start a new run from it with "
            f"model.init_from={path}"
        )


def _inside(ckpt_path: str | None, run_dir: Path) -> bool:
    return ckpt_path is not None and Path(ckpt_path).resolve().parent == (run_dir / "checkpoints").resolve()


@record  # the failing rank's traceback reaches the launcher, which names it
def _spawned_worker(container: dict, run_dir: str, identity: dict) -> float | None:
    # typed again, as Hydra gave it
    cfg = cast(DictConfig, OmegaConf.merge(OmegaConf.structured(TrainConfig), container))
    launch.configure_worker_logging(Path(run_dir) / f"{cfg.task_name}.log")
    last = Path(run_dir) / "checkpoints" / "last.pt"
    if launch.restart_count() and last.is_file():  # dist.max_restarts: a restart continues the failed attempt
        cfg.ckpt_path = str(last)
    from lab.training import oom

    with oom.explained(cfg):  # in the rank that ran out of memory: its memory report (lab.cli does it elsewhere)
        return _join_and_train(cfg, Path(run_dir), identity)


def _join_and_train(cfg: DictConfig, run_dir: Path, identity: dict) -> float | None:
    parallel = launch.init(cfg.dist, cfg.trainer.device)
    try:
        if not parallel.is_main:
            logging.getLogger().setLevel(logging.WARNING)  # one rank speaks; the others only warn
        # torchrun/srun: every rank adopts rank 0's run dir and the checkpoint it resumes from (resume=auto is
        # resolved there only: the other ranks' scratch dirs hold no run, and each would start a run of its own)
        shared_dir, cfg.ckpt_path = parallel.broadcast((str(run_dir), cfg.ckpt_path))
        shared_dir = Path(shared_dir)
        if shared_dir != run_dir and run_dir.name.startswith("lab-rank"):
            shutil.rmtree(run_dir, ignore_errors=True)  # the scratch dir this non-zero rank made (keep_hydra_outputs)
        return _train(cfg, shared_dir, identity, parallel)
    finally:
        launch.shutdown()


def _train(cfg: DictConfig, run_dir: Path, identity: dict, parallel: Parallel) -> float | None:
    resume = checkpointing.read(cfg.ckpt_path) if cfg.ckpt_path else None  # fail on a bad path before any work
    runtime.seed_everything(cfg.seed)  # the same on every rank: identical initial weights
    device = runtime.select_device(cfg.trainer.device, parallel.local_rank)
    runtime.configure_backends(cfg.trainer, device)
    precision = runtime.resolve_precision(cfg.precision, device)
    # a run continued in its own dir continues its wandb run too: one run across resumes
    continuing = resume is not None and _inside(cfg.ckpt_path, run_dir)
    resume_id = (resume.get("provenance") or {}).get("wandb_id") if resume is not None and continuing else None
    # the data before any record is opened: a bad dataset (a CSV's duplicate column, float class labels, a missing
    # file) is refused with nothing written; a sweep's jobs share unchanged data
    data_cfg = models.prepare(cfg.model, cfg.data)  # pretrained weights found, their preprocessing taken
    datamodule = data.build(data_cfg, reuse=in_multirun())
    if not cfg.trainer.overfit_batches:  # too few samples for a batch: refused before the first record, too
        data.check_batch_fits(math.ceil(dataset_len(datamodule.train) / parallel.world_size), cfg.data.batch_size)
    on_meta = meta_init.build(cfg.model, datamodule.meta, cfg.dist)  # dist=fsdp; refused here, before any record
    tracker = tracking.from_config(
        cfg,
        run_dir,
        "train",
        provenance.collect(),
        rank=parallel.rank,
        identity=identity,
        resume_id=resume_id,
        continuing=continuing,  # its files are appended to; any other run starts them afresh
        # what a killed attempt logged after its last.pt is dropped: those steps are trained again
        resumed_step=resume["progress"]["global_step"] if resume is not None and continuing else None,
    )
    # a dead loader worker: summary.json says "failed", last.pt stays the last one saved, and the line says how to
    # continue from it
    died = loaders.worker_deaths(preemption.resume_hint(run_dir))
    with tracker.session(background=True), died:  # the trackers start while the model is built
        summary = _fit(cfg, run_dir, datamodule, parallel, device, precision, resume, tracker, on_meta)
    result = summary.get(cfg.optimized_metric)
    log.info("done: %s = %s; run dir %s", cfg.optimized_metric, result, run_dir)
    return result


def _fit(
    cfg: DictConfig,
    run_dir: Path,
    datamodule: Any,
    parallel: Parallel,
    device: torch.device,
    precision: runtime.Precision,
    resume: dict | None,
    tracker: tracking.Tracker,
    on_meta: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """Model, optimizer and Trainer on the data; train, then score the best checkpoint on the test split. `on_meta`:
    the model built on the meta device (dist=fsdp), initialised only once sharded."""
    meta = datamodule.meta
    train_set, val_set = datamodule.train, datamodule.val
    if cfg.trainer.overfit_batches:
        global_batch = cfg.data.batch_size * parallel.world_size
        train_set = val_set = _overfit_subset(train_set, cfg.trainer.overfit_batches, global_batch)
    task = tasks.build(cfg.task, meta, train_set)
    # Pinned host memory only pays off with asynchronous copies to a CUDA device.
    pin = cfg.data.pin_memory if cfg.data.pin_memory is not None else device.type == "cuda"
    train_batches, train_loader = _train_batches(train_set, cfg, pin, parallel, device, datamodule.train_collate)
    val_loader = _eval_loader(val_set, "val", cfg, pin, parallel, device)

    init_rng = torch.random.get_rng_state()  # what the build draws from; on the meta device, drawn once sharded
    model = on_meta if on_meta is not None else models.build(cfg.model, meta).to(device)
    model = runtime.apply_channels_last(model, cfg.trainer.channels_last, parallel.shards_weights)
    peak = flops.peak_flops(cfg.trainer.peak_flops, device, precision.autocast_dtype, cfg.trainer.tf32)
    utilization = log_start(model, task, train_loader, run_dir, device, precision, tracker, parallel, peak)
    model, forward = parallel.wrap(model, device, precision)  # before the optimizer: FSDP swaps params
    if on_meta is not None:
        meta_init.materialise(model, device, init_rng)
    if parallel.world_size > 1:
        runtime.seed_everything((cfg.seed + parallel.rank) % 2**32)  # dropout etc. differ per rank from here on
    # trainer.unfreeze_at_epoch: the frozen parameters are in the optimizer from the start (see Unfreeze)
    unfreezes = cfg.trainer.unfreeze_at_epoch is not None
    optimizer_cfg = _scaled_optimizer_cfg(cfg, parallel, tracker)
    optimizer = build_optimizer(optimizer_cfg, model, cfg.model, device, include_frozen=unfreezes)
    steps_per_epoch = math.ceil(len(train_batches) / cfg.trainer.grad_accum_steps)
    scheduler = build_scheduler(cfg.scheduler, optimizer, _planned_steps(cfg.trainer, steps_per_epoch))
    log.info("%d optimizer steps per epoch", steps_per_epoch)

    prov = tracker.provenance
    extras = {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "data_meta": meta,
        "provenance": {
            "git_commit": prov["git_commit"],
            "git_dirty": prov["git_dirty"],
            "versions": prov["versions"],
        },
    }
    # tracker.run_ref (the wandb id) lets eval/export runs link back to this training run
    checkpoints = CheckpointManager(
        run_dir, parallel, cfg.trainer.ckpt_every_n_steps, extras, tracker.run_ref, cfg.trainer.async_save
    )
    trainer = Trainer(
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
        # MFU; the Trainer adds those its own trainer.* keys switch on, and builds those cfg.callbacks names
        callbacks=[*filter(None, [utilization])],
        callback_options=cfg.callbacks,
    )
    if resume is not None:
        _resume(trainer, resume, Path(cfg.ckpt_path), cfg.data.batch_size)
    summary = trainer.fit()
    summary.update(_test(trainer, datamodule.test, cfg, pin))
    tracker.summary(summary)
    if cfg.logger.log_checkpoints != "none":
        which = cfg.logger.log_checkpoints
        tracker.log_checkpoint(checkpoints.path(which), alias=which)
    return summary


def _train_batches(
    train_set: Any, cfg: DictConfig, pin: bool, parallel: Parallel, device: torch.device, collate: Any = None
) -> tuple[Any, Any]:
    """(what the Trainer walks each epoch, the loader the start-of-run report reads a first batch from)."""
    loader_seed = cfg.seed * 1000 + parallel.rank  # worker augmentation streams differ per rank
    if cfg.data.loader == "device":  # the splits live on the device: batches are cut and augmented there
        on_device = data.DeviceLoader(
            train_set,
            cfg.data,
            device,
            seed=cfg.seed,
            augment_seed=loader_seed,
            rank=parallel.rank,
            world_size=parallel.world_size,
            limit=cfg.trainer.limit_train_batches,
        )
        return on_device, on_device
    generator = torch.Generator().manual_seed(loader_seed)
    sampler = parallel.train_sampler(train_set, seed=runtime.epoch_generator_seed(cfg.seed, 0))
    loader = data.make_loader(
        train_set, cfg.data, train=True, generator=generator, pin_memory=pin, sampler=sampler, collate=collate
    )
    return data.EpochLoader(loader, generator, loader_seed, cfg.trainer.limit_train_batches), loader


def _resume(trainer: Trainer, ckpt: dict, path: Path, batch_size: int | None = None) -> None:
    """Continue from `ckpt` (a finished one was refused in `run`); the best.pt of the run it came from comes
    along, so best tracking and the final test score the true best. `batch_size`: this run's data.batch_size,
    when the checkpoint may come from another global batch."""
    if batch_size is not None:
        _continue_epoch(ckpt, batch_size, trainer.parallel.world_size)
    trainer.resume(ckpt)
    best = path.with_name("best.pt")
    if trainer.parallel.is_main and best.is_file() and not trainer.checkpoints.best.exists():
        trainer.checkpoints.dir.mkdir(parents=True, exist_ok=True)
        checkpointing.copy(best, trainer.checkpoints.best)


def _continue_epoch(ckpt: dict, batch_size: int, world_size: int) -> None:
    """A checkpoint saved mid-epoch with another global batch (other ranks or data.batch_size): where this run's
    ranks go on in the epoch. Every rank's loader takes a strided share of the epoch's one permutation, so the
    samples the saved run had taken are the permutation's first batch_in_epoch x its global batch; this run skips
    that many (rounded down to its own batches: a few samples are seen twice rather than any missed)."""
    progress, per_rank = ckpt["progress"], ckpt["rng"].get("per_rank")
    saved = (ckpt["config"]["data"]["batch_size"], len(per_rank) if per_rank is not None else 1)
    if saved[0] * saved[1] == batch_size * world_size:
        return
    batches = progress["batch_in_epoch"] * saved[0] * saved[1] // (batch_size * world_size)
    log.warning(
        "resuming with %d ranks x batch %d from a checkpoint of %d x %d: the epoch goes on after %d batches (it had "
        "taken %d); the effective batch (and, with dist.lr_scaling, the lr) is this run's",
        world_size,
        batch_size,
        saved[1],
        saved[0],
        batches,
        progress["batch_in_epoch"],
    )
    progress["batch_in_epoch"] = batches


def _scaled_optimizer_cfg(cfg: DictConfig, parallel: Parallel, tracker: tracking.Tracker) -> DictConfig:
    """optimizer.lr, scaled to the effective batch when dist.lr_scaling asks for it (logged either way)."""
    scale = lr_scale(cfg.dist, cfg.data.batch_size, parallel.world_size, cfg.trainer.grad_accum_steps)
    effective = cfg.data.batch_size * parallel.world_size * cfg.trainer.grad_accum_steps
    lr = cfg.optimizer.lr * scale
    log.info(
        "effective batch %d (%d per device x %d devices x %d accumulation); lr %.4g (%s scaling x%.3g)",
        effective,
        cfg.data.batch_size,
        parallel.world_size,
        cfg.trainer.grad_accum_steps,
        lr,
        cfg.dist.lr_scaling,
        scale,
    )
    tracker.summary({"effective_batch_size": effective, "lr_scaled": lr})
    return cast(DictConfig, OmegaConf.merge(cfg.optimizer, {"lr": lr}))


def _eval_loader(dataset: Any, split: str, cfg: DictConfig, pin: bool, parallel: Parallel, device: Any) -> Any:
    """Validation/test batches of this rank's shard, through the same kind of loader as training."""
    sampler = parallel.eval_sampler(dataset)
    if cfg.data.loader == "device":
        return data.DeviceEvalLoader(dataset, cfg.data.eval_batch_size or cfg.data.batch_size, device, sampler, split)
    return data.make_loader(dataset, cfg.data, train=False, generator=None, pin_memory=pin, sampler=sampler)


def _test(trainer: Trainer, test_set: Any, cfg: DictConfig, pin: bool) -> dict[str, float]:
    """Score the best checkpoint on the held-out test split, once, after training."""
    best = trainer.checkpoints.best
    if test_set is None or not best.is_file():
        return {}
    trainer.parallel.load_model_state(trainer.model, checkpointing.read(best)["model"])
    loader = _eval_loader(test_set, "test", cfg, pin, trainer.parallel, trainer.device)
    metrics = {f"test/{k}": v for k, v in trainer.score(loader, cfg.trainer.limit_val_batches).items()}
    trainer.tracker.log(metrics, step=trainer.progress.global_step)
    log.info("test (best checkpoint): %s", "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    return metrics
