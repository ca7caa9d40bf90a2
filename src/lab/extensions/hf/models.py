"""Build a transformers model (model=hf) as a module the Trainer drives: dict inputs in, a logits tensor out.

The tasks call ``model(inputs)`` with the data's dict (``input_ids``, ``attention_mask``...) or, to continue a
prompt, a tensor of token ids, and take a tensor of logits: ``HfModel`` makes a transformers model fit that. With
``model.lora.r`` the network is wrapped in a PEFT LoRA adapter, which freezes every base weight.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from lab.errors import ConfigError
from lab.extensions.hf import hub

log = logging.getLogger(__name__)


class HfModel(nn.Module):
    """A transformers model called with one argument (a dict of tensors or the token ids) returning its logits."""

    def __init__(self, network: Any, causal: bool) -> None:
        super().__init__()
        self.network, self.causal = network, causal
        self.pad: int | None = network.config.pad_token_id  # to mask the padding of token ids given alone

    def forward(
        self, inputs: Mapping[str, torch.Tensor] | torch.Tensor | None = None, **named: torch.Tensor
    ) -> torch.Tensor:
        # named: the dict's entries as keywords, as torchinfo passes a dict input (the start report's summary)
        batch = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs} if inputs is not None else {}
        batch |= named
        if "attention_mask" not in batch and not self.causal and self.pad is not None:
            # token ids alone (infer's text lines, padded to the longest): attend to all but the padding
            batch["attention_mask"] = torch.ne(batch["input_ids"], self.pad).long()
        # no key/value cache in training: it would only hold memory
        extra = {"use_cache": False} if self.causal else {}
        return self.network(**batch, **extra).logits


def kind(cfg: Any, meta: Mapping[str, Any]) -> str:
    """Return the head `cfg` asks for, or the one the data calls for: classes -> sequence classification."""
    if cfg.kind != "auto":
        return str(cfg.kind)
    if "num_classes" in meta:
        return "sequence_classification"
    if "vocab_size" in meta:
        return "causal_lm"
    raise ConfigError(
        "model=hf takes token data (a dataset whose meta has num_classes or vocab_size); "
        "set model.kind=sequence_classification or causal_lm with a dataset of token ids"
    )


def build_hf(cfg: Any, meta: Mapping[str, Any]) -> HfModel:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    head = kind(cfg, meta)
    located = hub.locate(cfg.name_or_path, cfg.revision)
    settings: dict[str, Any] = {}
    if head == "sequence_classification":
        settings["num_labels"] = int(meta["num_classes"])
    if cfg.attn_implementation is not None:
        settings["attn_implementation"] = cfg.attn_implementation
    auto = AutoModelForSequenceClassification if head == "sequence_classification" else AutoModelForCausalLM
    dtype = getattr(torch, cfg.dtype)
    try:
        if cfg.pretrained and torch.get_default_device().type != "meta":
            network = auto.from_pretrained(**located, dtype=dtype, **settings)
        else:  # random weights, or none on the meta device (dist=fsdp: each rank reads its shards, sharded_load.py)
            config = AutoConfig.from_pretrained(**located, **settings)
            network = auto.from_config(config, dtype=dtype)
    except (OSError, ValueError, KeyError) as err:
        what = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(
            f"model=hf model.name_or_path={cfg.name_or_path}: transformers could not build it ({what})"
        ) from err
    _fit_tokenizer(network, meta)
    if cfg.grad_checkpointing:
        network.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.uses_lora:
        network = _with_lora(network, cfg.lora, head)
    return HfModel(network, causal=head == "causal_lm")


def _fit_tokenizer(network: Any, meta: Mapping[str, Any]) -> None:
    """Give the model the data tokenizer's padding id and room for every id the tokenizer makes."""
    pad = meta.get("pad_token_id")
    if pad is not None and network.config.pad_token_id is None:
        # a decoder's classification head reads the last token that is not padding, found by this id
        network.config.pad_token_id = int(pad)
    vocab = int(meta.get("vocab_size") or 0)
    rows = network.get_input_embeddings().num_embeddings
    if vocab > rows:
        # the tokenizer added tokens (a padding token, say): their embeddings start random and train
        log.info("model=hf: token embeddings resized from %d to the tokenizer's %d", rows, vocab)
        # the meta device (dist=fsdp) has no values to take the mean of; a resized model is built whole there anyway
        network.resize_token_embeddings(vocab, mean_resizing=torch.get_default_device().type != "meta")


def _with_lora(network: Any, lora: Any, head: str) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=int(lora.r),
        lora_alpha=int(lora.alpha),
        lora_dropout=float(lora.dropout),
        target_modules=list(lora.target_modules) if lora.target_modules else None,
        # SEQ_CLS also trains the new classifier head whole (PEFT's modules_to_save)
        task_type="SEQ_CLS" if head == "sequence_classification" else "CAUSAL_LM",
    )
    try:
        wrapped = get_peft_model(network, config)
    except ValueError as err:
        raise ConfigError(f"model.lora: PEFT could not wrap the model ({str(err).splitlines()[0]})") from err
    trainable, total = wrapped.get_nb_trainable_parameters()
    targets: Any = wrapped.peft_config["default"]  # the LoraConfig, its target modules resolved
    log.info(
        "model.lora: r=%d on %s: %s of %s parameters train (%.2f%%)",
        lora.r,
        ", ".join(sorted(targets.target_modules)),
        f"{trainable:,}",
        f"{total:,}",
        100 * trainable / total,
    )
    return wrapped


def _pretrained(model: nn.Module) -> Any:
    """Return the transformers model inside `model` (under the PEFT wrapper, if any)."""
    from transformers import PreTrainedModel

    return next(m for m in model.modules() if isinstance(m, PreTrainedModel))


def blocks(model: nn.Module) -> list[nn.Module]:
    """Return the model's repeated blocks, the classes transformers names in `_no_split_modules`, in order."""
    names = set(getattr(_pretrained(model), "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def head(model: nn.Module) -> nn.Module | None:
    """Return the classifier (`score` or `classifier`) or the LM head; PEFT's trainable copy when it made one."""
    network = _pretrained(model)
    found = next((getattr(network, n) for n in ("score", "classifier") if hasattr(network, n)), None)
    found = found if found is not None else network.get_output_embeddings()
    copies = getattr(found, "modules_to_save", None)  # PEFT's ModulesToSaveWrapper: the copy trains
    return copies["default"] if copies is not None else found


def layer_groups(model: nn.Module) -> list[list[str]] | None:
    """Return parameter names from embeddings to head: what comes before the first block, each block, the rest."""
    found = blocks(model)
    if not found:
        return None
    block_of = {id(p): i for i, block in enumerate(found, start=1) for p in block.parameters()}
    groups: list[list[str]] = [[] for _ in range(len(found) + 2)]
    after = False
    for name, parameter in model.named_parameters():
        index = block_of.get(id(parameter))
        after = after or index is not None
        groups[index if index is not None else (len(found) + 1 if after else 0)].append(name)
    return [group for group in groups if group]
