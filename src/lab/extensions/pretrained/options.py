"""Options of the pretrained extension: `model=torchvision` and `model=timm`, each a ``ModelConfig``.

This module is imported at every start, so it must not import torch, torchvision or timm. Each option's ``build``
imports its own module (``vision``, ``timm_model``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from lab.config.checks import require as _require
from lab.config.models import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@dataclass
class TorchvisionConfig(ModelConfig):
    """Any torchvision classification model by name, e.g. model.arch=efficientnet_b0, mobilenet_v3_small, vit_b_16.

    It starts from random weights, or from torchvision's pretrained ones with a new head when model.weights=DEFAULT
    or a named weight is set. model=resnet18 is the preset for CIFAR-size images."""

    arch: str = "resnet18"  # any name from torchvision.models.list_models(torchvision.models)
    small_input: bool = False  # resnets: 3x3 stride-1 stem without max-pool, for 8-32 px images
    # pretrained weights: DEFAULT, a name of the arch's weights enum (IMAGENET1K_V1) or the full
    # ResNet18_Weights.IMAGENET1K_V1; null = random init. Read from torch's hub cache ($TORCH_HOME)
    weights: str | None = None
    # a local file of the arch's weights; preprocessing still comes from model.weights, else DEFAULT
    weights_path: str | None = None

    def meta_init_blocker(self) -> str | None:
        pretrained = (
            ", and the pretrained weights are loaded while building" if self.weights or self.weights_path else ""
        )
        return f"model=torchvision draws its initial weights in loops of its own, beyond reset_parameters(){pretrained}"

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.extensions.pretrained.vision import build_torchvision

        return build_torchvision(self, meta)

    def locate_weights(self) -> None:
        super().locate_weights()
        if self.weights is not None or self.weights_path is not None:
            from lab.extensions.pretrained.vision import locate_weights

            locate_weights(self)

    def preprocessing(self) -> dict[str, Any] | None:
        if self.weights is None and self.weights_path is None:
            return None
        from lab.extensions.pretrained.vision import pretrained_weights

        transforms = pretrained_weights(self).transforms()
        crop, resize = transforms.crop_size[0], transforms.resize_size[0]
        return {
            "image_size": int(crop),
            "crop_pct": crop / resize,
            "interpolation": transforms.interpolation.value,
            "mean": list(transforms.mean),
            "std": list(transforms.std),
        }

    def for_checkpoint(self) -> ModelConfig:
        return dataclasses.replace(self, init_from=None, weights=None, weights_path=None)


@dataclass
class TimmConfig(ModelConfig):
    """Any timm model by name (timm.list_models()), pretrained by default. A tag picks the weights: resnet50.a1_in1k.

    The model gets a new head for the data's classes and its first convolution is adapted to the data's channels.
    Weights come from model.weights_path, the Hugging Face cache ($HF_HOME) or the hub if the machine can reach it."""

    requires = ("timm",)

    arch: str = "resnet18"
    pretrained: bool = True
    weights_path: str | None = None  # local .safetensors, .pth or checkpoint; skips hub and cache
    drop_rate: float = 0.0  # dropout before the classifier
    drop_path_rate: float = 0.0  # stochastic depth, for the archs that have it (ViTs, ConvNeXts, ResNets)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("drop_rate", "drop_path_rate"):
            _require(0 <= getattr(self, key) < 1, f"model.{key} must be in [0, 1), got {getattr(self, key)}")
        _require(
            self.weights_path is None or self.pretrained,
            "model.weights_path is read only with model.pretrained=true (or drop model.weights_path)",
        )

    def meta_init_blocker(self) -> str | None:
        pretrained = ", and the pretrained weights are loaded while building" if self.pretrained else ""
        return (
            f"model=timm draws its initial weights in init functions of its own, beyond reset_parameters(){pretrained}"
        )

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.extensions.pretrained.timm_model import build_timm

        return build_timm(self, meta)

    def locate_weights(self) -> None:
        super().locate_weights()
        if self.pretrained:
            from lab.extensions.pretrained.timm_model import locate_weights

            locate_weights(self)

    def preprocessing(self) -> dict[str, Any] | None:
        if not self.pretrained:
            return None
        from lab.extensions.pretrained.timm_model import pretrained_cfg

        cfg = pretrained_cfg(self.arch)
        return {
            "image_size": int(cfg.input_size[-1]),
            "crop_pct": float(cfg.crop_pct),
            "interpolation": str(cfg.interpolation),
            "mean": [float(m) for m in cfg.mean],
            "std": [float(s) for s in cfg.std],
        }

    def for_checkpoint(self) -> ModelConfig:
        return dataclasses.replace(self, init_from=None, pretrained=False, weights_path=None)

    def head(self, model: nn.Module) -> nn.Module | None:
        from torch import nn

        classifier = cast(Any, model).get_classifier()  # the layer made for the data's classes
        # a two-headed model (distilled ViT) gives a pair; fall back to the last nn.Linear
        return classifier if isinstance(classifier, nn.Module) else super().head(model)

    def layer_groups(self, model: nn.Module) -> list[list[str]] | None:
        from timm.models import group_parameters

        # timm's group_matcher lists layers in order, stem first and classifier last
        matcher = cast(Any, model).group_matcher(coarse=False)
        return [list(names) for names in group_parameters(model, matcher).values()]
