"""data.streaming=true: the training rows read as training goes (a `datasets` IterableDataset), never all stored.

An epoch is data.examples_per_epoch items (tokenized rows, or packed blocks) of the stream, shuffled with a buffer
by `IterableDataset.shuffle(seed)` and ``set_epoch(epoch)``. The stream is cut into ``world_size *
data.stream_shards`` parts by `split_dataset_by_node`; rank r reads parts ``r * shards ...``, and its batch b comes
from part ``b % shards``, the items after the ``b // shards`` batches that part gave before. So every batch is a
function of (seed, epoch, rank, b) alone, whichever loader worker reads it: a worker holds a reader per part and
moves it forward (or opens it again) to the batch asked for. That is why a resume is exact: the core restarts the
epoch at the checkpoint's batch (``lab.training.state.epoch_position``), the sampler hands out that batch's number,
and the worker skips to it in its part. Skipping reads the skipped items again (the price of a stream); with
data.stream_shards = data.num_workers each worker reads one part only. A part that ends before the epoch does
starts again.

Validation and test are the first data.eval_examples items of their splits (of train, skipped by training, when
the source has no validation split), read once into memory when the run starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import datasets
from datasets.distributed import split_dataset_by_node
from torch.utils.data import Sampler

from lab.data.common import DataModule, OrderedDataset
from lab.errors import ConfigError
from lab.extensions.hf import data, text

READ_ROWS = 64  # rows a stream reader fetches at a time


def source(cfg: Any) -> dict[str, datasets.IterableDataset]:
    """Return the splits of the source as IterableDatasets: {train, val?, test?}."""
    if cfg.path is not None:
        tables = data.load_tables(cfg)  # a folder: its memory-mapped tables, read as a stream
        return {split: table.to_iterable_dataset() for split, table in tables.items()}
    return data.pick_splits(cfg, data.load_source(cfg))


def columns_of(stream: datasets.IterableDataset) -> list[str] | None:
    """Return a stream's columns: its features' when known, else those of its first row."""
    if stream.column_names is not None:
        return list(stream.column_names)
    first = next(iter(stream.take(1)), None)
    return None if first is None else list(first)


def encoded(cfg: Any, tokenizer: Any, what: str, stream: datasets.IterableDataset, values: Any) -> Any:
    """Tokenize a stream as it is read (text.encoder's rows, batched as the map-style path)."""
    names = columns_of(stream)
    return stream.map(
        text.encoder(cfg, tokenizer, what, values), batched=True, batch_size=text.MAP_BATCH, remove_columns=names
    )


def rows(stream: Any) -> Iterator[dict[str, Any]]:
    """Iterate a stream row by row without datasets' own split of a stream among loader workers (``iter`` keeps
    every row; which worker reads what is decided here)."""
    for batch in stream.iter(batch_size=READ_ROWS):
        keys = list(batch)
        yield from (dict(zip(keys, values)) for values in zip(*batch.values()))


def collect(stream: Any) -> datasets.Dataset:
    """Read a (short) tokenized stream into memory."""
    return datasets.Dataset.from_list(list(rows(stream)))


class StreamOrder(Sampler[int]):
    """Rank `rank`'s training order of a stream: the batch's number and the epoch, coded in each index.

    Index ``(epoch * batches + b) * batch_size + slot``; StreamRows reads it back."""

    def __init__(self, batches: int, batch_size: int) -> None:
        self.batches, self.batch_size, self.epoch = batches, batch_size, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.batches * self.batch_size

    def __iter__(self) -> Iterator[int]:
        first = self.epoch * len(self)
        return iter(range(first, first + len(self)))


class StreamRows(OrderedDataset):
    """The training split of a stream, read batch by batch in the order module docstring describes."""

    def __init__(self, cfg: Any, tokenizer: Any, what: str, values: Any, skip: int, pad_id: int) -> None:
        self.cfg, self.tokenizer, self.what, self.values = cfg, tokenizer, what, values
        self.skip, self.pad_id = skip, pad_id  # skip: train's first rows, when they are the validation split
        self.rank, self.world_size, self.seed = 0, 1, 0
        self.readers: dict[int, tuple[int, int, Iterator[dict[str, Any]]]] = {}  # part -> (epoch, position, rows)
        self.target = "label" if what == "classification" else "labels"

    def __len__(self) -> int:
        return int(self.cfg.examples_per_epoch)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "readers": {}}  # a spawned worker opens its own readers

    def train_sampler(self, rank: int, world_size: int, seed: int) -> StreamOrder:
        self.rank, self.world_size, self.seed = rank, world_size, seed
        return StreamOrder(len(self) // world_size // self.cfg.batch_size, self.cfg.batch_size)

    def __getitem__(self, index: int) -> Any:
        raise TypeError("a stream is read a batch at a time (__getitems__), in the order of its train_sampler")

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        size = self.cfg.batch_size
        epoch, batch = divmod(indices[0] // size, len(self) // self.world_size // size)
        shards = self.cfg.stream_shards
        part, position = batch % shards, (batch // shards) * size
        found = self._read(epoch, part, position, len(indices))
        return text.pad_batch({key: [row[key] for row in found] for key in found[0]}, self.target, self.pad_id)

    def _stream(self, epoch: int, part: int) -> Iterator[dict[str, Any]]:
        cfg = self.cfg
        train = source(cfg)["train"].skip(self.skip)
        train = train.shuffle(seed=self.seed, buffer_size=cfg.shuffle_buffer)
        mine = split_dataset_by_node(
            train, rank=self.rank * cfg.stream_shards + part, world_size=self.world_size * cfg.stream_shards
        )
        tokens = encoded(cfg, self.tokenizer, self.what, mine, self.values)
        tokens.set_epoch(epoch)  # on the last dataset made: the shuffle's seed is the seed + this epoch
        return rows(tokens)

    def _read(self, epoch: int, part: int, position: int, count: int) -> list[dict[str, Any]]:
        """Return `count` items of `part` from `position` on, moving this process's reader of that part there."""
        at_epoch, at, reader = self.readers.get(part, (-1, 0, iter(())))
        fresh = at_epoch != epoch or at > position
        if fresh:
            at, reader = 0, self._stream(epoch, part)
        found: list[dict[str, Any]] = []
        while len(found) < count:
            row = next(reader, None)
            if row is None:  # the part ended before the epoch: it starts again, `at` counting on
                if fresh:
                    raise ConfigError(
                        f"data.streaming: rank {self.rank}'s stream part {part} of {data.where(self.cfg)} gives no "
                        "item (too few rows, or too short for data.block_size); lower data.stream_shards or "
                        "data.block_size"
                    )
                reader, fresh = self._stream(epoch, part), True
                continue
            fresh = False
            if at >= position:
                found.append(row)
            at += 1
        self.readers[part] = (epoch, at, reader)
        return found


def build(cfg: Any) -> DataModule:
    """Build a streamed training split and in-memory validation (and test) splits of its first rows."""
    what = text.kind(cfg)
    tokenizer = text.load_tokenizer(cfg)
    if cfg.examples_per_epoch is None:
        raise ConfigError(
            "data.streaming=true needs data.examples_per_epoch=<items per epoch>: a stream's length is not known "
            "before it is read"
        )
    splits = source(cfg)
    for split, stream in splits.items():
        text.check_columns(cfg, split, columns_of(stream), text.needed_columns(cfg, what))
    values, names = None, None
    if what == "classification":
        feature = (splits["train"].features or {}).get(cfg.label_column)
        if not isinstance(feature, datasets.ClassLabel):
            raise ConfigError(
                f"data.streaming=true with task=classification needs data.label_column={cfg.label_column!r} to be "
                "a ClassLabel (its classes known before the stream is read); or stream with data.streaming=false"
            )
        values, names = list(range(feature.num_classes)), [str(n) for n in feature.names]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    held: dict[str, Any] = {}
    for split in ("val", "test"):
        stream = splits.get(split, splits["train"] if split == "val" else None)
        if stream is not None:
            tokens = collect(encoded(cfg, tokenizer, what, stream.take(cfg.eval_examples), values))
            held[split] = text.TokenRows(tokens, pad)
    skip = cfg.eval_examples if "val" not in splits else 0  # validation came from train's start
    train = StreamRows(cfg, tokenizer, what, values, skip, pad)
    return DataModule(train, held["val"], held.get("test"), text.meta_of(cfg, tokenizer, what, names))
