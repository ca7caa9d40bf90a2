"""The `model` kind: the keys and seams every model has. Each model is an option (the core's: lab/models/options.py)
whose `build(meta)` makes the `nn.Module` for the data `meta` describes, importing the network code only there."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from lab.config.options import Option
from lab.errors import UserError

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class ModelConfig(Option, group="model"):
    name: str = MISSING
    # fnmatch patterns over parameter names (model.freeze=[layer1.*]), or [backbone] for all but the classifier.
    # These keep their initial weights and BatchNorm statistics and stay out of the optimizer until
    # trainer.unfreeze_at_epoch (lab.models.freeze).
    freeze: list[str] = field(default_factory=list)
    # A checkpoint or weights file to start from. Every tensor that fits is loaded, a head of another shape stays
    # freshly initialised, and the counts are logged (lab.models.pretrained).
    init_from: str | None = None
    # True if build() draws its random weights only in reset_parameters() and init_module, in the order
    # lab.distributed.meta_init replays them. Then dist=fsdp builds the model on the meta device and draws its
    # weights shard by shard. To opt in, add a case to META_INIT_CASES in tests/helpers.py; its tests compare the
    # replay with the build bitwise (docs/architecture.md, "Meta-device init under FSDP").
    replayable_init: ClassVar[bool] = False

    def build(self, meta: dict[str, Any]) -> nn.Module:
        """Return the `nn.Module` for the data `meta` describes; `models.common.build` applies init_from and freeze."""
        raise NotImplementedError(f"{type(self).__name__} has no build(meta)")

    def locate_weights(self) -> None:
        """Find the files `build` will read before a run writes anything; raise UserError if one is missing."""
        if self.init_from is not None and not Path(self.init_from).expanduser().is_file():
            raise UserError(f"model.init_from={self.init_from}: no such file (pass <run dir>/checkpoints/best.pt)")

    def preprocessing(self) -> dict[str, Any] | None:
        """Return what the pretrained weights expect of their inputs (image_size, interpolation, crop_pct, mean, std),
        which an image dataset takes where it leaves them null, or None to keep the data's own."""
        return None

    def meta_init_blocker(self) -> str | None:
        """Return why dist=fsdp cannot build this model on the meta device and replay its init, or None (its module
        tree must still pass lab.distributed.meta_init.blocker)."""
        if self.init_from is not None:
            return "model.init_from loads weights while the model is built"
        if not self.replayable_init:
            return f"model={self.name} draws its initial weights in ways the replay does not reproduce"
        return None

    def meta_model_blocker(self, model: nn.Module) -> str | None:
        """Return why `materialise` cannot fill the meta-built `model`'s weights, or None (by default: the replay's)."""
        from lab.distributed import meta_init

        return meta_init.blocker(model)

    def materialise(self, model: nn.Module, device: torch.device, rng_state: torch.Tensor) -> None:
        """Give the meta-built `model`, sharded by dist=fsdp, storage on `device` and its initial weights: by default
        the replay of its init from `rng_state`. An option reading its weights from files overrides both seams."""
        from lab.distributed import meta_init

        meta_init.materialise(model, device, rng_state, self)

    def save_with_run(self, run_dir: Path, meta: dict[str, Any]) -> None:
        """Save into the training run's dir what this model reads besides its weights (a tokenizer), so eval, export
        and infer from its checkpoints work once the original is gone. Called once, before the first step."""

    def read_with_run(self, checkpoint: Path, config: dict[str, Any], meta: dict[str, Any]) -> None:
        """Point `config` and `meta` (in place) at what save_with_run saved, for `checkpoint` in <run>/checkpoints/."""

    def for_checkpoint(self) -> ModelConfig:
        """Return the architecture without init_from, so eval/export/infer never read those weights again."""
        return dataclasses.replace(self, init_from=None)

    def checkpoint_state(self, model: nn.Module, state: dict[str, Any]) -> dict[str, Any]:
        """Return a checkpoint's entries for `model`'s whole state dict `state`: by default {"model": state}."""
        return {"model": state}

    def restore_state(self, model: nn.Module, ckpt: dict[str, Any], key: str = "model") -> dict[str, Any]:
        """Return the whole state dict for `model` (as build() made it) from `ckpt[key]`: by default that entry."""
        return ckpt[key]

    def head(self, model: nn.Module) -> nn.Module | None:
        """Return `model`'s classifier (by default the last `nn.Linear`) for freeze=[backbone] and head_lr_scale."""
        from torch import nn

        return next((m for m in reversed(list(model.modules())) if isinstance(m, nn.Linear)), None)

    def layer_groups(self, model: nn.Module) -> list[list[str]] | None:
        """Return `model`'s parameter names in layer groups from stem to classifier, for optimizer.layer_decay, or
        None (the model does not name its layers in order: optimizer.layer_decay is refused)."""
        return None

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        """Return the submodules dist=fsdp shards as units of their own (by default every top-level child with
        parameters, and each item of a ModuleList or ModuleDict). A unit's weights are gathered only inside its own
        forward, so a model whose forward reads a child's weight directly (GPT's tied embedding) leaves it out."""
        from torch import nn

        children, units = list(model.children()), []
        while children:
            child = children.pop(0)
            if isinstance(child, nn.ModuleList | nn.ModuleDict):  # containers have no forward; their items do
                children[:0] = child.children()
            elif any(True for _ in child.parameters()):
                units.append(child)
        return units

    def input_readers(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Return infer's readers of input= files beyond the core's, by suffix (`lab.inference.inputs.Reader`): a
        text model reads .txt lines with its tokenizer. A reader raises `lab.errors.UnreadableInput` for a file it
        cannot read: infer skips it, naming it, and predicts the rest."""
        return {}

    def init_module(self, model: nn.Module) -> Callable[[nn.Module], None] | None:
        """Return the model's own per-module init, which its `__init__` ends with as `self.apply(<it>)`, or None (the
        modules' `reset_parameters()` draw all the weights). dist=fsdp's meta-device init replays it module by
        module, so it must touch that module's own tensors only."""
        return None
