"""The page's fine-tuning commands that need the hub, its cache or a run of yours, composed and checked as a run
checks them before it starts (tests/integration/test_finetune.py runs the one from a weights file), and `model=timm`
without its extra."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lab.config import validate
from lab.errors import ConfigError

PAGE = Path(__file__).resolve().parents[1] / "README.md"
RUN = "2026-01-02_03-04-05_000006"  # a run dir's name, for the page's <run>
# the page's commands, as written (test_readme checks that each line of its ```sh blocks is quoted by its tests),
# each with values its config must hold
COMMANDS = [
    (
        "python scripts/train.py experiment=finetune_folder data.root=/path/to/images",
        {"model.name": "timm", "model.arch": "resnet18.a1_in1k", "model.pretrained": True, "data.name": "image_folder"},
    ),
    (
        "python scripts/train.py experiment=finetune_folder data.root=/path/to/images model.arch=convnext_tiny.in12k_ft_in1k",  # noqa: E501
        {"model.arch": "convnext_tiny.in12k_ft_in1k", "optimizer.head_lr_scale": 10.0},
    ),
    (
        "python scripts/train.py data=image_folder data.root=/path/to/images model=torchvision model.arch=resnet50 model.weights=DEFAULT",  # noqa: E501
        {"model.name": "torchvision", "model.arch": "resnet50", "model.weights": "DEFAULT"},
    ),
    (
        "python scripts/train.py experiment=finetune_folder data.root=/path/to/images 'model.freeze=[backbone]' trainer.unfreeze_at_epoch=2",  # noqa: E501
        {"model.freeze": ["backbone"], "trainer.unfreeze_at_epoch": 2},
    ),
    (
        "python scripts/train.py experiment=finetune_folder data.root=/path/to/new_images model.init_from=outputs/train/<run>/checkpoints/best.pt",  # noqa: E501
        {"model.init_from": f"outputs/train/{RUN}/checkpoints/best.pt", "data.root": "/path/to/new_images"},
    ),
]


@pytest.mark.parametrize(("command", "expected"), COMMANDS, ids=[str(i) for i in range(len(COMMANDS))])
def test_the_pages_commands_compose_and_validate(compose, command, expected):
    assert command in PAGE.read_text(), command
    python, script, *overrides = shlex.split(command.replace("<run>", RUN))
    assert (python, script) == ("python", "scripts/train.py")
    cfg = compose(overrides)
    validate(cfg)
    for key, value in expected.items():
        node = OmegaConf.select(cfg, key)
        assert (OmegaConf.to_container(node) if OmegaConf.is_config(node) else node) == value, key


def test_model_timm_without_timm_is_refused_naming_the_extra(compose, without):
    cfg = compose(["model=timm", "model.pretrained=false"])
    validate(cfg)  # installed here: accepted
    without("timm")  # what `make install EXTRAS=` leaves out
    with pytest.raises(ConfigError) as caught:
        validate(cfg)
    message = str(caught.value)
    assert message.startswith("model=timm needs timm"), message
    assert re.search(r"make install EXTRAS=\S*\bpretrained\b", message) and "-e '.[pretrained]'" in message, message
