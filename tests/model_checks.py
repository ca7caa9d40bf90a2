"""What every model of an image option must do, checked by tests/unit/models/test_models.py for the core's models and
by an extension's tests for its own: logits of shape (batch, classes) in both modes, gradients that reach every
trainable parameter, and an eval-mode forward that is deterministic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from lab.models.common import build as build_model

NUM_CLASSES = 5


def make_meta(in_channels: int, image_size: int, num_classes: int = NUM_CLASSES) -> dict[str, Any]:
    return {
        "input_shape": [in_channels, image_size, image_size],
        "num_outputs": num_classes,
        "num_classes": num_classes,
        "in_channels": in_channels,
        "image_size": image_size,
        "mean": [0.5] * in_channels,
        "std": [0.25] * in_channels,
        "class_names": [str(i) for i in range(num_classes)],
    }


def check_logits(model: nn.Module, in_channels: int, image_size: int) -> None:
    for mode in (True, False):
        model.train(mode)
        out = model(torch.randn(2, in_channels, image_size, image_size))
        assert out.shape == (2, NUM_CLASSES)
        assert out.dtype == torch.float32


def check_gradients(model: nn.Module, in_channels: int, image_size: int) -> None:
    model.train()
    x = torch.randn(4, in_channels, image_size, image_size)
    loss = nn.functional.cross_entropy(model(x), torch.arange(4) % NUM_CLASSES)
    loss.backward()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    missing = [n for n, p in params if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"no or non-finite gradient for {missing}"
    nonzero = sum(bool(p.grad.abs().sum() > 0) for _, p in params)
    # A dead ReLU can zero a whole tensor's gradient at random init; "most" is what a wiring bug would break.
    assert nonzero >= 0.9 * len(params), f"only {nonzero}/{len(params)} parameters got a nonzero gradient"


def check_eval_is_deterministic(model: nn.Module, in_channels: int, image_size: int) -> None:
    model.eval()
    x = torch.randn(3, in_channels, image_size, image_size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)


Cases = dict[str, tuple[Callable[[], Any], list[tuple[int, int]]]]


def contract_tests(cases: Cases) -> tuple[Callable[..., None], ...]:
    """The three checks as tests over `cases` (name -> (config factory, [(in_channels, image_size), ...]): two input
    sizes and both channel counts per model). A test module binds them to its own `test_*` names."""

    def build(name: str, in_channels: int, image_size: int) -> nn.Module:
        torch.manual_seed(0)
        return build_model(cases[name][0](), make_meta(in_channels, image_size))

    shapes = [(name, c, s) for name, (_, sizes) in cases.items() for c, s in sizes]

    @pytest.mark.parametrize(("name", "in_channels", "image_size"), shapes)
    def logits(name: str, in_channels: int, image_size: int) -> None:
        check_logits(build(name, in_channels, image_size), in_channels, image_size)

    @pytest.mark.parametrize("name", list(cases))
    def gradients(name: str) -> None:
        in_channels, image_size = cases[name][1][0]  # 1 channel: a stem or a channel adapter is exercised
        check_gradients(build(name, in_channels, image_size), in_channels, image_size)

    @pytest.mark.parametrize("name", list(cases))
    def deterministic(name: str) -> None:
        in_channels, image_size = cases[name][1][1]
        check_eval_is_deterministic(build(name, in_channels, image_size), in_channels, image_size)

    return logits, gradients, deterministic
