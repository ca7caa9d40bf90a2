"""torchrun --max-restarts and SLURM: restarted workers continue the first attempt's run in its own run dir, and the
docs/distributed.md's 2-node sbatch script starts one torchrun per node that agree on the rendezvous."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, Run, max_abs_diff, plugins_env

pytestmark = pytest.mark.slow

# 2 epochs of 3 steps, last.pt every 2 steps (and at the end of each epoch)
RECIPE = [
    "dist=ddp",
    "model=mlp",
    "logger=none",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.ckpt_every_n_steps=2",
]


def _kill(step: int, rank: int) -> str:
    return f"+callbacks.kill_rank_once={{step: {step}, rank: {rank}}}"


def _torchrun(cwd: Path, *overrides: str, restarts: int = 0) -> Run:
    cwd.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    command += [f"--max-restarts={restarts}", str(REPO / "scripts" / "train.py"), *RECIPE, *overrides]
    env = {**plugins_env(), "TMPDIR": str(cwd)}  # where the other ranks make their scratch dirs: checked below
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (run_dir,) = list((cwd / "outputs" / "train").iterdir())  # one run dir, whatever the attempts
    assert not list(cwd.glob("lab-rank*"))
    return Run(proc, run_dir)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Run:
    """The job without a failure: what a restarted one must end with."""
    run = _torchrun(tmp_path_factory.mktemp("torchrun") / "uninterrupted")
    assert not (run.dir / "torchrun.json").exists()  # a job that cannot restart records nothing
    return run


# rank 0 (the run dir's writer) dies after step 3, past the last.pt of step 2: the restart resumes from it; rank 1
# dies after step 1, before any last.pt: the restart starts again from the start, in the same dir
@pytest.mark.parametrize(
    ("rank", "step", "resumed"),
    [(0, 3, "resumed at epoch 1, step 2"), (1, 1, None)],
    ids=["rank0-after-last.pt", "rank1-before-any-last.pt"],
)
def test_a_torchrun_restart_resumes_in_place(tmp_path, uninterrupted, rank, step, resumed) -> None:
    run = _torchrun(tmp_path / "restarted", _kill(step, rank), restarts=1)
    assert json.loads((run.dir / "torchrun.json").read_text())["rdzv_id"]
    assert run.summary()["status"] == "completed"
    log = (run.dir / "train.log").read_text()
    assert f"torchrun restart 1: continuing the run in {run.dir}" in log
    if resumed:
        assert resumed in log  # the first attempt's last.pt, saved before rank 0 died
    else:
        assert "from its start (no last.pt was saved)" in log and "resumed at" not in log
    steps = [row["step"] for row in run.metrics() if "train/loss" in row]
    assert steps == [1, 2, 3, 4, 5, 6]  # the killed attempt's last steps were trained again, logged once
    assert max_abs_diff(uninterrupted.weights(), run.weights()) == 0  # bit-identical to the uninterrupted job


# what docs/distributed.md's sbatch script calls, faked: `scontrol show hostnames` lists two nodes; `srun` starts its
# command once per node (in the background, as on two machines); `torchrun` records its arguments, then runs the real
# one on this machine: a worker per node (not one per GPU), the rendezvous on a free local port instead of the first
# node's, the script by its path in this repository, training shortened
FAKE_SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && [ "$3" = "gpu-a[01-02]" ] && printf 'gpu-a01\\ngpu-a02\\n'
"""
FAKE_SRUN = """#!/bin/bash
for node in $(seq 0 $((SLURM_NNODES - 1))); do
  SLURM_NODEID=$node SLURM_PROCID=$node SLURM_LOCALID=0 SLURM_NTASKS=$SLURM_NNODES "$@" &
done
wait -n && wait -n
"""
FAKE_TORCHRUN = """#!/bin/bash
printf '%s\\n' "$@" > "$RECORD/node$SLURM_NODEID"
args=()
for arg in "$@"; do
  case "$arg" in
    --nproc-per-node=*) arg=--nproc-per-node=1 ;;
    --rdzv-endpoint=*) arg=--rdzv-endpoint=127.0.0.1:$PORT ;;
    scripts/train.py) arg=$REPO/scripts/train.py ;;
  esac
  args+=("$arg")
done
exec "$PYTHON" -m torch.distributed.run "${args[@]}" model=mlp debug=fast logger=none
"""


def _sbatch_script() -> str:
    page = (REPO / "docs" / "distributed.md").read_text()
    (script,) = re.findall(r"```bash\n(#!/bin/bash\n#SBATCH .*?)```", page, flags=re.S)
    return script


def test_the_two_node_sbatch_script_starts_one_torchrun_per_node_that_meet(tmp_path: Path) -> None:
    from lab.distributed import spawning

    script = _sbatch_script()
    options = dict(re.findall(r"^#SBATCH --([\w-]+)=?(\S*)", script, flags=re.M))
    assert options["nodes"] == "2" and options["ntasks-per-node"] == "1"  # one torchrun per node
    (bin_dir := tmp_path / "bin").mkdir()
    (record := tmp_path / "record").mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN), ("torchrun", FAKE_TORCHRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (job := tmp_path / "job").mkdir()  # the dir sbatch was called from
    env = {
        **plugins_env(),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "gpu-a[01-02]",
        "TMPDIR": str(job),  # where the other ranks make their scratch dirs: checked below
        **{"RECORD": str(record), "PORT": str(spawning.free_port()), "REPO": str(REPO), "PYTHON": sys.executable},
    }
    proc = subprocess.run(["bash", "-c", script], cwd=job, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]

    nodes = [(record / f"node{n}").read_text().splitlines() for n in (0, 1)]
    assert nodes[0] == nodes[1]  # srun starts the same torchrun on both nodes: they agree without talking
    args = nodes[0]
    assert "--nnodes=2" in args and f"--nproc-per-node={options['gpus-per-node']}" in args  # a worker per GPU
    assert {"--rdzv-backend=c10d", "--rdzv-endpoint=gpu-a01:29500", "--rdzv-id=4242"} <= set(args)
    restarts = next(a for a in args if a.startswith("--max-restarts="))
    assert int(restarts.split("=")[1]) > 0
    assert args[args.index("scripts/train.py") :] == [
        "scripts/train.py",
        "dist=ddp",
        "hydra.run.dir=outputs/train/slurm-4242",
    ]

    # the two "nodes" trained one run, in the job's dir, which records the job for its restarts
    (run_dir,) = list((job / "outputs" / "train").iterdir())
    assert run_dir.name == "slurm-4242" and not list(job.glob("lab-rank*"))
    assert json.loads((run_dir / "torchrun.json").read_text()) == {"rdzv_id": "4242"}
    summary = Run(proc, run_dir).summary()
    assert summary["status"] == "completed" and summary["effective_batch_size"] == 128  # 64 x 2 nodes
