"""torchrun --max-restarts and SLURM: restarted workers continue the first attempt's run in its own run dir, and the
README's 2-node sbatch script starts one torchrun per node that agree on the rendezvous."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, Run, max_abs_diff, plugins_env

pytestmark = pytest.mark.slow

# 2 epochs of 3 steps, last.pt every 2 steps; the callback kills rank 0 after step 3 of the first attempt
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
KILL = "+callbacks.kill={_target_: kill_rank_once.KillRankOnce, step: 3, rank: 0}"


def _torchrun(cwd: Path, *overrides: str, restarts: int = 0) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    command += [f"--max-restarts={restarts}", str(REPO / "scripts" / "train.py"), *RECIPE, *overrides]
    env = {**plugins_env(), "TMPDIR": str(cwd)}  # where the other ranks make their scratch dirs: checked below
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_a_torchrun_restart_resumes_in_place(tmp_path: Path) -> None:
    (restarted := tmp_path / "restarted").mkdir()
    proc = _torchrun(restarted, KILL, restarts=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (run_dir,) = list((restarted / "outputs" / "train").iterdir())  # one run dir across both attempts
    assert not list(restarted.glob("lab-rank*"))
    assert json.loads((run_dir / "torchrun.json").read_text())["rdzv_id"]
    run = Run(proc, run_dir)
    assert run.summary()["status"] == "completed"
    log = (run_dir / "train.log").read_text()
    assert f"torchrun restart 1: continuing the run in {run_dir}" in log
    assert "resumed at epoch 1, step 2" in log  # the first attempt's last.pt, before its rank 0 died at step 3
    steps = [row["step"] for row in run.metrics() if "train/loss" in row]
    assert steps == [1, 2, 3, 4, 5, 6]  # the killed attempt's step 3 was trained again, logged once

    # the same job without the failure, on a fresh rendezvous: bit-identical weights
    (uninterrupted := tmp_path / "uninterrupted").mkdir()
    proc = _torchrun(uninterrupted)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (plain,) = list((uninterrupted / "outputs" / "train").iterdir())
    assert not (plain / "torchrun.json").exists()  # a job that cannot restart records nothing
    assert max_abs_diff(Run(proc, plain).weights(), run.weights()) == 0
