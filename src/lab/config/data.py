"""The `data` kind: the keys every dataset has (`DataConfig`). Each dataset is an option with its own keys: the core's
in lab/data/options.py. `build()` returns a `lab.data.common.DataModule`."""

from __future__ import annotations

import math
import multiprocessing
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config import options
from lab.config.checks import at_least, seed
from lab.config.checks import in_range as _in_range
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.options import Option
from lab.errors import ConfigError


@dataclass
class DataConfig(Option, group="data"):
    """Keys every dataset has: where its files are, and how it is split and batched."""

    name: str = MISSING
    root: str = "${oc.select:paths.data,data}"  # this machine's paths.data (conf/local/default.yaml), else "data"
    batch_size: int = 64  # per device
    eval_batch_size: int | None = None  # null = batch_size
    # torch: a DataLoader with workers, for any dataset. device: each split held as tensors on the training device,
    # where batches are shuffled, cut and augmented by tensor ops (in-memory datasets: images, tables, text).
    loader: str = "torch"
    num_workers: int = 0  # data.loader=torch only
    pin_memory: bool | None = None  # null = auto: only when training on CUDA
    persistent_workers: bool = True  # only meaningful with num_workers > 0
    # How workers start: fork | spawn | forkserver. null = the platform's default (fork on Linux), also in processes
    # a launcher spawned (dist=ddp's ranks, hydra/launcher=joblib's jobs), which would otherwise pass on their own.
    multiprocessing_context: str | None = None
    split_seed: int = 0  # fixes the train/val(/test) split, independent of the training seed
    val_fraction: float = 0.15
    test_fraction: float = 0.15  # only for datasets without an official test split

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("data.batch_size", self.batch_size, 1)
        at_least("data.eval_batch_size", self.eval_batch_size, 1, or_null=True)
        _one_of("data.loader", self.loader, ("torch", "device"))
        at_least("data.num_workers", self.num_workers, 0)
        if self.multiprocessing_context is not None:
            methods = tuple(multiprocessing.get_all_start_methods())  # this platform's
            _one_of("data.multiprocessing_context", self.multiprocessing_context, methods)
        seed("data.split_seed", self.split_seed)
        _require(0 < self.val_fraction < 1, f"data.val_fraction must be in (0, 1), got {self.val_fraction}")
        _require(
            0 <= self.test_fraction < 1 and self.val_fraction + self.test_fraction < 1,
            "data.test_fraction must be in [0, 1) and val_fraction + test_fraction < 1",
        )

    def build(self) -> Any:
        """Return the train/val(/test) splits and their `meta` as a `lab.data.common.DataModule`."""
        raise NotImplementedError(f"{type(self).__name__} has no build()")

    def prepare(self) -> None:
        """Write data.path from data.source once, for `scripts/prepare_data.py`: an option read from prepared files
        overrides this and `verify`; the others read their files as they are, and refuse."""
        prepared = [
            n
            for n, o in options.options("data").items()
            if issubclass(o, DataConfig) and o.prepare is not DataConfig.prepare
        ]
        # none ships in the core, so say so rather than list nothing
        which = (
            f"scripts/prepare_data.py prepares {', '.join(prepared)}"
            if prepared
            else "no data option here is read from prepared files"
        )
        raise ConfigError(f"data={self.name} reads its files as they are: nothing to prepare; {which}")

    def text_codec(self, meta: dict[str, Any]) -> Any:
        """Return how task=language_model spells prompts and samples for this data's `meta` (a
        `lab.data.text.TextCodec`), or None (the default): the task then reads meta's characters, bytes or BPE, as
        the core's text data writes them. A data option with its own tokenizer overrides it."""
        return None

    def verify(self) -> None:
        """Check every prepared part against its checksum, for `scripts/prepare_data.py --verify`."""
        self.prepare()  # datasets without prepared files refuse in the same words

    def batch_mixing(self) -> tuple[float, float] | None:
        """Return (MixUp alpha, CutMix alpha) if training batches are mixed, or None (the default) if not. Mixing
        (`lab.data.augment.MixBatch`) turns targets into class probabilities, so other tasks refuse it."""
        return None


@dataclass
class ImageDataConfig(DataConfig, abstract=True):
    """Keys of the image classification datasets."""

    num_classes: int | None = None  # null = what the dataset says
    in_channels: int = 1
    image_size: int = 8
    augment: bool = False
    # null = the pretrained model's (model.preprocessing()), else the dataset's own statistics
    mean: list[float] | None = None
    std: list[float] | None = None
    # For evaluation and inference on image files: resize the shorter side to image_size / crop_pct, then keep the
    # centre image_size square. null = the pretrained model's, else 1 (the whole shorter side).
    crop_pct: float | None = None
    interpolation: str | None = None  # bilinear | bicubic | nearest; null = the pretrained model's, else bilinear
    # MixUp / CutMix on training batches (lab.data.augment). Each batch is mixed with itself rolled by one sample,
    # by a share drawn from Beta(alpha, alpha), and targets become class probabilities (N, K). 0 = off; 0.2 and 1.0
    # are usual. With both > 0, one of the two per batch. Needs a classification task and data.loader=torch.
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("data.num_classes", self.num_classes, 2, or_null=True)
        at_least("data.in_channels", self.in_channels, 1)
        _require(
            self.image_size is None or self.image_size >= 1, f"data.image_size must be >= 1, got {self.image_size}"
        )
        if self.crop_pct is not None:
            _in_range("data.crop_pct", self.crop_pct, 0, 1, open_low=True)
        if self.interpolation is not None:
            _one_of("data.interpolation", self.interpolation, ("bilinear", "bicubic", "nearest"))
        _require((self.mean is None) == (self.std is None), "set both data.mean and data.std, or neither")
        if self.std is not None:
            _require(all(s > 0 for s in self.std), f"data.std values must be > 0, got {self.std}")
        for key in ("mixup_alpha", "cutmix_alpha"):
            _in_range(f"data.{key}", getattr(self, key), 0, math.inf, open_high=True, hint="0 = off")
        _require(
            self.loader == "torch" or self.batch_mixing() is None,
            "data.mixup_alpha/cutmix_alpha mix batches in the DataLoader's collate, which data.loader=device does not "
            "use; set data.loader=torch, or data.mixup_alpha=0 data.cutmix_alpha=0",
        )

    def batch_mixing(self) -> tuple[float, float] | None:
        return (self.mixup_alpha, self.cutmix_alpha) if self.mixup_alpha or self.cutmix_alpha else None
