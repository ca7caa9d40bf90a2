"""Which process am I? Read torchrun's and SLURM's environment. No torch import, so entry scripts can use it early."""

from __future__ import annotations

import os
import subprocess
import tempfile

_TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SCRATCH_PREFIX = "lab-rank"  # a non-zero rank's Hydra dir under torchrun/srun, removed once it joins rank 0's run


def _slurm_head_node() -> str:
    """Return the allocation's first host, where rank 0 runs and the rendezvous store listens."""
    if int(os.environ.get("SLURM_NNODES", "1")) == 1:
        return "127.0.0.1"
    nodelist = os.environ["SLURM_JOB_NODELIST"]
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def adopt_slurm_ranks() -> None:
    """Set torchrun's variables from SLURM's when there is one task per rank (`srun`, submitit with
    tasks_per_node=GPUs). Call it once, when a training process starts (scripts/train.py, and
    lab.workflows.train.run for a submitit job). It writes os.environ and may run `scontrol`, so the probes below
    never call it."""
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
        # every task derives the same port from the job id, so they agree without talking
        MASTER_PORT=str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000),
    )


def launched_as_worker() -> bool:
    """Return True if an external launcher already started one process per rank: torchrun, or srun/submitit once
    `adopt_slurm_ranks` ran."""
    return all(key in os.environ for key in _TORCHRUN_KEYS)


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def torchrun_job() -> str | None:
    """Return the id of this worker's torchrun job (`--rdzv-id`, or the one `--standalone` makes), if that job may
    restart its workers (`--max-restarts` > 0). Restarted workers continue the first attempt's run. None outside
    torchrun, and in workers `dist=ddp` spawns itself, whose restarts `dist.max_restarts` sets."""
    if not launched_as_worker() or int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) <= 0:
        return None
    return os.environ.get("TORCHELASTIC_RUN_ID") or None


def torchrun_restart() -> int:
    """Return how often torchrun restarted this job's workers (TORCHELASTIC_RESTART_COUNT), 0 on the first try."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) if torchrun_job() else 0


def keep_hydra_outputs_to_rank_zero(argv: list[str]) -> list[str]:
    """Give non-zero ranks a scratch Hydra dir, no .hydra/ and console-only logging, so only rank 0 writes the run
    dir. Every rank runs the Hydra entry point; after start-up rank 0 tells the others the real run dir."""
    if not launched_as_worker() or rank() == 0 or "-m" in argv or "--multirun" in argv:
        return argv
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{rank()}-")
    return [*argv, f"hydra.run.dir={scratch}", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
