"""Tiny transformers models and a tokenizer, written to disk as `save_pretrained` writes them, so no test downloads.

A BERT-like encoder (sequence classification) and a Llama-like decoder (causal LM), each in a directory with its
tokenizer, as a hub snapshot holds them."""

from __future__ import annotations

import random
from pathlib import Path

POSITIVE, NEGATIVE = ("good", "great", "fine"), ("bad", "awful", "poor")
WORDS = [*POSITIVE, *NEGATIVE, "the", "a", "movie", "film", "plot", "was", "is", "very", "quite"]
SPECIALS = ["[PAD]", "[UNK]", "[EOS]"]


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


def tokenizer():
    """A word-level tokenizer over WORDS, with padding, unknown and end-of-sequence tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*SPECIALS, *WORDS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")


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
