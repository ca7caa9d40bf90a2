"""The `hf` extension: Hugging Face models, tokenizers and datasets.

- `data=hf` (data.py): tables and text through Hugging Face `datasets`, read memory-mapped or streamed.
"""

EXTRAS: tuple[str, ...] = ("hf",)
