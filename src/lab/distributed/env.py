"""Which process am I? Reads torchrun's and SLURM's environment. No torch import (entry scripts use it early)."""

from __future__ import annotations

import os
import subprocess
import tempfile

_TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SCRATCH_PREFIX = "lab-rank"  # a non-zero rank's Hydra dir under torchrun/srun: removed once it joins rank 0's run


def _slurm_head_node() -> str:
    """First host of the allocation: where rank 0 runs and the rendezvous store listens."""
    if int(os.environ.get("SLURM_NNODES", "1")) == 1:
        return "127.0.0.1"
    nodelist = os.environ["SLURM_JOB_NODELIST"]
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def adopt_slurm_ranks() -> None:
    """One SLURM task per rank (`srun`, submitit with tasks_per_node=GPUs): expose it the way torchrun does. Called
    once, at the entry of a training process (scripts/train.py, and lab.workflows.train.run for a job submitit
    starts); it writes os.environ and may run `scontrol`, so the probes below never call it."""
    if any(key in os.environ for key in _TORCHRUN_KEYS):
        return
    if int(os.environ.get("SLURM_NTASKS", "1")) <= 1 or "SLURM_PROCID" not in os.environ:
        return
    os.environ.update(
        RANK=os.environ["SLURM_PROCID"],
        LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"),
        WORLD_SIZE=os.environ["SLURM_NTASKS"],
        LOCAL_WORLD_SIZE=os.environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0],
        MASTER_ADDR=_slurm_head_node(),
        # every task derives the same port from the job id: no communication needed to agree on it
        MASTER_PORT=str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000),
    )


def launched_as_worker() -> bool:
    """True when an external launcher (torchrun, or srun/submitit once adopt_slurm_ranks ran) already started one
    process per rank."""
    return all(key in os.environ for key in _TORCHRUN_KEYS)


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def torchrun_job() -> str | None:
    """The id of the torchrun job this worker belongs to (`--rdzv-id`, or the one `--standalone` makes), when that
    job may restart its workers (`--max-restarts` > 0): its restarted workers continue the first attempt's run.
    None outside torchrun, and in the workers `dist=ddp` spawns itself (their restarts: `dist.max_restarts`)."""
    if not launched_as_worker() or int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) <= 0:
        return None
    return os.environ.get("TORCHELASTIC_RUN_ID") or None


def torchrun_restart() -> int:
    """How often torchrun restarted this job's workers (TORCHELASTIC_RESTART_COUNT): 0 on the first attempt."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) if torchrun_job() else 0


def keep_hydra_outputs_to_rank_zero(argv: list[str]) -> list[str]:
    """Every rank runs the Hydra entry point, but only rank 0 may write the run dir: the others get a scratch
    directory, no .hydra/ and console-only logging; after start-up rank 0 tells them the real run dir."""
    if not launched_as_worker() or rank() == 0 or "-m" in argv or "--multirun" in argv:
        return argv
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{rank()}-")
    return [*argv, f"hydra.run.dir={scratch}", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
