"""Resume from a checkpoint written mid-epoch: the run must end bit-identical to one never interrupted."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from lab import checkpointing
from lab.config import validate
from lab.workflows.train import run

# cosine with warmup (the default schedule), dropout, 19 optimizer steps per epoch, a checkpoint every 5 steps
DIGITS = ["model=mlp", "trainer.max_epochs=3", "trainer.ckpt_every_n_steps=5", "trainer.log_every_n_steps=5"]
# training augmentation drawn in two loader workers: RandAugment and random erasing per image, MixUp or CutMix per
# batch (soft targets); 16 images of 8x8 in batches of 4: 4 steps per epoch, a checkpoint every 3 steps
AUGMENTED = [
    "data=image_folder",
    "data.image_size=8",
    "data.batch_size=4",
    "data.num_workers=2",
    "data.auto_augment=randaugment",
    "data.random_erasing=0.5",
    "data.mixup_alpha=0.4",
    "data.cutmix_alpha=1.0",
    "model=mlp",
    "trainer.max_epochs=3",
    "trainer.ckpt_every_n_steps=3",
    "trainer.log_every_n_steps=3",
]

# fine-tuning: the first conv block (and its BatchNorm statistics) frozen for epoch 1, unfrozen from epoch 2; the head
# at 10x the learning rate. The snapshot at step 3 lies before the unfreeze: the resumed run crosses it
FINETUNE = [
    "data=image_folder",
    "data.image_size=8",
    "data.batch_size=4",
    "data.num_workers=0",
    "model=cnn",
    "model.channels=[4,8]",
    "model.freeze=[blocks.0.*]",
    "trainer.unfreeze_at_epoch=1",
    "optimizer.head_lr_scale=10",
    "trainer.max_epochs=3",
    "trainer.ckpt_every_n_steps=3",
    "trainer.log_every_n_steps=3",
]


def write_images(root):
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("val", 2)):
        for cls in ("a", "b"):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(root / split / cls / f"{i}.png")
    return [f"data.root={root}"]


@pytest.mark.parametrize(
    ("overrides", "step", "batch_in_epoch", "first_batch"),
    [
        (DIGITS, 25, 6, "class labels in"),  # epoch 2, batch 6 of 19
        (AUGMENTED, 6, 2, "class probabilities (N, 2)"),  # epoch 2, batch 2 of 4
        (FINETUNE, 3, 3, "class labels in"),  # epoch 1 (frozen), batch 3 of 4
    ],
    ids=["digits", "image_folder-workers2-randaugment-mixup-cutmix", "frozen-then-unfrozen-at-epoch-1"],
)
def test_mid_epoch_checkpoint_resumes_to_identical_weights(
    tmp_path, compose, monkeypatch, caplog, overrides, step, batch_in_epoch, first_batch
):
    if overrides is not DIGITS:
        overrides = [*overrides, *write_images(tmp_path / "images")]
    snapshot = tmp_path / f"step{step}.pt"
    real_save = checkpointing.storage.save

    def keep_step(path, payload):
        real_save(path, payload)
        if path.name == "last.pt" and payload["progress"]["global_step"] == step:
            shutil.copy(path, snapshot)  # what a preempted job would find on disk

    monkeypatch.setattr(checkpointing.storage, "save", keep_step)
    cfg = compose(overrides)
    validate(cfg)
    with caplog.at_level(logging.INFO):
        run(cfg, tmp_path / "straight")
    assert first_batch in caplog.text  # the start-of-run report of the batch the loader gave
    assert torch.load(snapshot, weights_only=True)["progress"]["batch_in_epoch"] == batch_in_epoch

    resumed_cfg = compose([*overrides, f"ckpt_path={snapshot}"])
    run(resumed_cfg, tmp_path / "resumed")
    straight = torch.load(tmp_path / "straight/checkpoints/last.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed/checkpoints/last.pt", weights_only=True)
    for key, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][key]), key
    assert straight["progress"] == resumed["progress"]
    if overrides[4:7] == FINETUNE[4:7]:  # frozen (weights and BatchNorm statistics) until the snapshot, then trained
        before = torch.load(snapshot, weights_only=True)["model"]
        assert torch.all(before["blocks.0.1.running_mean"] == 0) and torch.all(before["blocks.0.1.running_var"] == 1)
        frozen = [k for k in before if k.startswith("blocks.0.") and "num_batches" not in k]
        assert all(not torch.equal(before[k], straight["model"][k]) for k in frozen)
        assert "epoch 2: 3 frozen parameter tensors unfrozen (trainer.unfreeze_at_epoch)" in caplog.text
