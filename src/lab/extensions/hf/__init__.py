"""The `hf` extension: Hugging Face models, LoRA and datasets. See README.md here.

`model=hf` (``options``, ``models``) builds any transformers model for sequence classification or causal language
modelling from `model.name_or_path`, a local directory or a hub id found offline first (``hub``). `model.lora.r`
turns on a PEFT LoRA adapter, so only the adapter (and a classifier head) trains. `data=hf` (``options``, ``data``
for tables, ``text`` for tokenized text, ``streaming`` for `data.streaming=true`) reads through `datasets`.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ("hf",)  # transformers, peft, datasets, pyarrow, lm-eval
