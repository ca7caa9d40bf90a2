"""Text for language modelling: a corpus as token ids (characters or bytes), cut into windows of block_size.

Splits are contiguous parts of the corpus (train, then val, then test), so no validation window was trained on.
`encode`/`decode` read the vocabulary from meta, byte-level BPE too (level `bpe`: the tokenizer's JSON in meta), so
a checkpoint encodes prompts without the dataset's files.
"""

from __future__ import annotations

import functools
import logging
import re
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from lab.data.common import DataModule, InMemoryDataset
from lab.errors import ConfigError, UserError

log = logging.getLogger(__name__)

IGNORE_INDEX = -100  # target at padded positions: no loss, no weight, no metric
# With errors="surrogateescape", each byte the encoding cannot decode becomes one lone surrogate in this range
UNDECODED = re.compile("[\udc80-\udcff]")
ENCODING_FIX = "give the file's encoding with data.encoding=<name> (e.g. latin-1)"


def read_text(path: Path, encoding: str, fix: str = ENCODING_FIX, newline: str | None = None) -> str:
    """Read the text of `path` in `encoding` (`newline` as `open` takes it).
    Invalid bytes are read as U+FFFD, but not silently: one warning counts them and suggests `fix`. A file in
    another encoding would otherwise train on garbled characters."""
    try:
        with open(path, encoding=encoding, errors="surrogateescape", newline=newline) as f:
            text = f.read()
    except UnicodeDecodeError as err:  # only bytes >= 0x80 escape, so this is another encoding (UTF-16...)
        raise ConfigError(f"{path} is not {encoding} text ({err.reason} at byte {err.start}); {fix}") from None
    text, undecoded = UNDECODED.subn("\ufffd", text)
    warn_undecoded(path, undecoded, encoding, fix)
    return text


def warn_undecoded(source: Path, count: int, encoding: str, fix: str) -> None:
    if count:
        log.warning("%s: %d bytes are not valid %s and were read as U+FFFD; %s", source, count, encoding, fix)


class TokenWindows(InMemoryDataset):
    """Non-overlapping windows of block_size + 1 ids. Item i is (window[:-1], window[1:])."""

    def __init__(self, ids: torch.Tensor, block_size: int) -> None:
        self.ids, self.block_size = ids, block_size
        self.count = max(0, (len(ids) - 1) // block_size)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.block_size
        window = self.ids[start : start + self.block_size + 1]
        return window[:-1], window[1:]

    def fetch(self, index: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return windows `index` as one batch.
        With a `generator` (data.loader=device training), each window starts at a random offset inside its block.
        An epoch still covers the corpus once, but the windows differ from epoch to epoch."""
        starts = index * self.block_size
        if generator is not None:
            offsets = torch.randint(0, self.block_size, starts.shape, generator=generator, device=starts.device)
            starts = (starts + offsets).clamp_max(len(self.ids) - self.block_size - 1)
        windows = self.ids[starts.unsqueeze(1) + torch.arange(self.block_size + 1, device=starts.device)]
        return windows[:, :-1], windows[:, 1:]

    def to(self, device: torch.device) -> TokenWindows:
        return TokenWindows(self.ids.to(device), self.block_size)


def read_corpus(cfg: Any) -> str:
    """Return data.path's text, or Python's standard-library sources in sorted path order, up to data.max_chars."""
    if cfg.path is None:
        parts, size = [], 0
        for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            parts.append(text)
            size += len(text)
            if size >= cfg.max_chars:
                break
        return "".join(parts)[: cfg.max_chars]
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"data.path={cfg.path} does not exist; give a text file (or data.path=null for the built-in corpus)"
        )
    text = read_text(path, cfg.encoding)[: cfg.max_chars]
    if not text:
        raise ConfigError(f"data.path={cfg.path} is empty")
    return text


@functools.lru_cache(maxsize=4)
def tokenizer_of(json: str) -> Any:
    """Build the `tokenizers` tokenizer a meta's `tokenizer` JSON describes, once per JSON."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json)


def encode(text: str, meta: Mapping[str, Any]) -> list[int]:
    """Return the token ids of `text`. Raises UserError naming the characters the vocabulary lacks.
    Level bpe uses the byte-level BPE of meta's `tokenizer` JSON, which spells any text."""
    if meta["level"] == "bpe":
        return tokenizer_of(meta["tokenizer"]).encode(text, add_special_tokens=False).ids
    if meta["level"] == "byte":
        return list(text.encode("utf-8"))
    index = {ch: i for i, ch in enumerate(meta["vocab"])}
    unknown = sorted({ch for ch in text if ch not in index})
    if unknown:
        raise UserError(
            f"the text has characters the model never saw: {''.join(unknown)!r}; use only characters of its "
            f"{len(index)}-symbol vocabulary (data_meta.vocab)"
        )
    return [index[ch] for ch in text]


def decode(ids: Sequence[int], meta: Mapping[str, Any]) -> str:
    if meta["level"] == "bpe":  # ids that end mid-character decode as U+FFFD
        return tokenizer_of(meta["tokenizer"]).decode(list(ids))
    if meta["level"] == "byte":
        return bytes(ids).decode("utf-8", errors="replace")
    return "".join(meta["vocab"][i] for i in ids)


class TextCodec(Protocol):
    """How task=language_model spells prompts and samples as token ids; a data option gives its own through
    `DataConfig.text_codec`."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def spells(self, text: str) -> bool:
        """Whether every character of `text` has an id (eval samples only prompts the vocabulary can spell)."""
        ...


class MetaCodec:
    """Text as the token ids of meta's characters, bytes or BPE (`encode`/`decode`): the core's text data."""

    def __init__(self, meta: Mapping[str, Any]) -> None:
        self.meta = meta

    def encode(self, text: str) -> list[int]:
        return encode(text, self.meta)

    def decode(self, ids: Sequence[int]) -> str:
        return decode(ids, self.meta)

    def spells(self, text: str) -> bool:
        return self.meta["level"] in ("byte", "bpe") or all(ch in self.meta["vocab"] for ch in text)


def meta_codec(meta: Mapping[str, Any]) -> TextCodec | None:
    """Return the codec of the core's text data, or None for a meta without a vocabulary level."""
    return MetaCodec(meta) if "level" in meta else None


def build_text(cfg: Any) -> DataModule:
    text = read_corpus(cfg)
    vocab = None if cfg.level == "byte" else sorted(set(text))
    meta: dict[str, Any] = {"level": cfg.level, "vocab": vocab, "vocab_size": 256 if vocab is None else len(vocab)}
    ids = torch.tensor(encode(text, meta), dtype=torch.long)
    n_test, n_val = int(len(ids) * cfg.test_fraction), int(len(ids) * cfg.val_fraction)
    n_train = len(ids) - n_val - n_test
    parts = [ids[:n_train], ids[n_train : n_train + n_val], ids[n_train + n_val :]]
    train, val, test = (TokenWindows(part, cfg.block_size) for part in parts)
    if len(train) == 0 or len(val) == 0:
        raise ConfigError(
            f"the corpus ({len(ids)} tokens) is too short for windows of data.block_size={cfg.block_size} in every "
            "split; give a longer text or a smaller block_size"
        )
    meta.update(input_shape=[cfg.block_size], num_outputs=meta["vocab_size"], block_size=cfg.block_size)
    return DataModule(train=train, val=val, test=test if len(test) else None, meta=meta)
