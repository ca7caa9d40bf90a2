"""The `model` group: one option per shipped model (lab.config.options). ``build(meta)`` makes the ``nn.Module`` for
the data ``meta`` describes (``input_shape``, ``num_outputs``...); the network code is imported only there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from lab.config.checks import require as _require
from lab.config.options import Option


@dataclass
class ModelConfig(Option, group="model"):
    name: str = MISSING
    # fnmatch patterns over parameter names (model.freeze=[backbone.*]): those parameters keep their initial
    # weights and stay out of the optimizer (lab.models.freeze)
    freeze: list[str] = field(default_factory=list)

    def build(self, meta: Any) -> Any:
        """The model (an ``nn.Module``) for the data ``meta`` describes; ``lab.models.build`` applies ``freeze``."""
        raise NotImplementedError(f"{type(self).__name__} has no build(meta)")


@dataclass
class MLPConfig(ModelConfig):
    """A multilayer perceptron over flattened inputs: images or table rows."""

    hidden_dims: list[int] = field(default_factory=lambda: [256, 128])
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(all(h >= 1 for h in self.hidden_dims), f"model.hidden_dims must be >= 1, got {self.hidden_dims}")
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")

    def build(self, meta: Any) -> Any:
        from lab.models.mlp import build_mlp

        return build_mlp(self, meta)


@dataclass
class CNNConfig(ModelConfig):
    """Small convnet with BatchNorm; works for any input size >= 8 px (global average pooling)."""

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

    def build(self, meta: Any) -> Any:
        from lab.models.cnn import build_cnn

        return build_cnn(self, meta)


@dataclass
class TorchvisionConfig(ModelConfig):
    """Any torchvision classification model by name, random init: model.arch=efficientnet_b0, mobilenet_v3_small,
    vit_b_16, ... (model=resnet18 is the preset for CIFAR-size images)."""

    arch: str = "resnet18"  # any name from torchvision.models.list_models(torchvision.models)
    small_input: bool = False  # resnets: 3x3 stride-1 stem without max-pool, for 8-32 px images

    def build(self, meta: Any) -> Any:
        from lab.models.vision import build_torchvision

        return build_torchvision(self, meta)


@dataclass
class GPTConfig(ModelConfig):
    """A small decoder-only transformer (causal scaled_dot_product_attention, tied embeddings). Its context is the
    dataset's block_size (data_meta); grad_checkpointing recomputes blocks in backward."""

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

    def build(self, meta: Any) -> Any:
        from lab.models.gpt import build_gpt

        return build_gpt(self, meta)
