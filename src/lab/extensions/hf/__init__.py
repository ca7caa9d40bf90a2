"""The `hf` extension: Hugging Face transformers models, fine-tuned whole or with LoRA. See README.md here.

`model=hf` (``options``, ``models``) builds any transformers model for sequence classification or causal language
modelling from `model.name_or_path`, a local directory or a hub id found offline first (``hub``). `model.lora.r`
turns on a PEFT LoRA adapter, so only the adapter (and a classifier head) trains.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ("hf",)  # transformers, peft (lm-eval for the data side's evaluation)
