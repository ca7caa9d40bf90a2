"""Resume from a checkpoint written mid-epoch: the run must end bit-identical to one never interrupted."""

from __future__ import annotations

import shutil

import torch

from lab import checkpointing
from lab.config import validate
from lab.workflows.train import run


def test_mid_epoch_checkpoint_resumes_to_identical_weights(tmp_path, compose, monkeypatch):
    # cosine with warmup (the default schedule), dropout, 19 optimizer steps per epoch, a checkpoint every 5 steps
    overrides = ["model=mlp", "trainer.max_epochs=3", "trainer.ckpt_every_n_steps=5", "trainer.log_every_n_steps=5"]
    snapshot = tmp_path / "step25.pt"
    real_save = checkpointing.storage.save

    def keep_step_25(path, payload):
        real_save(path, payload)
        if path.name == "last.pt" and payload["progress"]["global_step"] == 25:
            shutil.copy(path, snapshot)  # what a preempted job would find on disk

    monkeypatch.setattr(checkpointing.storage, "save", keep_step_25)
    cfg = compose(overrides)
    validate(cfg)
    run(cfg, tmp_path / "straight")
    assert torch.load(snapshot, weights_only=True)["progress"]["batch_in_epoch"] == 6  # epoch 2, batch 6 of 19

    resumed_cfg = compose([*overrides, f"ckpt_path={snapshot}"])
    run(resumed_cfg, tmp_path / "resumed")
    straight = torch.load(tmp_path / "straight/checkpoints/last.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed/checkpoints/last.pt", weights_only=True)
    for key, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][key]), key
    assert straight["progress"] == resumed["progress"]
