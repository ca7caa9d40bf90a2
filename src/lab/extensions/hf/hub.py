"""Load a tokenizer by hub id or local folder (the model half of this extension replaces this at the merge)."""

from typing import Any


def load_tokenizer(name_or_path: str, revision: str | None = None) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path, revision=revision)
