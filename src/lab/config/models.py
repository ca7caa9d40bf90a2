"""The `model` group: one option per shipped model (lab.config.options). ``build(meta)`` makes the ``nn.Module`` for
the data ``meta`` describes (``input_shape``, ``num_outputs``...); the network code is imported only there."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

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

    def head(self, model: nn.Module) -> nn.Module | None:
        """The classifier layer of the model ``build`` made: what model.freeze=[backbone] leaves training and
        optimizer.head_lr_scale scales (lab.models.freeze.head_parameters). The last ``nn.Linear``; None: none."""
        from torch import nn

        return next((m for m in reversed(list(model.modules())) if isinstance(m, nn.Linear)), None)

    def layer_groups(self, model: nn.Module) -> list[list[str]] | None:
        """The parameter names of the model ``build`` made, in layer groups from the stem to the classifier:
        optimizer.layer_decay gives the earlier ones smaller learning rates (lab.optim). None: the model does
        not name its layers in order, and optimizer.layer_decay is refused."""
        return None

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        """The submodules of the model ``build`` made that dist=fsdp shards as units of their own (each one's
        weights gathered only inside its own forward; the rest stay in the root unit, gathered for the whole
        forward): every top-level child with parameters, a ModuleList's or ModuleDict's items each. A model whose
        forward reads a child's weight directly (GPT's output projection is its token embedding) leaves it out."""
        from torch import nn

        children, units = list(model.children()), []
        while children:
            child = children.pop(0)
            if isinstance(child, nn.ModuleList | nn.ModuleDict):  # containers have no forward: their items do
                children[:0] = child.children()
            elif any(True for _ in child.parameters()):
                units.append(child)
        return units

    def init_module(self, model: nn.Module) -> Callable[[nn.Module], None] | None:
        """The model's own init of one module's tensors, which its ``__init__`` ends with as
        ``self.apply(<it>)``: dist=fsdp's meta-device init replays it module by module (lab.distributed.meta_init),
        so it must touch that module's own tensors only. None: the modules' ``reset_parameters()`` draw them all."""
        return None


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

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        # each block; the embeddings and the final norm stay in the root unit: the output projection reads the token
        # embedding's weight directly, outside its forward
        return list(model.get_submodule("blocks").children())

    def init_module(self, model: nn.Module) -> Callable[[nn.Module], None] | None:
        from lab.models.gpt import GPT

        return cast(GPT, model).init_module  # GPT-2's normal(0, 0.02)
