"""With `hydra/launcher=joblib` on a machine with several GPUs, each parallel job gets a GPU of
its own (`CUDA_VISIBLE_DEVICES`), instead of every job piling onto GPU 0.

The rule is per worker process, not per job number: the joblib launcher's workers are reused across jobs
(joblib_launcher.py), and once a process has initialised CUDA its visible devices are
fixed, so a GPU chosen by `job_num % n_gpus` could not be changed for the worker's next job and two running jobs
could share a GPU. Instead, a worker's first job claims the first free GPU with a lock file in the sweep dir (held
until the worker exits: the worker that replaces a killed one finds its GPU free) and keeps it for every later job.
With more workers than GPUs (`hydra.launcher.n_jobs` > GPUs) the extra workers share GPU `job_num % n_gpus`.
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

_claimed: tuple[str, IO | None] | None = None  # (gpu id, lock file held open) of this process


def visible_gpus() -> list[str]:
    """GPU ids this process may use, without initialising CUDA (it must start after CUDA_VISIBLE_DEVICES is set)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [gpu.strip() for gpu in env.split(",") if gpu.strip()]
    import torch

    # NVML-based before CUDA is initialised: the count is not cached and CUDA_VISIBLE_DEVICES can still change.
    return [str(i) for i in range(torch.cuda.device_count())]


def claim_gpu(gpus: list[str], lock_dir: Path, fallback: int) -> tuple[str, IO | None]:
    """The first GPU no other process holds (an exclusive lock file per GPU); `gpus[fallback]` if all are taken."""
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
    """Before a job of this worker (`hydra`: the job's Hydra config): the worker's first job claims a GPU, which every
    later one keeps."""
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
    """The task as a joblib worker runs it: on this worker's GPU (Hydra has set up the job, its log included)."""

    def task(cfg: DictConfig) -> Any:
        take_a_gpu(HydraConfig.get())
        return task_function(cfg)

    return task
