"""A tiny word-level tokenizer written to disk as `save_pretrained` writes it, so the data tests download nothing.

(The model half's tests/tiny.py builds the same kind; the two merge.)"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ["good", "great", "bad", "awful", "the", "a", "movie", "film", "was", "is", "what", "why", "yes", "no"]
# renders each turn as "<role> content" and, asked for a generation prompt, ends with "assistant"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant {% endif %}"
)


def tokenizer(pad: bool = True, chat: bool = False):
    """A tokenizer over WORDS and the chat roles, with unknown and end-of-sequence tokens (and padding)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[EOS]"]
    vocab = {token: i for i, token in enumerate([*specials, *WORDS, "user", "assistant", "system"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    made = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", eos_token="[EOS]", **({"pad_token": "[PAD]"} if pad else {})
    )
    if chat:
        made.chat_template = CHAT_TEMPLATE
    return made


def tokenizer_dir(path: Path, pad: bool = True, chat: bool = False) -> Path:
    tokenizer(pad, chat).save_pretrained(path)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def hub_cache(cache: Path, name: str, rows: list[dict]) -> None:
    """Lay out `rows` in `cache` as load_dataset leaves a hub dataset it downloaded (datasets' packaged Cache
    module reads that layout offline): a local json load, moved under the dataset's name."""
    import datasets
    from datasets.naming import camelcase_to_snakecase

    files = write_jsonl(cache.parent / f"{camelcase_to_snakecase(name.split('/')[-1])}.jsonl", rows)
    datasets.load_dataset("json", data_files=str(files), cache_dir=str(cache))
    (built,) = [p for p in (cache / "json").glob("*/*/*") if p.is_dir()]
    *owner, short = name.split("/")
    target = cache / "___".join([*owner, camelcase_to_snakecase(short)]) / "default" / built.parent.name / built.name
    target.parent.mkdir(parents=True)
    built.rename(target)
    for arrow in target.glob("json-*.arrow"):
        arrow.rename(target / arrow.name.replace("json-", f"{camelcase_to_snakecase(short)}-"))
