"""A tiny word-level tokenizer written to disk as `save_pretrained` writes it, so the data tests download nothing.

(The model half's tests/tiny.py builds the same kind; the two merge.)"""

from __future__ import annotations

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
