"""model=torchvision: shapes, gradient flow and determinism (tests/model_checks.py, as the core's models), the ResNet
stem and the 1x1 channel adapter, and its refusals."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from lab.config import ConfigError
from lab.extensions.pretrained.options import TorchvisionConfig
from lab.extensions.pretrained.vision import ChannelAdapter
from lab.models.common import build as build_model
from model_checks import NUM_CLASSES, Cases, contract_tests, make_meta


def resnet18_cfg() -> Any:
    return OmegaConf.structured(TorchvisionConfig(arch="resnet18", small_input=True))


def squeezenet_cfg() -> Any:
    # squeezenet1_1: ~0.7M parameters and no BatchNorm, the quickest torchvision model that works at 32 px.
    return OmegaConf.structured(TorchvisionConfig(arch="squeezenet1_1"))


CASES: Cases = {
    "resnet18": (resnet18_cfg, [(1, 16), (3, 32)]),
    "squeezenet": (squeezenet_cfg, [(1, 32), (3, 48)]),
}
test_output_is_logits_of_shape_batch_by_classes, test_gradients_reach_every_trainable_parameter, \
    test_eval_mode_is_deterministic = contract_tests(CASES)  # fmt: skip


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def test_resnet_stem_adapts_to_channels_and_small_inputs() -> None:
    small = build_model(resnet18_cfg(), make_meta(1, 32))
    assert (small.conv1.in_channels, small.conv1.kernel_size, small.conv1.stride) == (1, (3, 3), (1, 1))
    assert isinstance(small.maxpool, nn.Identity)
    standard = build_model(OmegaConf.structured(TorchvisionConfig(arch="resnet18")), make_meta(1, 32))
    assert (standard.conv1.in_channels, standard.conv1.kernel_size, standard.conv1.stride) == (1, (7, 7), (2, 2))
    assert isinstance(standard.maxpool, nn.MaxPool2d)
    assert standard(torch.randn(2, 1, 32, 32)).shape == (2, NUM_CLASSES)


def test_non_resnet_gets_a_1x1_channel_adapter_only_when_needed() -> None:
    assert isinstance(build_model(squeezenet_cfg(), make_meta(1, 32)), ChannelAdapter)
    assert not isinstance(build_model(squeezenet_cfg(), make_meta(3, 32)), ChannelAdapter)


def test_unknown_torchvision_arch_is_a_config_error_with_a_hint() -> None:
    cfg = OmegaConf.structured(TorchvisionConfig(arch="resnet19"))
    with pytest.raises(ConfigError, match=r"resnet19.*list_models.*resnet18") as err:
        build_model(cfg, make_meta(3, 32))
    assert "\n" not in str(err.value)


def test_small_input_is_rejected_for_non_resnet_archs() -> None:
    cfg = OmegaConf.structured(TorchvisionConfig(arch="squeezenet1_1", small_input=True))
    with pytest.raises(ConfigError, match="small_input"):
        build_model(cfg, make_meta(3, 32))
