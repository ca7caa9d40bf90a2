"""Schemas of the `model` group: one per shipped model (a fork's model registers its own)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from lab.config.checks import require as _require


@dataclass
class ModelConfig:
    name: str = MISSING
    # fnmatch patterns over parameter names (model.freeze=[backbone.*]): those parameters keep their initial
    # weights and stay out of the optimizer (lab.models.freeze)
    freeze: list[str] = field(default_factory=list)


@dataclass
class MLPConfig(ModelConfig):
    name: str = "mlp"
    hidden_dims: list[int] = field(default_factory=lambda: [256, 128])
    dropout: float = 0.1

    def __post_init__(self) -> None:
        _require(all(h >= 1 for h in self.hidden_dims), f"model.hidden_dims must be >= 1, got {self.hidden_dims}")
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class CNNConfig(ModelConfig):
    name: str = "cnn"
    channels: list[int] = field(default_factory=lambda: [32, 64, 128])
    dropout: float = 0.1
    grad_checkpointing: bool = False  # recompute block activations in backward: less memory, ~30% more compute

    def __post_init__(self) -> None:
        _require(
            len(self.channels) >= 1 and all(c >= 1 for c in self.channels),
            f"model.channels must be a non-empty list of positive ints, got {self.channels}",
        )
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class TorchvisionConfig(ModelConfig):
    name: str = "torchvision"
    arch: str = "resnet18"  # any name from torchvision.models.list_models(torchvision.models)
    small_input: bool = False  # resnets: 3x3 stride-1 stem without max-pool, for 8-32 px images


@dataclass
class GPTConfig(ModelConfig):
    """A small decoder-only transformer (causal scaled_dot_product_attention, tied embeddings)."""

    name: str = "gpt"
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.1
    grad_checkpointing: bool = False  # recompute each block in backward: less activation memory

    def __post_init__(self) -> None:
        _require(self.n_layer >= 1 and self.n_head >= 1, "model.n_layer and model.n_head must be >= 1")
        _require(
            self.n_embd % self.n_head == 0, f"model.n_embd={self.n_embd} must be a multiple of n_head={self.n_head}"
        )
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")
