"""The options this extension adds to the `data` group: datasets read from files prepared once
(``scripts/prepare_data.py``), without holding the data in memory. Imported at every start (lab.config.register):
no torch here, each ``build``/``prepare`` imports its module of this package."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.data import DataConfig, ImageFolderConfig

if TYPE_CHECKING:
    from lab.data.common import DataModule


class PreparedFiles:
    """What a data option read from prepared files has (put it first among the bases): ``scripts/prepare_data.py``
    writes them once into data.path (prepared.py here), and the module ``<reader>`` of this package has ``build(cfg)``,
    ``prepare(cfg)`` and ``read_manifest(cfg)`` (the folder's manifest, refused in one line when it is missing,
    partial, stale or damaged)."""

    reader: ClassVar[str]

    def _module(self) -> Any:
        return importlib.import_module(f"{__package__}.{self.reader}")

    def build(self) -> DataModule:
        return self._module().build(self)

    def prepare(self) -> None:
        self._module().prepare(self)

    def verify(self) -> None:
        from lab.extensions.big_data import prepared

        prepared.verify(self.path, self._module().read_manifest(self))  # type: ignore[attr-defined]


@dataclass
class ShardsConfig(PreparedFiles, ImageFolderConfig):
    """Images (or tensors) in WebDataset tar shards, read by index without holding the set in memory
    (shards.py): for data larger than RAM. Written once from an image folder (the layout and splits of
    data=image_folder) by `python scripts/prepare_data.py data=shards data.source=/images data.path=/data/shards`,
    then `python scripts/train.py data=shards data.path=/data/shards`. The image keys are image_folder's."""

    reader: ClassVar[str] = "shards"  # shards.py
    requires = ("webdataset", "wids")

    # the prepared folder (<split>-NNNNNN.tar shards, <split>.json indexes, manifest.json), or its URL on a server
    # (https://, s3://, gs://: each shard fetched once into cache_dir, by curl / the aws / gsutil CLIs)
    path: str = MISSING
    source: str | None = None  # the image folder prepare reads; set at training too, a changed source is refused
    samples_per_shard: int = 1000  # prepare: samples per tar shard
    # training order: shards shuffled, then the samples of each group of shuffle_shards shards shuffled together;
    # larger mixes more, smaller keeps fewer shards in use at once (page cache, open files)
    shuffle_shards: int = 4
    open_shards: int = 8  # shards each process keeps open (memory-mapped)
    cache_dir: str = "${oc.select:paths.data,data}/shard_cache"  # where shards from a URL are kept (node-local disk)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("samples_per_shard", "shuffle_shards", "open_shards"):
            _require(getattr(self, key) >= 1, f"data.{key} must be >= 1, got {getattr(self, key)}")
        _require(
            self.loader == "torch",
            "data=shards reads samples from disk as the loader asks for them; data.loader=device holds a whole split "
            "on the device: set data.loader=torch (or, for a set that fits in memory, data=image_folder)",
        )


@dataclass
class HfConfig(PreparedFiles, DataConfig):
    """A table too large for memory, read memory-mapped (Hugging Face `datasets`' Arrow files) batch by batch:
    data.path is a folder `Dataset.save_to_disk` wrote (a Dataset, or a DatasetDict with train and optional
    validation|val / test splits) or one `scripts/prepare_data.py data=hf data.source=big.csv data.path=<folder>`
    converted a CSV into, once, in bounded memory. Rows like data=csv's: the numeric input columns standardised with
    the train split's statistics (computed in batches), the target a class label or a value (task.target_type)."""

    reader: ClassVar[str] = "hf"  # hf.py
    requires = ("datasets", "pyarrow")

    path: str = MISSING  # the save_to_disk folder or the prepared folder
    target: str | None = None  # the target column (needed to train; prepare converts every column)
    # the feature columns; null = every numeric column but the target (and but datasets' ClassLabel categories)
    inputs: list[str] | None = None
    target_type: str = "${task.target_type}"  # class (labels) | value (regression); follows the task
    # the CSV that prepare converts into data.path; when set, training refuses a folder prepared before it changed
    source: str | None = None
    rows_per_part: int = 1_000_000  # prepare: rows per Arrow file (each written whole, so a rerun resumes there)

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("data.target_type", self.target_type, ("class", "value"))
        _require(self.rows_per_part >= 1, f"data.rows_per_part must be >= 1, got {self.rows_per_part}")
        _require(
            self.loader == "torch",
            "data=hf reads a memory-mapped table batch by batch; data.loader=device would hold all of it in device "
            "memory: use data.loader=torch (or data=csv for a table that fits in memory)",
        )
        _require(self.inputs is None or len(self.inputs) > 0, "data.inputs=[] names no column; list some, or null")


@dataclass
class TokensConfig(PreparedFiles, DataConfig):
    """A text corpus of any size for language modelling on byte-level BPE tokens, prepared once:
    python scripts/prepare_data.py data=tokens data.source=<text file or folder> data.path=<folder> trains the
    tokenizer and writes the corpus as token files (tokens.py); training reads windows of block_size tokens from
    them memory-mapped, never the whole corpus into memory. The same data.source and settings at training, or the
    folder is refused; a source changed since the prepare makes it stale. train/val/test: contiguous parts of the
    token stream (cut at training, no prepare needed to change them)."""

    reader: ClassVar[str] = "tokens"  # tokens.py
    requires = ("tokenizers",)

    path: str = MISSING  # the prepared folder: written by scripts/prepare_data.py, read by training
    # a text file, or a folder of *.txt files (each a document, in sorted path order); null = Python's own
    # standard-library sources (always there offline)
    source: str | None = None
    vocab_size: int = 4096  # of the BPE, its 256 byte symbols included; ids are uint16 up to 65,536, else uint32
    tokenizer_mb: float | None = None  # MB of source text (the first) the tokenizer is trained on; null = all of it
    shard_mb: float = 256.0  # MB of source text per token file (a part: what an interrupted prepare writes again)
    block_size: int = 128  # tokens per training window (the model's context)
    batch_size: int = 32
    val_fraction: float = 0.05  # train/val/test are contiguous parts of the token stream
    test_fraction: float = 0.05

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            self.loader == "torch",
            "data=tokens reads its token files from disk as it trains (a corpus larger than memory fits no device "
            "either); set data.loader=torch",
        )
        _require(2**8 <= self.vocab_size <= 2**32, f"data.vocab_size must be in [256, 2**32], got {self.vocab_size}")
        _require(
            self.tokenizer_mb is None or self.tokenizer_mb > 0,
            f"data.tokenizer_mb must be > 0 or null (all the text), got {self.tokenizer_mb}",
        )
        _require(self.shard_mb > 0, f"data.shard_mb must be > 0, got {self.shard_mb}")
        _require(self.block_size >= 2, f"data.block_size must be >= 2, got {self.block_size}")
