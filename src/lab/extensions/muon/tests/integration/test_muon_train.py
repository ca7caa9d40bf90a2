"""optimizer=muon scheduler=wsd through the real script: a run that logs its split, two DDP ranks resumed bitwise
from a checkpoint, and dist=fsdp refused in one line before anything runs."""

from __future__ import annotations

import pytest
import torch

from helpers import plugins_env, run_script, script_env
from warm_python import run_python

pytestmark = pytest.mark.slow

MUON = ["optimizer=muon", "scheduler=wsd", "logger=none"]
# the straight run copies last.pt as epoch 1 left it to checkpoints/epoch1.pt (tests/integration/plugins)
KEEP_EPOCH_1 = "+callbacks.keep_checkpoint={epoch: 1}"


def test_the_character_gpt_trains_and_logs_the_split(train):
    tiny = ["data.max_chars=12000", "data.block_size=32", "model.n_layer=1", "model.n_embd=32", "model.n_head=2"]
    run = train("experiment=char_lm", *MUON, *tiny, "debug=fast")
    assert "optimizer=muon: Muon on 3 tensors (8,192 values), AdamW on " in run.output
    assert "AdamW's weights: tok_emb.weight, pos_emb.weight, blocks.0.mlp.2.weight" in run.output


def test_two_ddp_ranks_resume_bitwise(tmp_path):
    recipe = [
        *MUON,
        *("model=mlp", "model.dropout=0", "scheduler.warmup_steps=2", "scheduler.decay_fraction=0.5"),
        *("trainer.limit_train_batches=4", "trainer.limit_val_batches=2", "trainer.max_epochs=2"),
        *("dist=ddp", "dist.nproc=2", "data.batch_size=32"),
    ]

    def train(name: str, *overrides: str) -> dict:
        run_dir = tmp_path / name
        proc = run_script("train.py", f"hydra.run.dir={run_dir}", *recipe, *overrides, env=plugins_env())
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)

    straight = train("straight", KEEP_EPOCH_1)
    resumed = train("resumed", f"ckpt_path={tmp_path / 'straight/checkpoints/epoch1.pt'}")
    assert straight["progress"] == resumed["progress"]
    for key, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][key]), key
    assert straight["optimizer"]["param_groups"][0]["muon"] is True  # Muon trained the hidden layers


def test_fsdp_is_refused_in_one_line(train):
    run = train(*MUON, "dist=fsdp", check=False)
    assert run.proc.returncode != 0
    assert "optimizer=muon does not work with dist=fsdp" in run.output
    assert not (run.dir / "checkpoints").exists()


def test_the_benchmark_races_both_and_prints_the_ratio(tmp_path):
    """The page's `python -m lab.extensions.muon.bench_optimizers`, at its shortest: a target any first step beats."""
    args = ["--target", "10", "--max-steps", "2", "--eval-every", "1", "--eval-batches", "1", "data.max_chars=20000"]
    proc = run_python(
        ["-m", "lab.extensions.muon.bench_optimizers", *args], cwd=tmp_path, env=script_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "adamw + cosine" in proc.stdout and "muon + wsd" in proc.stdout
    assert "muon + wsd / adamw + cosine: 1.00x the steps" in proc.stdout
