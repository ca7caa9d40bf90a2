"""dist=fsdp's meta-device init and this extension's models: their options know the replay cannot redo them
(torchvision's and timm's constructors draw in init loops of their own, and load pretrained weights), so
dist.meta_init=true refuses them with the config and auto builds them whole without trying."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from helpers import META_INIT_CASES
from lab.config import validate
from lab.distributed import meta_init
from lab.errors import ConfigError


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=torchvision"], "model=torchvision draws its initial weights in loops of its own"),
        (["model=torchvision", "model.weights=DEFAULT"], "and the pretrained weights are loaded while building"),
        pytest.param(
            ["model=timm"],
            "model=timm draws its initial weights in init functions of its own",
            marks=pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="the pretrained extra"),
        ),
    ],
)
def test_meta_init_true_refuses_them_with_the_config(compose, overrides, message) -> None:
    cfg = compose(["dist=fsdp", "dist.meta_init=true", *overrides])
    with pytest.raises(ConfigError, match=r"^dist\.meta_init=true cannot build this model on the meta device: ") as e:
        validate(cfg)
    assert message in str(e.value)
    validate(compose(["dist=fsdp", "dist.meta_init=auto", *overrides]))  # auto: built whole, said in the run


def test_meta_init_auto_tries_no_meta_build_of_them() -> None:
    auto = SimpleNamespace(strategy="fsdp", meta_init="auto", reshard_after_forward=True)
    assert meta_init.build({"name": "torchvision"}, META_INIT_CASES["mlp"][1], auto) is None
