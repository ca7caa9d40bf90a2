"""`model=hf`: any Hugging Face transformers model for sequence classification or causal language modelling.

This module is imported at every start, so it imports neither torch nor transformers: ``build`` imports ``models``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.models import ModelConfig

if TYPE_CHECKING:
    from torch import nn

KINDS = ("auto", "sequence_classification", "causal_lm")
DTYPES = ("float32", "bfloat16")


@dataclass
class LoraSettings:
    """`model.lora`: a PEFT LoRA adapter; r=null (or model.lora=null) trains the whole model instead."""

    r: int | None = None  # the adapter's rank
    alpha: int = 16  # the update is scaled by alpha / r
    dropout: float = 0.0  # dropout on the adapter's input
    # module names the adapter wraps; null = PEFT's default for the architecture, its attention projections
    # (query/value for BERT, q_proj/v_proj for Llama)
    target_modules: list[str] | None = None


@dataclass
class HfConfig(ModelConfig, name="hf"):
    """A transformers model by hub id or local directory (model.name_or_path), with its pretrained weights.

    Sequence classification gets a new head sized from the data's classes; a causal LM predicts the next token. The
    files are read offline first: a local directory, the Hugging Face cache ($HF_HOME), then the hub when reachable."""

    requires = ("transformers", "peft")

    name_or_path: str = MISSING
    revision: str | None = None  # a branch, tag or commit of a hub id
    kind: str = "auto"  # auto (from the data: classes -> sequence_classification, else causal_lm) or either
    pretrained: bool = True  # false: the architecture from its config.json, randomly initialised
    dtype: str = "float32"  # the weights' dtype: float32 or bfloat16
    attn_implementation: str | None = None  # eager, sdpa, flash_attention_2...; null = transformers' choice
    grad_checkpointing: bool = False  # recompute each block in backward (the model's activation_checkpointing_enable)
    lora: LoraSettings | None = field(default_factory=LoraSettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("model.kind", self.kind, KINDS)
        _one_of("model.dtype", self.dtype, DTYPES)
        if self.lora is not None and self.lora.r is not None:
            _require(self.lora.r >= 1, f"model.lora.r must be >= 1 (or null: no LoRA), got {self.lora.r}")
            _require(0 <= self.lora.dropout < 1, f"model.lora.dropout must be in [0, 1), got {self.lora.dropout}")

    @property
    def uses_lora(self) -> bool:
        return self.lora is not None and self.lora.r is not None

    def meta_init_blocker(self) -> str | None:
        return "model=hf builds through transformers' from_pretrained, whose init the replay does not reproduce"

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.extensions.hf.models import build_hf

        return build_hf(self, meta)

    def locate_weights(self) -> None:
        super().locate_weights()
        from lab.extensions.hf.hub import locate

        locate(self.name_or_path, self.revision)

    def for_checkpoint(self) -> ModelConfig:
        # The checkpoint holds every weight: eval, export and infer build the architecture from its config alone.
        return dataclasses.replace(self, init_from=None, pretrained=False)

    def input_readers(self, meta: dict[str, Any]) -> dict[str, Any]:
        if "num_classes" not in meta:
            return {}  # a causal LM continues prompt=
        from lab.extensions.hf.infer import SUFFIXES, text_reader

        read = text_reader(meta.get("tokenizer") or self.name_or_path, self.revision)
        return dict.fromkeys(SUFFIXES, read)

    def head(self, model: nn.Module) -> nn.Module | None:
        from lab.extensions.hf.models import head

        return head(model) or super().head(model)

    def layer_groups(self, model: nn.Module) -> list[list[str]] | None:
        from lab.extensions.hf.models import layer_groups

        return layer_groups(model)

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        from lab.extensions.hf.models import blocks

        return blocks(model)
