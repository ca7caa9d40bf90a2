"""The models the core ships, one option each (the keys every model has: lab.config.models). `build(meta)` imports
the network's module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from lab.config.checks import require as _require
from lab.config.models import ModelConfig

if TYPE_CHECKING:
    from torch import nn


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
    """A small convnet with BatchNorm; global average pooling lets it take any input size >= 8 px."""

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
        from lab.models.cnn import SmallCNN
        from lab.models.common import image_channels

        return SmallCNN(
            image_channels(meta, "cnn"), self.channels, int(meta["num_outputs"]), self.dropout, self.grad_checkpointing
        )


@dataclass
class GPTConfig(ModelConfig):
    """A small decoder-only transformer with tied embeddings; its context is the dataset's block_size."""

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
        from lab.errors import ConfigError
        from lab.models.gpt import GPT

        if "vocab_size" not in meta or "block_size" not in meta:
            raise ConfigError(
                "model=gpt takes token sequences: use it with a text dataset (data=text), not images or tables"
            )
        vocab_size, block_size = int(meta["vocab_size"]), int(meta["block_size"])
        return GPT(
            vocab_size, block_size, self.n_layer, self.n_head, self.n_embd, self.dropout, self.grad_checkpointing
        )

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        # Each block. The embeddings and final norm stay in the root unit, since the output projection reads the
        # token embedding's weight directly, outside its forward.
        return list(model.get_submodule("blocks").children())

    def init_module(self, model: nn.Module) -> Callable[[nn.Module], None] | None:
        from lab.models.gpt import GPT

        return cast(GPT, model).init_module  # GPT-2's normal(0, 0.02)
