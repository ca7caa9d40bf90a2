"""Sharded FSDP checkpoints through scripts/train.py on CPU/gloo: a 2-rank run resumes on 1 rank, then on 2 again,
and on DDP, matching an uninterrupted run; a same-size resume (with background saves) is bitwise; eval reads the
shards; a background save killed midway leaves the previous checkpoint loadable."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import Run, made_once, max_abs_diff, plugins_env, run_script, script_env
from lab import checkpointing
from lab.checkpointing import sharded
from lab.distributed.parallel import Parallel

pytestmark = pytest.mark.slow

# BN-free, dropout-free, a constant lr: 2 ranks x 32 take the same steps as 1 x 64 (test_distributed), and a run
# stopped by trainer.max_steps goes on exactly as if it had not stopped
RECIPE = [
    "model=mlp",
    "model.dropout=0",
    "scheduler=constant",
    "trainer.max_epochs=1",
    "trainer.log_every_n_steps=5",
    "logger=none",
]
FSDP = ["dist=fsdp", "dist.nproc=2", "data.batch_size=32"]


def _train(run_dir: Path, *overrides: str) -> Run:
    proc = run_script("train.py", f"hydra.run.dir={run_dir}", *RECIPE, *overrides)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return Run(proc, run_dir)


def _losses(run: Run) -> dict[int, float]:
    return {row["step"]: row["train/loss"] for row in run.metrics() if "train/loss" in row}


@pytest.fixture(scope="module")
def first_five_steps(shared_dir: Path) -> Run:
    """2 FSDP ranks, stopped after 5 steps: its last.pt is sharded (and, being final, holds the model too)."""
    run_dir = shared_dir / "sharded-first-five"
    made_once(run_dir, lambda: _train(run_dir, *FSDP, "trainer.max_steps=5"))
    return Run(None, run_dir)


def test_a_two_rank_fsdp_run_resumes_on_one_rank_then_on_two_like_an_uninterrupted_run(tmp_path, first_five_steps):
    uninterrupted = _train(tmp_path / "one-go", "data.batch_size=64", "trainer.max_steps=15")
    last = first_five_steps.dir / "checkpoints" / "last.pt"
    assert "optimizer" not in torch.load(last, weights_only=True)
    assert sharded.is_complete(checkpointing.read(last)["shards"])
    one_rank = _train(tmp_path / "one-rank", "data.batch_size=64", "trainer.max_steps=10", f"ckpt_path={last}")
    assert "resuming with" not in one_rank.output  # the same global batch: the same position in the epoch
    two_again = _train(
        tmp_path / "two-again", *FSDP, "trainer.max_steps=15", f"ckpt_path={one_rank.dir}/checkpoints/last.pt"
    )
    assert max_abs_diff(uninterrupted.weights(), two_again.weights()) <= 1e-5
    # the loss curve goes on where it was: each part's logged steps are the uninterrupted run's
    reference = _losses(uninterrupted)
    for part in (one_rank, two_again):
        for step, loss in _losses(part).items():
            assert loss == pytest.approx(reference[step], abs=1e-5), (part.dir.name, step)


def test_an_fsdp_checkpoint_resumes_under_ddp(tmp_path, first_five_steps):
    uninterrupted = _train(tmp_path / "one-go", "data.batch_size=64", "trainer.max_steps=10")
    last = first_five_steps.dir / "checkpoints" / "last.pt"
    ddp = _train(
        tmp_path / "ddp", "dist=ddp", "dist.nproc=2", "data.batch_size=32", "trainer.max_steps=10", f"ckpt_path={last}"
    )
    assert max_abs_diff(uninterrupted.weights(), ddp.weights()) <= 1e-5


def test_a_same_size_resume_with_background_saves_is_bitwise(tmp_path, first_five_steps):
    uninterrupted = _train(tmp_path / "one-go", *FSDP, "trainer.max_steps=12")
    last = first_five_steps.dir / "checkpoints" / "last.pt"
    background = ["trainer.async_save=true", "trainer.ckpt_every_n_steps=2"]
    resumed = _train(tmp_path / "resumed", *FSDP, *background, "trainer.max_steps=12", f"ckpt_path={last}")
    for name, value in uninterrupted.weights().items():
        assert torch.equal(value, resumed.weights()[name]), name
    # one directory left, the final save's (step 12's second save, after the periodic one): each save replaced the
    # one before once it was complete
    assert [p.name for p in (resumed.dir / "checkpoints" / "shards").iterdir()] == ["step-000000012.1"]


def test_eval_reads_the_weights_of_a_checkpoint_that_holds_only_shards(tmp_path, first_five_steps):
    """A periodic save's last.pt names its shards and holds no model: eval (and export, infer) read them whole."""
    source = first_five_steps.dir / "checkpoints"
    header = torch.load(source / "last.pt", weights_only=True)
    weights = header.pop("model")
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    torch.save(header, checkpoints / "last.pt")
    shutil.copytree(source / sharded.DIR, checkpoints / sharded.DIR)  # a link out of checkpoints/ is refused
    proc = run_script("eval.py", f"ckpt_path={checkpoints}/last.pt", "logger=none", f"hydra.run.dir={tmp_path}/eval")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "test/acc" in proc.stderr + proc.stdout
    assert max_abs_diff(sharded.read_model(checkpointing.read(checkpoints / "last.pt")["shards"]), weights) == 0


def test_a_run_killed_while_saving_in_the_background_resumes_to_identical_weights(tmp_path):
    """Both ranks die (SIGKILL, as a node failure) at step 12, with the background save of step 11 in flight or
    just done: the run resumes from the last complete checkpoint, mid-epoch, and ends as an uninterrupted one."""
    recipe = [*FSDP, "trainer.limit_train_batches=10", "trainer.max_epochs=3"]
    recipe += ["trainer.async_save=true", "trainer.ckpt_every_n_steps=1"]
    uninterrupted = _train(tmp_path / "one-go", *recipe)
    killed = tmp_path / "killed"
    kill = "+callbacks.kill_at_step={step:12}"
    proc = run_script("train.py", f"hydra.run.dir={killed}", *RECIPE, *recipe, kill, env=plugins_env())
    assert proc.returncode != 0 and "SIGKILL" in proc.stderr, proc.stderr[-3000:]
    assert checkpointing.read(killed / "checkpoints" / "last.pt")["progress"]["global_step"] in (10, 11)
    resumed = _train(killed, *recipe, f"resume={killed}")
    assert "resumed at epoch 2" in resumed.output
    for name, value in uninterrupted.weights().items():
        assert torch.equal(value, resumed.weights()[name]), name


# A background save, held between its shards and its metadata (where a kill lands in a real run), then killed
_KILLED_MID_SAVE = """
import sys, threading, time
from pathlib import Path
import torch
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter
from lab.checkpointing import CheckpointManager
from lab.distributed.parallel import Parallel

model = nn.Linear(4, 3)
optimizer = torch.optim.AdamW(model.parameters())
manager = CheckpointManager(Path(sys.argv[1]), Parallel(), async_save=True)

def save(step):
    state = {"shards": Parallel().sharded_state(model, optimizer), "progress": {"global_step": step}, "rng": {}}
    manager.save(state, best=False)

save(1)
manager.wait()
torch.save(model.state_dict(), Path(sys.argv[1]) / "step1.pt")
finish = FileSystemWriter.finish
def held(self, *args, **kwargs):
    print("writing", flush=True)
    time.sleep(600)
FileSystemWriter.finish = held
with torch.no_grad():
    model.weight.add_(1.0)
save(2)
time.sleep(600)
"""


def test_a_background_save_killed_midway_leaves_the_previous_checkpoint_loadable(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_KILLED_MID_SAVE), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=script_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    checkpoints = tmp_path / "checkpoints"
    assert sorted(p.name for p in (checkpoints / "shards").iterdir()) == ["step-000000001", "step-000000002"]
    ckpt = checkpointing.read(checkpoints / "last.pt")
    assert ckpt["progress"]["global_step"] == 1
    assert max_abs_diff(sharded.model_weights(ckpt), torch.load(tmp_path / "step1.pt", weights_only=True)) == 0
    # the next start removes the incomplete directory, and only it
    checkpointing.CheckpointManager(tmp_path, Parallel())
    assert sorted(p.name for p in (checkpoints / "shards").iterdir()) == ["step-000000001"]
