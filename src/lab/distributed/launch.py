"""Start the processes: spawn local workers (lab.distributed.spawning, imported only then), or join a torchrun/SLURM
job, whose processes exist already and only join the process group. Either way, a failing rank ends the whole job
with that rank's error."""

from __future__ import annotations

import datetime
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from lab import runtime
from lab.config import options
from lab.distributed import env
from lab.distributed.parallel import Parallel
from lab.errors import ConfigError


def start(train: Callable[..., Any], cfg: Any, run_dir: Path, resume_hint: str, *args: Any) -> Any:
    """Run `train(cfg, run_dir, parallel, *args)` in every rank once it is in its process group. Returns rank 0's
    result. If the `dist` option spawns its ranks and we are outside torchrun/srun, spawn `dist.nproc` processes
    here. Otherwise run in this process, which is one of torchrun's or srun's ranks, or the only one."""
    if options.instantiate("dist", cfg.dist).spawns_ranks and not env.launched_as_worker():
        from lab.distributed import spawning  # torch's elastic launcher, only where this process starts the ranks

        container = OmegaConf.to_container(cfg, resolve=True)
        last = run_dir / "checkpoints" / "last.pt"
        ranks = (joined, train, container, str(run_dir), *args)
        return spawning.spawn(spawning.spawned_rank, ranks, cfg.dist, resume_hint, last)
    return joined(train, cfg, run_dir, *args)


def joined(train: Callable[..., Any], cfg: Any, run_dir: Path, *args: Any) -> Any:
    """Run `train(cfg, run_dir, parallel, *args)` in this rank, once it has joined its process group."""
    parallel = init(cfg.dist, cfg.trainer.device)
    try:
        if not parallel.is_main:
            logging.getLogger().setLevel(logging.WARNING)  # one rank speaks; the others only warn
        # under torchrun/srun every rank adopts rank 0's run dir and the checkpoint it resumes from. resume=auto is
        # resolved on rank 0 only: the other ranks' scratch dirs hold no run, so each would start a run of its own.
        shared, cfg.ckpt_path = parallel.broadcast((str(run_dir), cfg.ckpt_path))
        shared_dir = Path(shared)
        if shared_dir != run_dir and run_dir.name.startswith(env.SCRATCH_PREFIX):
            shutil.rmtree(run_dir, ignore_errors=True)  # the scratch dir this non-zero rank made (keep_hydra_outputs)
        return train(cfg, shared_dir, parallel, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def init(dist_cfg: Any, device_name: str = "auto") -> Parallel:
    """Join the process group the environment describes (spawned, torchrun or SLURM), and build the `dist` option's
    strategy object for this rank. A strategy of one process joins nothing."""
    dist_cfg = options.instantiate("dist", dist_cfg)
    if not dist_cfg.spawns_ranks:
        world = int(os.environ.get("WORLD_SIZE", "1")) if env.launched_as_worker() else 1
        if world > 1:
            raise ConfigError(
                f"{world} processes were launched (torchrun/srun) but dist=none would train {world} "
                "independent copies; add dist=ddp or dist=fsdp"
            )
        return dist_cfg.build()
    if not env.launched_as_worker():
        raise ConfigError(
            f"dist={dist_cfg.strategy} needs one process per rank: start it through scripts/train.py "
            "or torchrun, not by calling the worker directly"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device_name in ("auto", "cuda")
    backend = dist_cfg.backend if dist_cfg.backend != "auto" else ("nccl" if use_cuda else "gloo")
    gpu = runtime.cuda_index(local_rank) if use_cuda else None
    if gpu is not None:
        torch.cuda.set_device(gpu)  # before the process group, since NCCL binds each rank to its device
    timeout = datetime.timedelta(seconds=dist_cfg.timeout_s)
    device_id = torch.device("cuda", gpu) if backend == "nccl" and gpu is not None else None
    dist.init_process_group(backend=backend, timeout=timeout, device_id=device_id, **_restart_store(timeout))
    return dist_cfg.build(rank=dist.get_rank(), local_rank=local_rank, world_size=dist.get_world_size())


def _restart_store(timeout: datetime.timedelta) -> dict[str, Any]:
    """Give each torchrun restart (`--max-restarts`) keys of its own in the elastic agent's store, under a prefix.
    The store is the one the failed attempt used, and its keys are still there. A restarted rank that read the dead
    rank 0's address from them failed to connect ("connectFullMesh ... Connection refused")."""
    restart = env.torchrun_restart()
    if not restart:
        return {}
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
    store.set_timeout(timeout)
    return {"store": dist.PrefixStore(f"lab/restart{restart}", store), "rank": rank, "world_size": world_size}
