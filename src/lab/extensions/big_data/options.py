"""Options this extension adds to the `data` group: datasets prepared once by ``scripts/prepare_data.py``.

Training reads them without holding the data in memory. This module is imported at every start, so it avoids
torch; each ``build`` or ``prepare`` imports its own module of this package."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from lab.config.checks import require as _require
from lab.config.data import DataConfig
from lab.data.options import ImageFolderConfig

if TYPE_CHECKING:
    from lab.data.common import DataModule


class PreparedFiles:
    """Mixin for a data option read from files that ``scripts/prepare_data.py`` wrote once into data.path.

    Put it first among the bases. The package module named by `reader` must define ``build(cfg)``,
    ``prepare(cfg)`` and ``read_manifest(cfg)``."""

    reader: ClassVar[str]

    def _module(self) -> Any:
        return importlib.import_module(f"{__package__}.{self.reader}")

    def build(self) -> DataModule:
        return self._module().build(self)

    def prepare(self) -> None:
        self._module().prepare(self)

    def verify(self) -> None:
        from lab.data import prepared

        prepared.verify(self.path, self._module().read_manifest(self))  # type: ignore[attr-defined]


@dataclass
class ShardsConfig(PreparedFiles, ImageFolderConfig):
    """Images or tensors in WebDataset tar shards, read by index, for data larger than RAM (shards.py).

    Prepare once from an image folder laid out like data=image_folder's, then train:
    `python scripts/prepare_data.py data=shards data.source=/images data.path=/data/shards`,
    `python scripts/train.py data=shards data.path=/data/shards`. The image keys are image_folder's."""

    reader: ClassVar[str] = "shards"  # shards.py
    requires = ("webdataset", "wids")

    # the prepared folder, or its https://, s3:// or gs:// URL; shards from a URL are fetched once into cache_dir
    path: str = MISSING
    source: str | None = None  # the image folder to prepare from; if set at training, a changed source is refused
    samples_per_shard: int = 1000  # samples per tar shard, at prepare
    # the training order shuffles the samples of shuffle_shards shards together: larger mixes more, smaller keeps
    # fewer shards in use (page cache, open files)
    shuffle_shards: int = 4
    open_shards: int = 8  # shards each process keeps open (memory-mapped)
    cache_dir: str = "${oc.select:paths.data,data}/shard_cache"  # node-local disk for shards from a URL

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
class TokensConfig(PreparedFiles, DataConfig):
    """A text corpus of any size for language modelling on byte-level BPE tokens (tokens.py).

    `python scripts/prepare_data.py data=tokens data.source=<text file or folder> data.path=<folder>` trains the
    tokenizer and writes the corpus as token files once. Training reads memory-mapped windows of block_size tokens.
    Training needs the same data.source and settings, and refuses a folder whose source changed since."""

    reader: ClassVar[str] = "tokens"  # tokens.py
    requires = ("tokenizers",)

    path: str = MISSING  # the prepared folder
    # a text file, or a folder of *.txt files, one document each; null = Python's standard-library sources,
    # which are always there offline
    source: str | None = None
    vocab_size: int = 4096  # including the 256 byte symbols; ids are uint16 up to 65,536, else uint32
    tokenizer_mb: float | None = None  # train the tokenizer on the first this many MB of text; null = all of it
    shard_mb: float = 256.0  # MB of text per token file; an interrupted prepare rewrites at most one
    block_size: int = 128  # tokens per training window: the model's context
    batch_size: int = 32
    val_fraction: float = 0.05  # contiguous parts of the token stream, cut at training
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
