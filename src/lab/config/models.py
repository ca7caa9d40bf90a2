"""The `model` group: one option per shipped model (lab.config.options). ``build(meta)`` makes the ``nn.Module`` for
the data ``meta`` describes (``input_shape``, ``num_outputs``...); the network code is imported only there."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from lab.config.checks import require as _require
from lab.config.options import Option
from lab.errors import UserError

if TYPE_CHECKING:
    from torch import nn


@dataclass
class ModelConfig(Option, group="model"):
    name: str = MISSING
    # fnmatch patterns over parameter names (model.freeze=[layer1.*]), or [backbone]: all but the classifier. Those
    # parameters keep their initial weights (and their BatchNorm statistics) and stay out of the optimizer, until
    # trainer.unfreeze_at_epoch (lab.models.freeze)
    freeze: list[str] = field(default_factory=list)
    # another run's checkpoint (or any weights file) to start from: every tensor that fits is loaded, a head of
    # another shape stays freshly initialised, and the counts are logged (lab.models.pretrained)
    init_from: str | None = None
    # whether build() draws its random initial weights only in each module's reset_parameters() and the model's
    # init_module seam, in the order lab.distributed.meta_init replays them: then dist=fsdp builds it on the meta
    # device and draws its weights shard by shard. An option opts in with a case in tests/helpers.py META_INIT_CASES,
    # whose tests compare the replay with its build bitwise (docs/architecture.md: Meta-device init under FSDP)
    replayable_init: ClassVar[bool] = False

    def build(self, meta: dict[str, Any]) -> nn.Module:
        """The model (an ``nn.Module``) for the data ``meta`` describes; ``lab.models.build`` applies ``init_from``
        and ``freeze``."""
        raise NotImplementedError(f"{type(self).__name__} has no build(meta)")

    def locate_weights(self) -> None:
        """Before a run writes anything: find the files ``build`` will read, refusing in one line when one cannot
        be had (a pretrained file neither cached nor downloadable, a moved init_from checkpoint)."""
        if self.init_from is not None and not Path(self.init_from).expanduser().is_file():
            raise UserError(f"model.init_from={self.init_from}: no such file (pass <run dir>/checkpoints/best.pt)")

    def preprocessing(self) -> dict[str, Any] | None:
        """What the pretrained weights expect of their inputs (image_size, interpolation, crop_pct, mean, std): an
        image dataset takes it for each of those keys it leaves null. None: the data's own."""
        return None

    def meta_init_blocker(self) -> str | None:
        """Why dist=fsdp cannot build this model on the meta device and replay its initialisation (None: it may, if
        its module tree passes lab.distributed.meta_init.blocker too)."""
        if self.init_from is not None:
            return "model.init_from loads weights while the model is built"
        if not self.replayable_init:
            return f"model={self.name} draws its initial weights in ways the replay does not reproduce"
        return None

    def for_checkpoint(self) -> ModelConfig:
        """The architecture alone, without its sources of initial weights: what a checkpoint's weights are loaded
        into, so eval/export/infer never read a pretrained file or another run's checkpoint again."""
        return dataclasses.replace(self, init_from=None)


@dataclass
class MLPConfig(ModelConfig):
    """A multilayer perceptron over flattened inputs: images or table rows."""

    replayable_init = True

    hidden_dims: list[int] = field(default_factory=lambda: [256, 128])
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(all(h >= 1 for h in self.hidden_dims), f"model.hidden_dims must be >= 1, got {self.hidden_dims}")
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.models.mlp import build_mlp

        return build_mlp(self, meta)


@dataclass
class CNNConfig(ModelConfig):
    """Small convnet with BatchNorm; works for any input size >= 8 px (global average pooling)."""

    replayable_init = True

    channels: list[int] = field(default_factory=lambda: [32, 64, 128])
    dropout: float = 0.1
    grad_checkpointing: bool = False  # recompute block activations in backward: less memory, ~30% more compute

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            len(self.channels) >= 1 and all(c >= 1 for c in self.channels),
            f"model.channels must be a non-empty list of positive ints, got {self.channels}",
        )
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.models.cnn import build_cnn

        return build_cnn(self, meta)


@dataclass
class TorchvisionConfig(ModelConfig):
    """Any torchvision classification model by name: model.arch=efficientnet_b0, mobilenet_v3_small, vit_b_16, ...;
    random init, or model.weights=DEFAULT (or a named weight) for torchvision's pretrained weights with a new head
    (model=resnet18 is the preset for CIFAR-size images)."""

    arch: str = "resnet18"  # any name from torchvision.models.list_models(torchvision.models)
    small_input: bool = False  # resnets: 3x3 stride-1 stem without max-pool, for 8-32 px images
    # pretrained weights: DEFAULT, a name of the arch's weights enum (IMAGENET1K_V1) or the full
    # ResNet18_Weights.IMAGENET1K_V1; null = random init. Read from torch's hub cache ($TORCH_HOME)
    weights: str | None = None
    # a file of the arch's weights, wherever it is (the preprocessing: model.weights', else DEFAULT's)
    weights_path: str | None = None

    def meta_init_blocker(self) -> str | None:
        pretrained = (
            ", and the pretrained weights are loaded while building" if self.weights or self.weights_path else ""
        )
        return f"model=torchvision draws its initial weights in loops of its own, beyond reset_parameters(){pretrained}"

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.models.vision import build_torchvision

        return build_torchvision(self, meta)

    def locate_weights(self) -> None:
        super().locate_weights()
        if self.weights is not None or self.weights_path is not None:
            from lab.models.vision import locate_weights

            locate_weights(self)

    def preprocessing(self) -> dict[str, Any] | None:
        if self.weights is None and self.weights_path is None:
            return None
        from lab.models.vision import pretrained_weights

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
    """Any timm model by name (timm.list_models(); a tag picks the weights: resnet50.a1_in1k), pretrained by default
    with a new head for the data's classes and the first convolution adapted to its channels. Weights come from
    model.weights_path, the Hugging Face cache ($HF_HOME) or the hub when the machine can reach it."""

    requires = ("timm",)

    arch: str = "resnet18"
    pretrained: bool = True
    weights_path: str | None = None  # a local weights file (.safetensors / .pth / a checkpoint): no hub, no cache
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
        from lab.models.timm_model import build_timm

        return build_timm(self, meta)

    def locate_weights(self) -> None:
        super().locate_weights()
        if self.pretrained:
            from lab.models.timm_model import locate_weights

            locate_weights(self)

    def preprocessing(self) -> dict[str, Any] | None:
        if not self.pretrained:
            return None
        from lab.models.timm_model import pretrained_cfg

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


@dataclass
class GPTConfig(ModelConfig):
    """A small decoder-only transformer (causal scaled_dot_product_attention, tied embeddings). Its context is the
    dataset's block_size (data_meta); grad_checkpointing recomputes blocks in backward."""

    replayable_init = True

    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.1
    grad_checkpointing: bool = False  # recompute each block in backward: less activation memory

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.n_layer >= 1 and self.n_head >= 1, "model.n_layer and model.n_head must be >= 1")
        _require(
            self.n_embd % self.n_head == 0, f"model.n_embd={self.n_embd} must be a multiple of n_head={self.n_head}"
        )
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.models.gpt import build_gpt

        return build_gpt(self, meta)
