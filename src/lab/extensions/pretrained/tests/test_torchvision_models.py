"""model=torchvision: shapes, gradient flow and determinism (tests/model_checks.py, as the core's models), the ResNet
stem and the 1x1 channel adapter, and its refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from lab import models
from lab.config import ConfigError
from lab.extensions.pretrained.options import TorchvisionConfig
from lab.extensions.pretrained.vision import ChannelAdapter
from model_checks import NUM_CLASSES, check_eval_is_deterministic, check_gradients, check_logits, make_meta


def resnet18_cfg() -> Any:
    return OmegaConf.structured(TorchvisionConfig(arch="resnet18", small_input=True))


def squeezenet_cfg() -> Any:
    # squeezenet1_1: ~0.7M parameters and no BatchNorm, the quickest torchvision model that works at 32 px.
    return OmegaConf.structured(TorchvisionConfig(arch="squeezenet1_1"))


# (config factory, [(in_channels, image_size), ...]): two input sizes and both channel counts per model.
CASES: dict[str, tuple[Callable[[], Any], list[tuple[int, int]]]] = {
    "resnet18": (resnet18_cfg, [(1, 16), (3, 32)]),
    "squeezenet": (squeezenet_cfg, [(1, 32), (3, 48)]),
}
SHAPE_PARAMS = [(name, c, s) for name, (_, sizes) in CASES.items() for c, s in sizes]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def build(name: str, in_channels: int, image_size: int) -> nn.Module:
    return models.build(CASES[name][0](), make_meta(in_channels, image_size))


@pytest.mark.parametrize(("name", "in_channels", "image_size"), SHAPE_PARAMS)
def test_output_is_logits_of_shape_batch_by_classes(name: str, in_channels: int, image_size: int) -> None:
    check_logits(build(name, in_channels, image_size), in_channels, image_size)


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_reach_every_trainable_parameter(name: str) -> None:
    in_channels, image_size = CASES[name][1][0]  # 1 channel: also exercises the resnet stem / 1x1 adapter
    check_gradients(build(name, in_channels, image_size), in_channels, image_size)


@pytest.mark.parametrize("name", list(CASES))
def test_eval_mode_is_deterministic(name: str) -> None:
    in_channels, image_size = CASES[name][1][1]
    check_eval_is_deterministic(build(name, in_channels, image_size), in_channels, image_size)


def test_resnet_stem_adapts_to_channels_and_small_inputs() -> None:
    small = models.build(resnet18_cfg(), make_meta(1, 32))
    assert (small.conv1.in_channels, small.conv1.kernel_size, small.conv1.stride) == (1, (3, 3), (1, 1))
    assert isinstance(small.maxpool, nn.Identity)
    standard = models.build(OmegaConf.structured(TorchvisionConfig(arch="resnet18")), make_meta(1, 32))
    assert (standard.conv1.in_channels, standard.conv1.kernel_size, standard.conv1.stride) == (1, (7, 7), (2, 2))
    assert isinstance(standard.maxpool, nn.MaxPool2d)
    assert standard(torch.randn(2, 1, 32, 32)).shape == (2, NUM_CLASSES)


def test_non_resnet_gets_a_1x1_channel_adapter_only_when_needed() -> None:
    assert isinstance(build("squeezenet", 1, 32), ChannelAdapter)
    assert not isinstance(build("squeezenet", 3, 32), ChannelAdapter)


def test_unknown_torchvision_arch_is_a_config_error_with_a_hint() -> None:
    cfg = OmegaConf.structured(TorchvisionConfig(arch="resnet19"))
    with pytest.raises(ConfigError, match=r"resnet19.*list_models.*resnet18") as err:
        models.build(cfg, make_meta(3, 32))
    assert "\n" not in str(err.value)


def test_small_input_is_rejected_for_non_resnet_archs() -> None:
    cfg = OmegaConf.structured(TorchvisionConfig(arch="squeezenet1_1", small_input=True))
    with pytest.raises(ConfigError, match="small_input"):
        models.build(cfg, make_meta(3, 32))
