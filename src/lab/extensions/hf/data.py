"""data=hf: a table larger than memory, read from memory-mapped Arrow files through Hugging Face `datasets`.

The rows come from data.path, data.dataset (a hub dataset) or data.data_files (local csv/json/parquet files read
by datasets' own loaders): :func:`load_tables`. data.path is a folder written by ``Dataset.save_to_disk`` or
``DatasetDict.save_to_disk``, or one that ``scripts/prepare_data.py data=hf data.source=big.csv data.path=<folder>``
made from a CSV. :func:`prepare` streams the CSV into Arrow parts of data.rows_per_part rows each, plus
prepared.py's manifest.

Nothing is loaded whole. The split, the statistics and the checks read the table in batches of rows, and training
gathers each batch with one call. So memory follows the batch size and the row count, not the table's size. The
mapped pages are the OS's file cache, which it drops under memory pressure.

The rows become what data=csv makes of a table (lab.data.tabular): float32 inputs standardised with the train
split's mean and std, and a class index or a standardised value. The ``meta`` keys are the same too, so eval,
export and infer treat a data=hf checkpoint like a data=csv one.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import torch
from torch.utils.data import Sampler

from lab.data import prepared
from lab.data.common import DataModule, OrderedDataset, split_indices, train_val_test
from lab.data.tabular import _natural
from lab.errors import ConfigError, UserError

log = logging.getLogger(__name__)

KIND = "hf"
PART = "data-{:05d}.arrow"
STATS_ROWS = 65_536  # rows per batch when computing statistics: a few MB whatever the table's size
# Bytes of CSV parsed at a time. pyarrow's streaming reader reads up to 32 blocks ahead, so 1 MB blocks cap that
# at ~32 MB of text.
CSV_BLOCK = 1 << 20
# Rows per record batch written. Small parsed batches are joined so a training batch's rows fall in few of them,
# since MappedColumns gathers per record batch.
WRITE_ROWS = 131_072
VAL_SPLITS = ("validation", "val", "valid")
SAVED_MARKERS = ("dataset_dict.json", "state.json")  # written by save_to_disk for a DatasetDict / a Dataset


def read_manifest(cfg: Any) -> dict[str, Any]:
    """Read the manifest of the prepared data.path; a missing, partial, stale or damaged one is refused."""
    return prepared.read_manifest(cfg.path, KIND, _command(cfg), source=cfg.source)


def _command(cfg: Any) -> str:
    return f"python scripts/prepare_data.py data=hf data.source={cfg.source or '<file.csv>'} data.path={cfg.path}"


# --------------------------------------------------------------------------------------------------- reading
def load_tables(cfg: Any) -> dict[str, datasets.Dataset]:
    """Map the tables of data.path, data.dataset or data.data_files by split name, without reading them.

    There is always a train table. val and test are there when the source has them (or data.split_map names
    them); otherwise build carves them out of train."""
    if cfg.path is None:
        return pick_splits(cfg, load_source(cfg))
    folder = Path(cfg.path).expanduser()
    if not folder.exists() or (folder / prepared.MANIFEST).exists() or (folder / prepared.PROGRESS).exists():
        # prepared data, or nothing: read_manifest refuses a bad folder
        manifest = read_manifest(cfg)
        parts = [datasets.Dataset.from_file(str(folder / part["name"])) for part in manifest["parts"]]
        return {"train": parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)}
    if not any((folder / marker).is_file() for marker in SAVED_MARKERS):
        raise ConfigError(
            f"data.path={cfg.path} is neither a folder Dataset.save_to_disk wrote ({' or '.join(SAVED_MARKERS)}) nor "
            f"prepared data ({prepared.MANIFEST}); save the dataset there, or convert a CSV with: {_command(cfg)}"
        )
    loaded = datasets.load_from_disk(str(folder))
    if isinstance(loaded, datasets.Dataset):
        return {"train": loaded}
    return pick_splits(cfg, loaded)


def pick_splits(cfg: Any, loaded: Any) -> dict[str, Any]:
    """Return {train, val?, test?} of a DatasetDict (or IterableDatasetDict): data.split_map's, else by name."""
    if cfg.split_map:
        unknown = sorted(set(cfg.split_map) - {"train", "val", "test"})
        if unknown:
            raise ConfigError(f"data.split_map names {unknown}; its keys are train, val and test")
        return {ours: _split(cfg, loaded, theirs) for ours, theirs in cfg.split_map.items()} | (
            {} if "train" in cfg.split_map else {"train": _split(cfg, loaded, "train")}
        )
    if "train" not in loaded:
        raise ConfigError(
            f"{where(cfg)} has the splits {', '.join(loaded)} but no 'train'; data=hf trains on the split "
            "named train (and validates on validation|val, tests on test when there)"
        )
    tables = {"train": loaded["train"]}
    val = next((name for name in VAL_SPLITS if name in loaded), None)
    if val is not None:
        tables["val"] = loaded[val]
    if "test" in loaded:
        tables["test"] = loaded["test"]
    return tables


def _split(cfg: Any, loaded: Any, name: str) -> Any:
    """Return the split `name` of `loaded`, or a slice like ``train[:90%]`` of a map-style one."""
    base = name.split("[", 1)[0]
    if base not in loaded:
        raise ConfigError(f"data.split_map: {where(cfg)} has no split {base!r}; its splits: {', '.join(loaded)}")
    if base == name:
        return loaded[name]
    if not isinstance(loaded[base], datasets.Dataset):
        raise ConfigError(
            f"data.split_map: a slice ({name}) needs a map-style split; data.streaming=true reads whole ones"
        )
    try:
        (absolute,) = datasets.ReadInstruction.from_spec(name).to_absolute({base: len(loaded[base])})
    except ValueError as err:
        raise ConfigError(f"data.split_map: {name!r} is not a split slice: {err}") from None
    return loaded[base].select(range(absolute.from_, absolute.to))


def where(cfg: Any) -> str:
    """Name the source in messages: data.path=..., data.dataset=... or data.data_files=..."""
    key = next(k for k in ("path", "dataset", "data_files") if getattr(cfg, k) is not None)
    return f"data.{key}={getattr(cfg, key)}"


def local_format(cfg: Any) -> str:
    """Return datasets' loader for data.data_files: csv, json or parquet, from the files' suffix."""
    files = cfg.data_files
    names = [files] if isinstance(files, str) else list(files.values()) if hasattr(files, "values") else list(files)
    flat = [str(n) for entry in names for n in ([entry] if isinstance(entry, str) else entry)]
    suffixes = {Path(n).suffix.lower().lstrip(".") for n in flat}
    formats = {{"jsonl": "json", "tsv": "csv"}.get(s, s) for s in suffixes}
    if len(formats) != 1 or not formats <= {"csv", "json", "parquet"}:
        raise ConfigError(
            f"data.data_files={files}: give files of one kind, .csv, .json/.jsonl or .parquet (found "
            f"{', '.join(sorted(suffixes)) or 'no suffix'})"
        )
    return formats.pop()


def load_source(cfg: Any) -> Any:
    """Load data.dataset (a hub dataset, offline from the cache first) or data.data_files with datasets' loaders.

    Streaming gives an IterableDatasetDict read as training goes. An uncached hub dataset on a machine without the
    hub is one ConfigError line naming the cache and the command that fills it."""
    streaming = bool(cfg.streaming)
    if cfg.data_files is not None:
        files = cfg.data_files
        files = dict(files) if hasattr(files, "items") else files if isinstance(files, str) else list(files)
        try:
            return datasets.load_dataset(
                local_format(cfg), data_files=files, cache_dir=cfg.cache_dir, streaming=streaming
            )
        except FileNotFoundError as err:
            raise ConfigError(f"data.data_files={cfg.data_files}: {err}; give existing files") from None
    try:
        return datasets.load_dataset(
            cfg.dataset, cfg.subset, revision=cfg.revision, cache_dir=cfg.cache_dir, streaming=streaming
        )
    except (ConnectionError, FileNotFoundError, OSError, ValueError, datasets.exceptions.DatasetNotFoundError) as err:
        if isinstance(err, ValueError) and "config" in str(err).lower():  # a wrong subset: datasets names the ones
            raise ConfigError(f"data.subset={cfg.subset}: {str(err).splitlines()[0]}") from None
        subset = f", {cfg.subset!r}" if cfg.subset else ""
        fill = f'python -c "import datasets; datasets.load_dataset({cfg.dataset!r}{subset})"'
        cache = cfg.cache_dir or datasets.config.HF_DATASETS_CACHE
        raise ConfigError(
            f"data.dataset={cfg.dataset}: not in the datasets cache ({cache}) and not loadable here "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else 'no detail'}); run `{fill}` on a "
            "machine with a network with the same HF_HOME, or save it with save_to_disk and give data.path"
        ) from None


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def _listing(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name} ({field.type})" for field in schema)


def columns(cfg: Any, tables: dict[str, datasets.Dataset]) -> list[str]:
    """Return the input columns: data.inputs checked against every split, or every numeric column but the target.

    A ConfigError names the column at fault and lists the columns there are."""
    schema = tables["train"].data.schema
    where = f"data.path={cfg.path}"
    if cfg.target is None:
        raise ConfigError(
            f"data=hf needs data.target=<the column to predict>; the columns of {where}: {_listing(schema)}"
        )
    for split, table in tables.items():
        missing = [c for c in [cfg.target, *(cfg.inputs or [])] if c not in table.column_names]
        if missing:
            what = f"data.target={cfg.target!r} is not a column" if cfg.target in missing else f"data.inputs {missing}"
            what += "" if cfg.target in missing else " are not columns"
            of = f"the {split} split of {where}" if len(tables) > 1 else where
            raise ConfigError(f"{what} of {of}; its columns: {_listing(table.data.schema)}")
    if cfg.target_type == "value" and not _numeric(schema.field(cfg.target).type):
        raise ConfigError(
            f"data.target={cfg.target!r} of {where} is {schema.field(cfg.target).type}, not a number: "
            "task=regression predicts a numeric target; use task=classification for labels"
        )
    if cfg.inputs is None:
        # a ClassLabel column is a category, not a quantity, so it is used only when data.inputs lists it
        features = tables["train"].features
        categories = {name for name, kind in features.items() if isinstance(kind, datasets.ClassLabel)}
        inputs = [f.name for f in schema if f.name != cfg.target and _numeric(f.type) and f.name not in categories]
        if not inputs:
            raise ConfigError(
                f"{where} has no numeric column but the target {cfg.target!r} to use as inputs; its columns: "
                f"{_listing(schema)}"
            )
        return inputs
    inputs = list(cfg.inputs)
    if cfg.target in inputs:
        raise ConfigError(f"data.inputs lists the target column {cfg.target!r}; a model must not see its target")
    for name in inputs:
        if not _numeric(schema.field(name).type):
            numeric = [f.name for f in schema if _numeric(f.type)]
            raise ConfigError(
                f"data.inputs: column {name!r} of {where} is {schema.field(name).type}, not numeric; its numeric "
                f"columns: {', '.join(numeric) or 'none'}"
            )
    return inputs


def classes(cfg: Any, tables: dict[str, datasets.Dataset]) -> tuple[pa.Array, list[str]]:
    """Return the target's classes as (an Arrow array of values in label order, their names).

    A ClassLabel column gives its own names. Otherwise the distinct values of every split are sorted like
    data=csv's labels, numbers numerically."""
    feature = tables["train"].features[cfg.target]
    kind = tables["train"].data.schema.field(cfg.target).type
    seen: set[Any] = set()
    for split, table in tables.items():
        column = table.data.column(cfg.target)  # memory-mapped; unique() reads it chunk by chunk
        if column.null_count:
            raise ConfigError(
                f"data.target={cfg.target!r} has {column.null_count} empty value(s) in the {split} split of "
                f"data.path={cfg.path}; fill or drop those rows"
            )
        seen.update(pc.unique(column).to_pylist())
    if isinstance(feature, datasets.ClassLabel):
        unnamed = sorted(v for v in seen if not 0 <= v < feature.num_classes)
        if unnamed:  # ClassLabel uses -1 for "no label"
            raise ConfigError(
                f"data.target={cfg.target!r} in data.path={cfg.path} holds {unnamed[0]}, not a label of its "
                f"{feature.num_classes} classes; drop those rows"
            )
        return pa.array(range(feature.num_classes), type=kind), [str(n) for n in feature.names]
    if pa.types.is_floating(kind):
        fractional = next((v for v in seen if not float(v).is_integer()), None)
        if fractional is not None:
            raise ConfigError(
                f"data.target={cfg.target!r} in data.path={cfg.path} holds non-integer numbers ({fractional!r}, "
                f"{len(seen)} distinct values), not class labels; use task=regression to predict a numeric target"
            )
    named = sorted(((_name(v), v) for v in seen), key=lambda item: _natural(item[0]))
    if len(named) < 2:
        raise ConfigError(f"data.target={cfg.target!r} has one value only in data.path={cfg.path}: nothing to classify")
    return pa.array([v for _, v in named], type=kind), [n for n, _ in named]


def _name(value: Any) -> str:
    """Name a label as data=csv would: 3, not 3.0, since prepare reads integers as floats."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class Moments:
    """Per-column mean and population variance, merged batch by batch (Chan et al.) as accurately as one pass."""

    def __init__(self, width: int) -> None:
        self.n, self.mean, self.m2 = 0, np.zeros(width), np.zeros(width)

    def add(self, x: np.ndarray) -> None:
        k = len(x)
        if not k:
            return
        mean = x.mean(0)
        m2 = ((x - mean) ** 2).sum(0)
        delta, n = mean - self.mean, self.n + k
        self.mean = self.mean + delta * (k / n)
        self.m2 = self.m2 + m2 + delta**2 * (self.n * k / n)
        self.n = n

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / max(self.n, 1))


def matrix(batch: pa.Table, names: Sequence[str]) -> np.ndarray:
    """Return the columns `names` of an Arrow batch as a float64 (rows, columns) matrix, empty cells as NaN."""
    out = np.empty((batch.num_rows, len(names)))
    for j, name in enumerate(names):
        out[:, j] = pc.cast(batch.column(name), pa.float64()).to_numpy()
    return out


def scan(
    cfg: Any, table: datasets.Dataset, split: str, inputs: list[str], train: np.ndarray | bool, value: bool
) -> tuple[Moments, Moments]:
    """Check every value of `table` is a finite number and return the moments of the inputs and a value target.

    Reads STATS_ROWS rows at a time. The moments cover the rows `train` marks: a bool per row, or True / False
    for all / none."""
    names = [*inputs, cfg.target] if value else list(inputs)
    stats, target_stats = Moments(len(inputs)), Moments(1)
    view = table.with_format("arrow", columns=names)
    for start in range(0, len(table), STATS_ROWS):
        x = matrix(view[start : start + STATS_ROWS], names)
        finite = np.isfinite(x)
        if not finite.all():
            row, col = map(int, np.argwhere(~finite)[0])
            raise ConfigError(
                f"data.path={cfg.path}, {split} split, row {start + row} (from 0): column {names[col]!r} is "
                f"{'empty' if np.isnan(x[row, col]) else x[row, col]}; fill or drop the rows with empty, NaN or inf "
                "values"
            )
        if train is not False:
            keep = x if train is True else x[train[start : start + len(x)]]
            stats.add(keep[:, : len(inputs)])
            if value:
                target_stats.add(keep[:, len(inputs) :])
    return stats, target_stats


class MappedColumns:
    """Gather columns of a memory-mapped Arrow table by row number.

    Numeric columns without empty cells are read through zero-copy numpy views, so a gather touches only the rows
    asked for. That is about ten times faster than Arrow's take, which the other columns (text labels) use."""

    def __init__(self, table: pa.Table, names: Sequence[str]) -> None:
        self.table = table.select(list(names))
        batches = self.table.to_batches()
        self.offsets = np.cumsum([0, *(batch.num_rows for batch in batches)])
        self.views: dict[str, list[np.ndarray]] = {}
        for j, name in enumerate(names):
            kind = self.table.schema.field(name).type
            if (pa.types.is_integer(kind) or pa.types.is_floating(kind)) and self.table.column(j).null_count == 0:
                self.views[name] = [batch.column(j).to_numpy(zero_copy_only=True) for batch in batches]

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray | pa.ChunkedArray]:
        batch = np.searchsorted(self.offsets, rows, side="right") - 1
        local = rows - self.offsets[batch]
        groups = [(b, np.flatnonzero(batch == b)) for b in np.unique(batch)]
        out: dict[str, np.ndarray | pa.ChunkedArray] = {}
        for name in self.table.column_names:
            if name in self.views:
                column = np.empty(len(rows), dtype=self.views[name][0].dtype)
                for b, at in groups:
                    column[at] = self.views[name][b][local[at]]
                out[name] = column
            else:
                out[name] = self.table.column(name).take(rows)
        return out


class RankPermutation(Sampler[int]):
    """One rank's training order, exactly DistributedSampler's (shuffle=True, drop_last=False).

    So data=hf trains in data=csv's order. DistributedSampler keeps the epoch's order as Python ints, ~36 bytes a
    row. This keeps torch's int64 tensor (8 bytes a row) and hands it out a slice at a time: at 100 million rows
    that is 0.8 GB instead of 3.6 GB."""

    SLICE = 65_536

    def __init__(self, n: int, rank: int, world_size: int, seed: int) -> None:
        self.n, self.rank, self.world_size, self.seed = n, rank, world_size, seed
        self.num_samples = math.ceil(n / world_size)
        self.total = self.num_samples * world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        if self.total > self.n:  # pad like DistributedSampler: repeat the order from its start
            order = torch.cat([order, order.repeat(math.ceil((self.total - self.n) / self.n))[: self.total - self.n]])
        for piece in order[self.rank : self.total : self.world_size].split(self.SLICE):
            yield from piece.tolist()


class ArrowRows(OrderedDataset):
    """One split of a memory-mapped table, with items (float32 inputs (F,), target).

    ``rows`` picks the split's rows; None means all, in order. ``__getitems__`` gathers and standardises a whole
    batch at once."""

    def __init__(
        self,
        table: datasets.Dataset,
        rows: np.ndarray | None,
        inputs: list[str],
        target: str,
        mean: np.ndarray,
        std: np.ndarray,
        labels: pa.Array | None,
        target_mean: float = 0.0,
        target_std: float = 1.0,
    ) -> None:
        self.table, self.rows, self.inputs, self.target = table, rows, inputs, target
        self.mean, self.std, self.labels = mean, std, labels
        self.target_mean, self.target_std = target_mean, target_std
        # numeric labels are sorted ascending, so a binary search maps them to their index
        numeric = labels is not None and (pa.types.is_integer(labels.type) or pa.types.is_floating(labels.type))
        self.sorted_labels = labels.to_numpy() if numeric and labels is not None else None
        self._columns: MappedColumns | None = None  # made in each reading process, DataLoader workers too

    def __getstate__(self) -> dict[str, Any]:
        # numpy views of the mapped buffers would pickle as copies of the whole table; a spawned worker gets
        # the file names instead and maps them itself
        return {**self.__dict__, "_columns": None}

    def __len__(self) -> int:
        return len(self.table) if self.rows is None else len(self.rows)

    def train_sampler(self, rank: int, world_size: int, seed: int) -> RankPermutation:
        """Return the training order; lab.distributed.Parallel.train_sampler asks for it."""
        return RankPermutation(len(self), rank, world_size, seed)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        x, y = self.batch(indices)
        return list(zip(x.unbind(0), y.unbind(0)))

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Return items `indices` as one batch: (inputs (B, F), targets (B,))."""
        rows = np.asarray(indices, dtype=np.int64)
        if self.rows is not None:
            rows = self.rows[rows]
        if self._columns is None:
            self._columns = MappedColumns(self.table.data.table, [*self.inputs, self.target])
        found = self._columns.gather(rows)
        features = np.empty((len(rows), len(self.inputs)))
        for j, name in enumerate(self.inputs):
            features[:, j] = found[name]
        x = torch.from_numpy(((features - self.mean) / self.std).astype(np.float32))
        column = found[self.target]
        if self.sorted_labels is not None:
            y = torch.from_numpy(np.searchsorted(self.sorted_labels, column).astype(np.int64))
        elif self.labels is not None:
            y = torch.from_numpy(pc.index_in(column, value_set=self.labels).to_numpy().astype(np.int64))
        else:
            values = column if isinstance(column, np.ndarray) else pc.cast(column, pa.float64()).to_numpy()
            y = torch.from_numpy(((values - self.target_mean) / self.target_std).astype(np.float32))
        return x, y


def build(cfg: Any) -> DataModule:
    """Build the splits of data.path as ArrowRows, with data=csv's meta keys."""
    if cfg.target_type == "tokens":
        raise ConfigError(
            "task=language_model reads text: set data.text_column (or data.prompt_column + data.response_column, "
            "or data.messages_column) and data.tokenizer"
        )
    tables = load_tables(cfg)
    inputs = columns(cfg, tables)
    value = cfg.target_type == "value"
    labels, class_names = (None, None) if value else classes(cfg, tables)
    train = tables["train"]
    n = len(train)

    # use the folder's split, else data=csv's: train_val_test over the same labels gives the same rows
    rows: dict[str, np.ndarray | None] = {"train": None, "val": None, "test": None}
    if "val" not in tables:
        strata = (
            torch.zeros(n, dtype=torch.uint8)  # one stratum, a byte a row
            if value
            else torch.from_numpy(
                pc.index_in(train.data.column(cfg.target), value_set=labels).to_numpy().astype(np.int64)
            )
        )
        if "test" in tables:
            keep, held = split_indices(strata, cfg.val_fraction, cfg.split_seed)
            rows["train"], rows["val"] = keep.numpy(), held.numpy()
        else:
            train_idx, val_idx, test_idx = train_val_test(strata, cfg)
            rows["train"], rows["val"] = train_idx.numpy(), val_idx.numpy()
            rows["test"] = None if test_idx is None else test_idx.numpy()
        del strata
        if n < 2**31:  # the row numbers are kept for the whole run: 4 bytes a row, not 8
            rows = {split: None if index is None else index.astype(np.int32) for split, index in rows.items()}
    mask: np.ndarray | bool = True  # the train split's rows; a bool a row when it is carved out of the table
    if rows["train"] is not None:
        mask = np.zeros(n, dtype=bool)
        mask[rows["train"]] = True

    stats, target_stats = scan(cfg, train, "train", inputs, mask, value)
    del mask
    for split in ("val", "test"):
        if split in tables:
            scan(cfg, tables[split], split, inputs, False, value)
    mean, std = stats.mean, np.maximum(stats.std, 1e-12)
    meta: dict[str, Any] = {
        "input_shape": [len(inputs)],
        "feature_names": [str(c) for c in inputs],
        "feature_mean": [float(v) for v in mean],
        "feature_std": [float(v) for v in std],
        "target_name": str(cfg.target),
    }
    if value:
        t_mean, t_std = float(target_stats.mean[0]), float(target_stats.std[0]) or 1.0
        meta.update(num_outputs=1, target_mean=t_mean, target_std=t_std)
    else:
        t_mean, t_std = 0.0, 1.0
        assert class_names is not None
        meta.update(num_outputs=len(class_names), num_classes=len(class_names), class_names=list(class_names))

    def part(split: str) -> ArrowRows | None:
        table = tables.get(split, train)
        if split not in tables and rows[split] is None:
            return None  # no test split and data.test_fraction=0
        return ArrowRows(table, rows[split], inputs, cfg.target, mean, std, labels, t_mean, t_std)

    train_rows, val_rows = part("train"), part("val")
    assert train_rows is not None and val_rows is not None  # only the test split may be missing
    return DataModule(train=train_rows, val=val_rows, test=part("test"), meta=meta)


# --------------------------------------------------------------------------------------------------- preparing
class _Batches:
    """Hand out the CSV's record batches `n` rows at a time as they are parsed, slicing those that straddle parts."""

    def __init__(self, reader: pcsv.CSVStreamingReader, stream: pa.NativeFile, source: Path, bar: Any) -> None:
        self.reader, self.stream, self.source, self.bar = reader, stream, source, bar
        self.pending: pa.RecordBatch | None = None
        self.parsed = 0  # rows parsed so far, for error messages

    def _next(self) -> pa.RecordBatch | None:
        try:
            batch = self.reader.read_next_batch()
        except StopIteration:
            return None
        except pa.ArrowInvalid as err:  # a row that does not parse, or a value not of its column's type
            found = re.sub(r"column #(\d+)", lambda m: f"column {self.reader.schema.names[int(m[1])]!r}", str(err))
            raise UserError(
                f"{self.source}, in the rows after {self.parsed}: {found.splitlines()[0]}; fix the file, then prepare "
                "into a new data.path"
            ) from None
        self.parsed += batch.num_rows
        self.bar.update(self.stream.tell() - self.bar.n)
        return batch

    def more(self) -> bool:
        if self.pending is None:
            self.pending = self._next()
            while self.pending is not None and self.pending.num_rows == 0:
                self.pending = self._next()
        return self.pending is not None

    def take(self, n: int) -> Iterator[pa.RecordBatch]:
        while n > 0 and self.more():
            batch, self.pending = self.pending, None
            assert batch is not None  # more() said so
            if batch.num_rows > n:
                batch, self.pending = batch.slice(0, n), batch.slice(n)
            n -= batch.num_rows
            yield batch


def open_csv(source: Path) -> tuple[pcsv.CSVStreamingReader, pa.NativeFile]:
    """Open a streaming reader of `source`; return it and the stream under it.

    pyarrow guesses column types from the first block. Integers are widened to float64, so a later 1.5 in a column
    that started 1, 2, 3 still fits. Integers lose nothing below 2**53."""
    read = pcsv.ReadOptions(block_size=CSV_BLOCK)
    try:
        probe = pcsv.open_csv(str(source), read_options=read)
    except pa.ArrowInvalid as err:
        raise ConfigError(
            f"data.source={source}: {str(err).splitlines()[0]}; give a CSV file with a header row"
        ) from None
    schema = probe.schema
    probe.close()
    names = schema.names
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ConfigError(
            f"data.source={source}: the header names column(s) {', '.join(map(repr, duplicated))} more than once; "
            "give every column its own name"
        )
    widen = {f.name: pa.float64() for f in schema if pa.types.is_integer(f.type) or pa.types.is_null(f.type)}
    stream = pa.input_stream(str(source))
    reader = pcsv.open_csv(stream, read_options=read, convert_options=pcsv.ConvertOptions(column_types=widen))
    return reader, stream


def write_part(path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> dict[str, Any]:
    """Write one part as an Arrow IPC stream of WRITE_ROWS-row batches, which ``Dataset.from_file`` can map."""
    rows, held = 0, 0
    pending: list[pa.RecordBatch] = []

    def flush(writer: pa.ipc.RecordBatchStreamWriter) -> None:
        if pending:
            writer.write_batch(pa.Table.from_batches(pending, schema).combine_chunks().to_batches()[0])
            pending.clear()

    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            while batch.num_rows:
                take = min(batch.num_rows, WRITE_ROWS - held)
                pending.append(batch.slice(0, take))
                batch, held, rows = batch.slice(take), held + take, rows + take
                if held == WRITE_ROWS:
                    flush(writer)
                    held = 0
        flush(writer)
    return {"rows": rows}


def prepare(cfg: Any) -> None:
    """Convert data.source, a CSV of any size, into Arrow parts in data.path, in bounded memory."""
    from tqdm import tqdm

    if cfg.source is None:
        raise ConfigError(
            f"data=hf prepares data.path from a CSV file: set data.source=<file.csv>, e.g. {_command(cfg)}"
        )
    source = Path(cfg.source).expanduser()
    if not source.is_file():
        raise ConfigError(f"data.source={cfg.source} is not a file; give the CSV to convert (a header row, then rows)")
    command = _command(cfg)
    preparer = prepared.Preparer(cfg.path, KIND, {"rows_per_part": cfg.rows_per_part}, source, command)
    if preparer.up_to_date:
        log.info("data.path=%s is already prepared from %s; nothing to do", cfg.path, cfg.source)
        return
    reader, stream = open_csv(source)  # refuse a bad header before writing anything
    schema = reader.schema
    with stream, tqdm(total=source.stat().st_size, unit="B", unit_scale=True, desc=f"prepare {source.name}") as bar:
        batches = _Batches(reader, stream, source, bar)
        if not batches.more():
            raise ConfigError(f"data.source={cfg.source} has no data rows under its header")
        total, index = 0, 0
        while batches.more():
            name = PART.format(index)
            if preparer.done(name):  # an interrupted run already wrote it: skip its rows
                total += sum(batch.num_rows for batch in batches.take(cfg.rows_per_part))
            else:
                part = batches.take(cfg.rows_per_part)
                total += preparer.add(name, functools.partial(write_part, schema=schema, batches=part))["rows"]
            index += 1
    info = {
        "rows": total,
        "columns": [{"name": f.name, "type": str(f.type)} for f in schema],
        "rows_per_part": cfg.rows_per_part,
    }
    manifest = preparer.finish(info)
    size = sum(part["bytes"] for part in manifest["parts"])
    log.info(
        "prepared %s: %d rows, %d columns in %d part(s), %.1f MiB", cfg.path, total, len(schema), index, size / 2**20
    )
