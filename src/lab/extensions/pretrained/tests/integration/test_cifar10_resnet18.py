"""`experiment=cifar10_resnet18` as written (the core's sweep of every experiment leaves an extension's to its own
tests), shortened by debug=fast on a tiny CIFAR-10 copy: the ResNet-18 preset's stem, SGD + cosine, AMP (bf16
autocast on the CPU) and channels_last."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from helpers import write_tiny_cifar10

pytestmark = pytest.mark.slow


def test_the_cifar10_resnet18_experiment_runs(train, tmp_path):
    write_tiny_cifar10(tmp_path / "cifar", per_batch=12)  # 60 to train (6 of them validate), 12 to test
    # a ResNet-18 step of 32 images under bf16 autocast is ~25 s of CPU: the experiment as written, on small batches
    run = train(
        "experiment=cifar10_resnet18",
        "debug=fast",
        "logger=none",
        f"data.root={tmp_path / 'cifar'}",
        "data.batch_size=4",
        "data.num_workers=0",
    )
    config = OmegaConf.load(run.dir / ".hydra" / "config.yaml")
    assert (config.model.name, config.model.small_input, config.precision.name) == ("torchvision", True, "amp")
    assert run.summary()["status"] == "completed"
