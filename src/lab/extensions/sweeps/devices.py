"""Give each parallel job of `hydra/launcher=joblib` its own GPU, instead of piling every job onto GPU 0.

GPUs go per worker process, not per job number. Workers are reused across jobs, and once a process has
initialised CUDA its visible devices are fixed. So picking `job_num % n_gpus` per job could put two running jobs
on one GPU. Instead, a worker's first job claims the first free GPU with a lock file in the sweep dir, and the
worker keeps it for every later job. The lock is held until the worker exits, so a replacement for a killed worker
finds its GPU free. With more workers than GPUs, the extra workers share GPU `job_num % n_gpus`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from pathlib import Path
from typing import IO, Any

from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.types import TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)

_claimed: tuple[str, IO | None] | None = None  # this process's (gpu id, lock file held open)


def visible_gpus() -> list[str]:
    """List the GPU ids this process may use, without initialising CUDA, so CUDA_VISIBLE_DEVICES can still change."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [gpu.strip() for gpu in env.split(",") if gpu.strip()]
    import torch

    # before CUDA is initialised this asks NVML and caches nothing
    return [str(i) for i in range(torch.cuda.device_count())]


def claim_gpu(gpus: list[str], lock_dir: Path, fallback: int) -> tuple[str, IO | None]:
    """Claim the first GPU no other process holds, by a lock file per GPU; `gpus[fallback]` if all are taken."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    for gpu in gpus:
        handle = open(lock_dir / f"gpu-{gpu}.lock", "w")  # noqa: SIM115 (held open: the lock lives as long as it)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return gpu, handle
    return gpus[fallback % len(gpus)], None


def cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def take_a_gpu(hydra: HydraConf) -> None:
    """Pin this worker to a GPU before a job runs; the first job claims it and later jobs keep it."""
    global _claimed
    if _claimed is None:
        gpus = visible_gpus()
        if len(gpus) < 2:
            return
        if cuda_initialized():
            log.warning("CUDA is already initialised in this worker: cannot give it a GPU of its own")
            return
        _claimed = claim_gpu(gpus, Path(hydra.sweep.dir) / ".gpu_locks", hydra.job.num)
        if _claimed[1] is None:
            log.warning("more parallel jobs than GPUs: this worker shares GPU %s", _claimed[0])
        os.environ["CUDA_VISIBLE_DEVICES"] = _claimed[0]
    log.info("job #%d runs on GPU %s (CUDA_VISIBLE_DEVICES)", hydra.job.num, _claimed[0])


def on_a_gpu_of_its_own(task_function: TaskFunction) -> TaskFunction:
    """Wrap the task so it runs on this worker's GPU, after Hydra has set up the job and its log."""

    def task(cfg: DictConfig) -> Any:
        take_a_gpu(HydraConfig.get())
        return task_function(cfg)

    return task
