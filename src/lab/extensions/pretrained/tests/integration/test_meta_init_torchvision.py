"""dist=fsdp over 2 gloo ranks with model=torchvision, whose initialisation the meta-device replay cannot redo: the
whole model is built on every rank before sharding, and the run says why."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slow


def test_meta_init_auto_builds_a_model_it_cannot_replay_whole_saying_why(train) -> None:
    run = train(
        *("dist=fsdp", "dist.nproc=2", "model=torchvision", "model.small_input=true", "logger=none"),
        *("trainer.max_steps=1", "trainer.max_epochs=1", "trainer.limit_val_batches=1"),
    )
    why = re.findall(r"dist=fsdp: the whole model is built on every rank before sharding .*", run.output)
    assert why == [
        "dist=fsdp: the whole model is built on every rank before sharding (no meta-device init): model=torchvision "
        "draws its initial weights in loops of its own, beyond reset_parameters()"
    ]
