"""`export.formats=[hf]`: write a model=hf checkpoint as a directory transformers' `from_pretrained` loads.

By default the LoRA adapter is merged into the base weights, so the directory is a plain transformers model; with
`export.hf.merge_lora=false` it holds the adapter alone (PEFT's `adapter_config.json` names the base model's id and
revision), which `peft.AutoPeftModelFor...from_pretrained` loads over the base model. The tokenizer is saved beside
it, and a classifier's config names the classes. The core export workflow writes it in a staging folder and renames
it into place only once `write` has loaded it back and matched the checkpoint's model.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from lab.data import batches
from lab.errors import UserError

log = logging.getLogger(__name__)


def refusal(restored: Any, merge_lora: bool) -> str | None:
    """Return why this checkpoint cannot be exported as an hf directory, or None."""
    from lab.extensions.hf.models import HfModel

    settings = restored.config["model"]
    if not isinstance(restored.model, HfModel):
        return f"export.formats=[hf] takes a model=hf checkpoint; {restored.path} has model={settings.get('name')}"
    if not merge_lora and not (settings.get("lora") or {}).get("r"):
        return (
            f"export.hf.merge_lora=false writes the LoRA adapter alone, and {restored.path} has none "
            "(model.lora.r was null): drop export.hf.merge_lora"
        )
    return None


def write(restored: Any, val_loader: Any, folder: Path, merge_lora: bool, tolerance: float, new_tokens: int) -> dict:
    """Write the model (merged, or its adapter alone) and its tokenizer into `folder`; check that transformers loads
    it back into the checkpoint's logits (and greedy tokens, for a causal LM); return the manifest entry."""
    from lab.extensions.hf import hub

    settings: dict[str, Any] = restored.config["model"]
    network: Any = restored.model.network  # a transformers model, or PEFT's around it
    lora = bool((settings.get("lora") or {}).get("r"))
    if lora and not merge_lora:
        # the base the checkpoint was trained on, at the commit it was read at when it came from the hub's cache
        base = restored.model.base or settings
        network.peft_config["default"].base_model_name_or_path = base["name_or_path"]
        network.peft_config["default"].revision = base.get("revision")
    elif lora:
        network = network.merge_and_unload()
    names = restored.meta.get("class_names")
    if names and getattr(network.config, "num_labels", None) == len(names):
        network.config.id2label = dict(enumerate(names))
        network.config.label2id = {name: i for i, name in enumerate(names)}
    network.save_pretrained(folder)
    hub.run_tokenizer(restored).save_pretrained(folder)
    parity = _parity(restored, folder, next(iter(val_loader)), adapter=lora and not merge_lora, new_tokens=new_tokens)
    parity["tolerance"] = tolerance
    if not parity["max_abs_diff"] <= tolerance or not parity["same_greedy_tokens"]:
        raise UserError(
            f"hf export: the directory transformers loads gives max |logits - checkpoint's| = "
            f"{parity['max_abs_diff']:.3g} (export.tolerance={tolerance:g}), greedy tokens "
            f"{'the same' if parity['same_greedy_tokens'] else 'different'}; nothing written"
        )
    what = "the LoRA adapter" if lora and not merge_lora else "merged weights" if lora else "the weights"
    log.info("hf: %s, max |logits - checkpoint's| %.3g on %d samples", what, parity["max_abs_diff"], parity["samples"])
    return {"file": "hf", "files": sorted(p.name for p in folder.iterdir()), "parity": parity, "status": "ok"}


def _parity(restored: Any, folder: Path, batch: Any, adapter: bool, new_tokens: int) -> dict[str, Any]:
    """Load `folder` with plain transformers (PEFT for an adapter) and compare it with the checkpoint's model."""
    import transformers

    causal = restored.model.causal
    head = "AutoModelForCausalLM" if causal else "AutoModelForSequenceClassification"
    if adapter:
        import peft

        loaded = getattr(peft, head.replace("AutoModel", "AutoPeftModel")).from_pretrained(folder)
    else:
        loaded = getattr(transformers, head).from_pretrained(folder)
    loaded.eval()
    inputs, _ = batches.split(batch)
    named = dict(inputs) if isinstance(inputs, dict) else {"input_ids": inputs}
    with torch.no_grad():
        expected = restored.model(named)
        got = loaded(**named).logits
        same = True
        if causal:  # a few greedy tokens from the first row's prompt, by both
            prompt = named["input_ids"][:1, : max(1, named["input_ids"].shape[1] // 2)]
            config = {"max_new_tokens": new_tokens, "do_sample": False, "pad_token_id": loaded.config.pad_token_id}
            mine = restored.model.network.generate(input_ids=prompt, **config)
            same = torch.equal(mine, loaded.generate(input_ids=prompt, **config))
    diff = float((got.float() - expected.float()).abs().max()) if got.shape == expected.shape else float("inf")
    return {"max_abs_diff": diff, "samples": len(named["input_ids"]), "same_greedy_tokens": same}
