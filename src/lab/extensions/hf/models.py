"""Build a transformers model (model=hf) as a module the Trainer drives: dict inputs in, a logits tensor out.

The tasks call ``model(inputs)`` with the data's dict (``input_ids``, ``attention_mask``...) or, to continue a
prompt, a tensor of token ids, and take a tensor of logits: ``HfModel`` makes a transformers model fit that. With
``model.lora.r`` the network is wrapped in a PEFT LoRA adapter, which freezes every base weight.

A LoRA model's checkpoints hold only the weights that did not come from the base model's files (the adapter, a new
head, token embeddings grown for the tokenizer), with the base's id, revision and a fingerprint of its weights: a
later load builds the base again from its files and refuses one whose weights changed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab.errors import ConfigError, UserError
from lab.extensions.hf import hub

log = logging.getLogger(__name__)


class HfModel(nn.Module):
    """A transformers model called with one argument (a dict of tensors or the token ids) returning its logits."""

    def __init__(self, network: Any, causal: bool) -> None:
        super().__init__()
        self.network, self.causal = network, causal
        self.pad: int | None = network.config.pad_token_id  # to mask the padding of token ids given alone
        # with an adapter over pretrained weights: the state keys checkpoints hold, and the base they need
        self.kept: frozenset[str] | None = None
        self.base: dict[str, Any] | None = None

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
    fresh: set[str] = set()  # weights the base's files lack, which from_pretrained initialised (a new head)
    try:
        if cfg.pretrained and torch.get_default_device().type != "meta":
            loaded: Any = auto.from_pretrained(**located, dtype=dtype, output_loading_info=True, **settings)
            network, fresh = loaded[0], set(loaded[1]["missing_keys"])
        else:  # random weights, or none on the meta device (dist=fsdp: each rank reads its shards, sharded_load.py)
            config = AutoConfig.from_pretrained(**located, **settings)
            network = auto.from_config(config, dtype=dtype)
    except (OSError, ValueError, KeyError) as err:
        what = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(
            f"model=hf model.name_or_path={cfg.name_or_path}: transformers could not build it ({what})"
        ) from err
    own = {id(p) for name, p in network.named_parameters(remove_duplicate=False) if name in fresh}
    if _fit_tokenizer(network, meta):
        grown = (network.get_input_embeddings(), network.get_output_embeddings())
        own |= {id(p) for module in grown if module is not None for p in module.parameters()}
    if cfg.grad_checkpointing:
        network.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.uses_lora:
        network = _with_lora(network, cfg.lora, head)
    model = HfModel(network, causal=head == "causal_lm")
    if cfg.uses_lora and cfg.pretrained:
        _keep_adapter(model, own, cfg.name_or_path, base_revision(located, cfg.revision))
    return model


def _keep_adapter(model: HfModel, own: set[int], name_or_path: str, revision: str | None) -> None:
    """Have `model`'s checkpoints hold what trains and the tensors in `own` (not from the base's files), not the
    base, and record the base with a fingerprint of its weights (on the meta device, which holds no values, taken at
    the first consolidated save: `checkpoint_state`)."""
    parameters = model.named_parameters(remove_duplicate=False)
    model.kept = frozenset(name for name, p in parameters if p.requires_grad or id(p) in own)
    base = {key: value for key, value in model.state_dict().items() if key not in model.kept}
    digest = None if any(value.is_meta for value in base.values()) else fingerprint(base)
    model.base = {"name_or_path": name_or_path, "revision": revision, "fingerprint": digest}


def base_revision(located: Mapping[str, Any], requested: str | None) -> str | None:
    """Return the commit of a hub id read from the cache (its snapshot folder), else the revision asked for; None
    for a local directory."""
    name = located["pretrained_model_name_or_path"]
    if Path(name).is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json", revision=requested)
    return Path(cached).parent.name if isinstance(cached, str) else requested


def fingerprint(state: Mapping[str, torch.Tensor], samples: int = 4096) -> str:
    """Return a digest of each tensor's name, shape, dtype and `samples` evenly spaced values: enough to tell
    another model's weights apart without reading every value of a large one."""
    digest = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key].detach()
        flat = tensor.reshape(-1)
        picked = flat[:: max(1, flat.numel() // samples)][:samples].float().cpu().contiguous()
        digest.update(f"{key}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(picked.numpy().tobytes())
    return digest.hexdigest()[:16]


def checkpoint_state(model: HfModel, state: dict[str, Any]) -> dict[str, Any]:
    """Return the checkpoint entries of `model`'s whole state dict: every weight, or the adapter and its base."""
    if model.kept is None:
        return {"model": state}
    if model.base is not None and model.base["fingerprint"] is None:
        # built on the meta device (dist=fsdp read each rank's shards): the base's values are whole first here, in
        # the consolidated state rank 0 saves (the other ranks' is empty), and the frozen base has not changed
        base = [key for key in model.state_dict() if key not in model.kept]
        if base and all(key in state and not state[key].is_meta for key in base):
            model.base = {**model.base, "fingerprint": fingerprint({key: state[key] for key in base})}
    return {"model": {k: v for k, v in state.items() if k in model.kept}, "model_base": model.base}


def restore_state(model: HfModel, ckpt: dict[str, Any], key: str) -> dict[str, Any]:
    """Return the whole state dict for `model` (its base built from the files) from a checkpoint's entry `key`.

    A checkpoint of every weight is returned as it is. An adapter's is completed by the base weights `model` holds,
    once the base's fingerprint matches the checkpoint's; its own keys then load strictly."""
    saved, recorded = ckpt[key], ckpt.get("model_base")
    if recorded is None or model.kept is None:
        return saved  # a checkpoint of every weight, or a model not built for an adapter (the strict load says so)
    found = model.base or {}
    if found.get("fingerprint") is not None and found["fingerprint"] != recorded["fingerprint"]:
        raise UserError(
            f"the checkpoint's LoRA adapter was trained on base model {recorded['name_or_path']} (revision "
            f"{recorded['revision']}, weights {recorded['fingerprint']}) but {found['name_or_path']} now holds other "
            f"weights (revision {found['revision']}, weights {found['fingerprint']}): the adapter needs its own base "
            "model there, as training read it"
        )
    own = model.state_dict()
    return {**{k: v for k, v in own.items() if k not in model.kept}, **saved}


def _fit_tokenizer(network: Any, meta: Mapping[str, Any]) -> bool:
    """Give the model the data tokenizer's padding id and room for every id the tokenizer makes; return whether
    the token embeddings grew."""
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
        return True
    return False


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
