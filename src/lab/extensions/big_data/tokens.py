"""``data=tokens``: language modelling on a corpus of any size.

A byte-level BPE tokenizer is trained once, the corpus is written once as token files, and training reads windows
from those files memory-mapped.

Prepare with ``python scripts/prepare_data.py data=tokens data.source=<file or folder> data.path=<folder>``:

- The source is read as a stream of *pieces* of about 256 K characters, never as one string. A piece ends only where
  the tokenizer would split anyway (:func:`safe_cut`), so encoding piece by piece gives the same ids as encoding
  each file whole. Text with no such place for 8 pieces is cut where it stands, which may change the tokens at that
  cut. Each file is one document; files follow one another in sorted path order, with no separator.
- Part 1, ``tokenizer.json``, is a byte-level BPE trained on the stream. All 256 bytes are in the vocabulary, so any
  text encodes and decodes back. A resumed prepare reads it back instead of training again.
- Parts 2.., ``tokens-00000.bin`` ..., hold the ids of ``data.shard_mb`` MB of text each, as raw little-endian
  uint16 (uint32 above 65,536 ids). Where a shard starts depends on the text alone, so a resumed prepare skips the
  shards already written without encoding them.
- ``manifest.json`` (prepared.py) lists the shards, their token counts, the dtype, the vocabulary size and the
  tokenizer's JSON. Training copies the tokenizer into ``meta``, so a checkpoint can encode prompts without this
  folder.

Train, val and test are contiguous parts of the token stream, train first. The fractions are applied at training,
so changing them needs no new prepare. An item is ``(ids[:-1], ids[1:])`` of a window of block_size + 1 int64 ids.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import re
import shlex
import sysconfig
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm import tqdm

from lab.data import prepared
from lab.data.common import DataModule
from lab.data.text import UNDECODED, warn_undecoded
from lab.errors import ConfigError

log = logging.getLogger(__name__)

KIND = "tokens"
TOKENIZER = "tokenizer.json"
# data.source=null reads the top-level *.py of Python's standard library. Its manifest label names no path, so it is
# never fingerprinted (that would stat tens of thousands of files, and __pycache__ changes on import); it is never
# stale.
STDLIB = "<python standard library>"
PIECE_CHARS = 1 << 18
LONGEST_PIECE = 8  # text with no safe cut is cut anyway at this many times PIECE_CHARS
BATCH_PIECES = 16  # pieces per encode_batch call: keeps every core busy, a few MB of ids in Python lists
MB = 1_000_000
_CUT = re.compile(r"(?<=\S)[ \t\n](?=\S)")  # safe_cut's places


def token_dtype(vocab_size: int) -> np.dtype:
    """Return the smallest unsigned dtype that holds ids 0 .. vocab_size - 1."""
    return np.dtype("<u2" if vocab_size <= 1 << 16 else "<u4")  # little-endian on any machine: files travel


def source_label(source: str | None) -> str:
    """Name the source for the manifest by its absolute path, so relative paths from different directories match."""
    return STDLIB if source is None else str(Path(source).expanduser().resolve())


def source_files(source: str | None) -> list[Path]:
    """List the source's files in reading order; raise ConfigError when there are none."""
    if source is None:
        return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    path = Path(source).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigError(
            f"data.source={source} does not exist; give a text file, a folder of *.txt files, or data.source=null "
            "(Python's standard-library sources)"
        )
    found = sorted(p for p in path.rglob("*.txt") if p.is_file())
    if not found:
        raise ConfigError(f"data.source={source} is a folder without *.txt files; give a text file or such a folder")
    return found


def prepare_command(cfg: Any) -> str:
    """Return the command line that prepares cfg.path as cfg says, for messages."""
    words = ["data=tokens", f"data.source={cfg.source or 'null'}", f"data.path={cfg.path}"]
    fields = type(cfg).__dataclass_fields__
    words += [
        f"data.{key}={'null' if getattr(cfg, key) is None else getattr(cfg, key)}"
        for key in ("vocab_size", "tokenizer_mb", "shard_mb")
        if getattr(cfg, key) != fields[key].default  # only the settings the user changed
    ]
    return "python scripts/prepare_data.py " + " ".join(shlex.quote(word) for word in words)


def prepare_params(cfg: Any) -> dict[str, Any]:
    """Return the settings the prepared files depend on; all but shard_mb must match at training."""
    return {"vocab_size": cfg.vocab_size, "tokenizer_mb": cfg.tokenizer_mb, "shard_mb": cfg.shard_mb}


def safe_cut(text: str) -> int:
    """Return the last position where `text` can be cut without changing its tokens, or 0 if there is none.

    A safe cut is before a lone space, tab or newline between two non-space characters. The byte-level
    pre-tokenizer's regex never looks behind a match's start. A run of letters, digits or punctuation ends at
    whitespace, so the match before the cut ends there either way. The match from the cut on (a space and its word,
    or the lone tab or newline) is the same wherever the string starts.

    Whitespace runs are never cut: before a word, a run gives its last character to the word, but at the end of a
    string it stays whole. ``\\S`` is the complement of str.isspace, which covers every character the regex calls
    whitespace and a few more, so the cut is never unsafe."""
    for start in (max(0, len(text) - 4096), 0):  # the last cut is almost always in the tail, so look there first
        cuts = [match.start() for match in _CUT.finditer(text, start)]
        if cuts:
            return cuts[-1]
    return 0


def read_pieces(files: Iterable[Path], size: int = PIECE_CHARS, report: bool = False) -> Iterator[str]:
    """Yield the text of `files` in pieces of about `size` characters, cut at :func:`safe_cut` places.

    A piece never spans two files. As in data=text, \\r\\n becomes \\n and bytes that are not UTF-8 become
    U+FFFD. With `report`, a warning counts those bytes per file."""
    for file in files:
        undecoded = 0
        with open(file, encoding="utf-8", errors="surrogateescape") as f:
            buffer = ""
            while block := f.read(size):
                block, count = UNDECODED.subn("\ufffd", block)
                undecoded += count
                buffer += block
                cut = safe_cut(buffer)
                if cut == 0 and len(buffer) >= LONGEST_PIECE * size:
                    cut = len(buffer)  # no safe cut in this long a text: bound the memory instead
                if cut:
                    yield buffer[:cut]
                    buffer = buffer[cut:]
            if buffer:
                yield buffer
        if report:
            warn_undecoded(file, undecoded, "utf-8", "save the file as UTF-8")


def _capped(pieces: Iterable[str], limit: float | None) -> Iterator[str]:
    """Yield pieces until `limit` bytes of text have passed, including the piece that crosses it; None means all."""
    seen = 0
    for piece in pieces:
        yield piece
        seen += len(piece.encode("utf-8"))
        if limit is not None and seen >= limit:
            return


def train_tokenizer(pieces: Iterable[str], vocab_size: int) -> Any:
    """Train a byte-level BPE on `pieces`, deterministically; any text encodes and decodes back."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    # no prefix space: a piece must encode as it would inside its file, and decode must give the text back
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,  # a pair seen once is no pattern
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # the reading bar shows progress; the merges take a fraction of that time
    )
    tokenizer.train_from_iterator(pieces, trainer)
    return tokenizer


def _batched(items: Iterable[Any], n: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, n)):
        yield batch


def _numbered(pieces: Iterable[str], shard_bytes: float) -> Iterator[tuple[int, str, int]]:
    """Yield (shard index, piece, UTF-8 size), cutting shards by bytes of text so they don't depend on tokens."""
    index = size = 0
    for piece in pieces:
        if size >= shard_bytes:
            index, size = index + 1, 0
        nbytes = len(piece.encode("utf-8"))
        size += nbytes
        yield index, piece, nbytes


def write_shard(path: Path, pieces: Iterable[tuple[int, str, int]], tokenizer: Any, dtype: np.dtype, bar: Any) -> dict:
    """Encode `pieces` into `path` as raw `dtype` ids; return the token count for the part's record."""
    count = 0
    with open(path, "wb") as f:
        for batch in _batched(pieces, BATCH_PIECES):
            # the fast variant skips the token offsets we don't keep: the same ids, 1.25x faster
            texts = [piece for _, piece, _ in batch]
            for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False):
                ids = np.array(encoding.ids, dtype=dtype)
                ids.tofile(f)
                count += len(ids)
            bar.update(sum(nbytes for *_, nbytes in batch))
    return {"tokens": count}


def _save_tokenizer(path: Path, files: list[Path], cfg: Any) -> dict:
    total = sum(f.stat().st_size for f in files)
    limit = None if cfg.tokenizer_mb is None else cfg.tokenizer_mb * MB
    with tqdm(total=min(total, limit or total), unit="B", unit_scale=True, desc="training the tokenizer") as bar:

        def shown(pieces: Iterable[str]) -> Iterator[str]:
            for piece in pieces:
                bar.update(len(piece.encode("utf-8")))
                yield piece

        tokenizer = train_tokenizer(shown(_capped(read_pieces(files), limit)), cfg.vocab_size)
    tokenizer.save(str(path))
    return {"vocab_size": tokenizer.get_vocab_size()}


def prepare(cfg: Any) -> dict[str, Any]:
    """Prepare cfg.path from cfg.source as the module docstring describes, and return the manifest.

    Every refusal comes before the first write. Rerunning the same command finishes an interrupted prepare."""
    from tokenizers import Tokenizer

    files = source_files(cfg.source)
    total = sum(f.stat().st_size for f in files)
    if total == 0:
        raise ConfigError(f"data.source={cfg.source} holds no text (its files are empty); give a text corpus")
    label, command = source_label(cfg.source), prepare_command(cfg)
    preparer = prepared.Preparer(cfg.path, KIND, prepare_params(cfg), label, command)
    if preparer.up_to_date:
        log.info("data.path=%s is already prepared from %s with these settings: nothing to do", cfg.path, label)
        return prepared.read_manifest(cfg.path, KIND, command)
    if preparer.parts:
        log.info("resuming the prepare of %s: %d part(s) already written", cfg.path, len(preparer.parts))
    started = time.perf_counter()
    preparer.add(TOKENIZER, functools.partial(_save_tokenizer, files=files, cfg=cfg))
    tokenizer = Tokenizer.from_file(str(preparer.out / TOKENIZER))  # written by this run or an interrupted one
    vocab_size = tokenizer.get_vocab_size()
    dtype = token_dtype(vocab_size)
    names: list[str] = []
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"encoding into {dtype.name} token files") as bar:
        # pieces of at most a quarter shard, so a file holds little more than shard_mb of text
        piece = int(max(1024, min(PIECE_CHARS, cfg.shard_mb * MB / 4)))
        numbered = _numbered(read_pieces(files, piece, report=True), cfg.shard_mb * MB)
        for index, group in itertools.groupby(numbered, key=lambda item: item[0]):
            name = f"tokens-{index:05d}.bin"
            names.append(name)
            if preparer.done(name):  # an interrupted run wrote it: skip its text without encoding
                bar.update(sum(nbytes for *_, nbytes in group))
                continue
            preparer.add(name, functools.partial(write_shard, pieces=group, tokenizer=tokenizer, dtype=dtype, bar=bar))
    counts = [int(preparer.parts[name]["tokens"]) for name in names]
    info = {
        "vocab_size": vocab_size,
        "dtype": dtype.name,
        "tokens": sum(counts),
        "files": names,
        "tokens_per_file": counts,
        "source_files": len(files),
        "tokenizer": tokenizer.to_str(),
    }
    manifest = preparer.finish(info)
    seconds = time.perf_counter() - started
    log.info(
        "prepared %s: %s tokens of a %d-symbol BPE vocabulary in %d %s file(s), from %.1f MB of text in %d file(s), "
        "in %.1f s",
        *(cfg.path, f"{sum(counts):,}", vocab_size, len(names), dtype.name, total / MB, len(files), seconds),
    )
    return manifest


def read_manifest(cfg: Any) -> dict[str, Any]:
    """Read the manifest of cfg.path, raising ConfigError unless it matches cfg.

    It is refused when missing, partial or damaged, when prepared from another source or with other settings, or
    when stale because cfg.source changed since."""
    command = prepare_command(cfg)
    manifest = prepared.read_manifest(cfg.path, KIND, command)
    label = source_label(cfg.source)
    if manifest["source"] != label:
        raise ConfigError(
            f"data.path={cfg.path} was prepared from {manifest['source']}, but data.source={cfg.source or 'null'} "
            f"({label}); give the source it was prepared from, or prepare this one into another data.path: {command}"
        )
    for key, value in prepare_params(cfg).items():
        if key != "shard_mb" and manifest["params"].get(key) != value:  # shard_mb does not change the ids
            raise ConfigError(
                f"data.path={cfg.path} was prepared with data.{key}={manifest['params'].get(key)}, not {value}; set "
                f"data.{key}={manifest['params'].get(key)}, or prepare into another data.path: {command}"
            )
    if cfg.source is not None:  # same source: check it has not changed since
        manifest = prepared.read_manifest(cfg.path, KIND, command, source=label)
    return manifest


class TokenFileWindows(Dataset):
    """Non-overlapping windows of block_size + 1 ids over the stream positions [start, stop).

    Item i is (window[:-1], window[1:]), int64, read from the memory-mapped token files. A window may span two files.

    Each process opens the files on its first item. DataLoader workers get the paths, never a mapping, because
    pickling an np.memmap copies its whole contents."""

    def __init__(
        self, files: Sequence[str], counts: Sequence[int], dtype: str, start: int, stop: int, block_size: int
    ) -> None:
        self.files, self.counts = [str(f) for f in files], [int(c) for c in counts]
        self.dtype = np.dtype(dtype).newbyteorder("<")  # as token_dtype wrote them
        # the stream position of each file's first id, plus the end. A Python list, since bisect is 10x faster than
        # np.searchsorted on a few values and this runs once per item
        self.offsets = [0, *itertools.accumulate(self.counts)]
        self.start, self.stop, self.block_size = int(start), int(stop), int(block_size)
        self.count = max(0, (self.stop - self.start - 1) // self.block_size)
        self._maps: list[np.ndarray] | None = None  # np.memmap per file, once opened
        self._views: list[np.ndarray] = []  # plain arrays over the same memory: slicing skips memmap's Python layer

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": None, "_views": []}

    def _open(self) -> list[np.ndarray]:
        # an empty file cannot be mapped; shards always have ids, but a hand-made folder might not
        self._maps = [
            np.memmap(f, dtype=self.dtype, mode="r", shape=(n,)) if n else np.empty(0, self.dtype)
            for f, n in zip(self.files, self.counts, strict=True)
        ]
        self._views = [m.view(np.ndarray) for m in self._maps]
        return self._views

    def read(self, begin: int, end: int) -> np.ndarray:
        """Return a copy of the ids at stream positions [begin, end), as int64."""
        views = self._views if self._maps is not None else self._open()
        file = bisect.bisect_right(self.offsets, begin) - 1
        pieces = []
        while begin < end:
            first, last = self.offsets[file], min(end, self.offsets[file + 1])
            pieces.append(views[file][begin - first : last - first])
            begin, file = last, file + 1
        return pieces[0].astype(np.int64) if len(pieces) == 1 else np.concatenate(pieces).astype(np.int64)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.count:
            raise IndexError(f"window {index} of {self.count}")
        begin = self.start + index * self.block_size
        window = torch.from_numpy(self.read(begin, begin + self.block_size + 1))
        return window[:-1], window[1:]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Return a batch's items in one go.

        Windows inside one file are gathered with one index per file instead of one read each. Windows that span two
        files are read like ``__getitem__`` does."""
        if len(indices) and not (min(indices) >= 0 and max(indices) < self.count):
            raise IndexError(f"windows {min(indices)}..{max(indices)} of {self.count}")
        views = self._views if self._maps is not None else self._open()
        span, offsets = self.block_size + 1, np.asarray(self.offsets)
        begins = self.start + np.asarray(indices, dtype=np.int64) * self.block_size
        files = np.searchsorted(offsets, begins, side="right") - 1
        inside = begins + span <= offsets[files + 1]
        windows = np.empty((len(begins), span), dtype=np.int64)
        for file in np.unique(files[inside]):
            rows = np.flatnonzero(inside & (files == file))
            windows[rows] = views[file][(begins[rows] - offsets[file])[:, None] + np.arange(span)]
        for row in np.flatnonzero(~inside):
            windows[row] = self.read(int(begins[row]), int(begins[row]) + span)
        batch = torch.from_numpy(windows)
        # unbind makes every row's view in one call: twice as fast as slicing row by row
        return list(zip(batch[:, :-1].unbind(0), batch[:, 1:].unbind(0), strict=True))


def build(cfg: Any) -> DataModule:
    manifest = read_manifest(cfg)
    info, folder = manifest["info"], Path(cfg.path).expanduser()
    files, counts = [str(folder / name) for name in info["files"]], info["tokens_per_file"]
    total = int(info["tokens"])
    n_test, n_val = int(total * cfg.test_fraction), int(total * cfg.val_fraction)
    n_train = total - n_val - n_test
    bounds = [(0, n_train), (n_train, n_train + n_val), (n_train + n_val, total)]
    train, val, test = (TokenFileWindows(files, counts, info["dtype"], lo, hi, cfg.block_size) for lo, hi in bounds)
    if len(train) == 0 or len(val) == 0:
        raise ConfigError(
            f"the prepared corpus ({total} tokens) is too short for windows of data.block_size={cfg.block_size} in "
            "every split; give a longer source or a smaller block_size"
        )
    meta: dict[str, Any] = {
        "level": "bpe",
        "tokenizer": info["tokenizer"],
        "vocab_size": int(info["vocab_size"]),
        "input_shape": [cfg.block_size],
        "num_outputs": int(info["vocab_size"]),
        "block_size": cfg.block_size,
    }
    return DataModule(train=train, val=val, test=test if len(test) else None, meta=meta)
