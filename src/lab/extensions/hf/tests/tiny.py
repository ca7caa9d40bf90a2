"""Tiny transformers models and a tokenizer, written to disk as `save_pretrained` writes them, so no test downloads;
local data files and a hub dataset cache laid out as `datasets` leaves them.

A BERT-like encoder (sequence classification) and a Llama-like decoder (causal LM), each in a directory with its
tokenizer, as a hub snapshot holds them; the tokenizer alone (with or without padding, with a chat template)."""

from __future__ import annotations

import json
import random
from pathlib import Path

POSITIVE, NEGATIVE = ("good", "great", "fine"), ("bad", "awful", "poor")
FILLERS = ("the", "a", "movie", "film", "plot", "was", "is", "very", "quite")  # the sentences' other words
WORDS = [*POSITIVE, *NEGATIVE, *FILLERS, "what", "why", "yes", "no"]  # and the questions' and answers'
SPECIALS = ["[PAD]", "[UNK]", "[EOS]"]
ROLES = ["user", "assistant", "system"]  # the chat template's
VOCAB = [*SPECIALS, *WORDS, *ROLES]
# renders each turn as "<role> content" and, asked for a generation prompt, ends with "assistant"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant {% endif %}"
)


def sentences(count: int, seed: int = 0) -> list[tuple[str, int]]:
    """Return `count` (sentence, label) pairs: label 1 when the sentence's opinion word is positive."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.randrange(2)
        opinion = rng.choice(POSITIVE if label else NEGATIVE)
        words = [rng.choice(("the", "a")), rng.choice(("movie", "film", "plot")), rng.choice(("was", "is"))]
        rows.append((" ".join([*words, rng.choice(("very", "quite")), opinion]), label))
    return rows


def tokenizer(pad: bool = True, chat: bool = False):
    """A word-level tokenizer over VOCAB, with unknown and end-of-sequence tokens (and padding, a chat template)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({token: i for i, token in enumerate(VOCAB)}, unk_token="[UNK]"))
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


def bert_dir(path: Path) -> Path:
    """Write a 2-layer BERT encoder (no classifier: the run adds one for its classes) and its tokenizer to `path`."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    tok = tokenizer()
    config = BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    BertModel(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def llama_dir(path: Path) -> Path:
    """Write a 2-layer Llama-like decoder with its LM head and its tokenizer to `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id, bos_token_id=None,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
