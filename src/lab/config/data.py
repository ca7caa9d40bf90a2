"""The `data` group: the keys every dataset has (`DataConfig`), and one option per shipped dataset with its own keys.

So `data=digits data.num_samples=5` is refused (only synthetic has it). `build()` returns a `lab.data.DataModule`."""

from __future__ import annotations

import math
import multiprocessing
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from omegaconf import MISSING

from lab.config import options
from lab.config.checks import in_range as _in_range
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.checks import seed
from lab.config.options import Option
from lab.errors import ConfigError

if TYPE_CHECKING:
    from lab.data.common import DataModule

DIGITS = tuple(str(i) for i in range(10))  # class names of digits and MNIST


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
        _require(self.batch_size >= 1, f"data.batch_size must be >= 1, got {self.batch_size}")
        _require(
            self.eval_batch_size is None or self.eval_batch_size >= 1,
            f"data.eval_batch_size must be >= 1 or null, got {self.eval_batch_size}",
        )
        _one_of("data.loader", self.loader, ("torch", "device"))
        _require(self.num_workers >= 0, f"data.num_workers must be >= 0, got {self.num_workers}")
        if self.multiprocessing_context is not None:
            methods = tuple(multiprocessing.get_all_start_methods())  # this platform's
            _one_of("data.multiprocessing_context", self.multiprocessing_context, methods)
        seed("data.split_seed", self.split_seed)
        _require(0 < self.val_fraction < 1, f"data.val_fraction must be in (0, 1), got {self.val_fraction}")
        _require(
            0 <= self.test_fraction < 1 and self.val_fraction + self.test_fraction < 1,
            "data.test_fraction must be in [0, 1) and val_fraction + test_fraction < 1",
        )

    def build(self) -> DataModule:
        """Return the train/val(/test) splits and their `meta` as a `lab.data.DataModule`."""
        raise NotImplementedError(f"{type(self).__name__} has no build()")

    def prepare(self) -> None:
        """Write data.path from data.source once, for `scripts/prepare_data.py`; by default raise ConfigError.

        An option read from prepared files overrides this and `verify`. The others read their files as they are."""
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

    def verify(self) -> None:
        """Check every prepared part against its checksum, for `scripts/prepare_data.py --verify`."""
        self.prepare()  # datasets without prepared files refuse in the same words

    def batch_mixing(self) -> tuple[float, float] | None:
        """Return (MixUp alpha, CutMix alpha) if training batches are mixed, or None (the default) if not.

        Mixing (`lab.data.augment.MixBatch`) turns targets into class probabilities, so other tasks refuse it."""
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
        _require(
            self.num_classes is None or self.num_classes >= 2,
            f"data.num_classes must be >= 2 or null, got {self.num_classes}",
        )
        _require(self.in_channels >= 1, f"data.in_channels must be >= 1, got {self.in_channels}")
        _require(
            self.image_size is None or self.image_size >= 1, f"data.image_size must be >= 1, got {self.image_size}"
        )
        _require(
            self.crop_pct is None or 0 < self.crop_pct <= 1, f"data.crop_pct must be in (0, 1], got {self.crop_pct}"
        )
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


@dataclass
class DigitsConfig(ImageDataConfig):
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, offline), split by split_seed.

    num_workers stays 0: the set is in-memory tensors, where worker processes would only add IPC cost."""

    num_classes: int | None = 10

    def build(self) -> DataModule:
        from lab.data.builtin import build_digits

        return build_digits(self)


@dataclass
class MnistConfig(ImageDataConfig):
    """MNIST (torchvision's files under data.root); data.download=true fetches them on a machine with a network."""

    # What a member of the MNIST family changes (lab.data.builtin reads it): torchvision's dataset class, which also
    # names its folder under data.root; the official training set's pixel mean and std; and the class names.
    torchvision_class: ClassVar[str] = "MNIST"
    stats: ClassVar[tuple[float, float]] = (0.1307, 0.3081)
    class_names: ClassVar[tuple[str, ...]] = DIGITS

    download: bool = False
    batch_size: int = 128
    num_workers: int = 2
    image_size: int = 28
    num_classes: int | None = 10
    val_fraction: float = 0.1

    def build(self) -> DataModule:
        from lab.data.builtin import build_mnist

        return build_mnist(self)


@dataclass
class FashionMnistConfig(MnistConfig):
    """Fashion-MNIST (torchvision's files under data.root), read like MNIST."""

    torchvision_class = "FashionMNIST"
    stats = (0.2860, 0.3530)
    class_names = (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    )


@dataclass
class Cifar10Config(ImageDataConfig):
    """CIFAR-10 (torchvision's files under data.root); data.download=true fetches them on a machine with a network."""

    download: bool = False
    batch_size: int = 128
    num_workers: int = 4
    in_channels: int = 3
    image_size: int = 32
    num_classes: int | None = 10
    val_fraction: float = 0.1
    augment: bool = True  # random crop (pad 4) + horizontal flip, train split only

    def build(self) -> DataModule:
        from lab.data.builtin import build_cifar10

        return build_cifar10(self)


@dataclass
class ImageFolderConfig(ImageDataConfig):
    """Your own images in ${data.root}/{train,val}/<class_name>/*.png|jpg, with optional test/.

    Without val/, a stratified data.val_fraction of train/ is split off by data.split_seed. The classes are
    train/'s sub-folders, so num_classes stays null. data.root=/path/to/images is required; if root/train is
    missing, the run stops and shows the expected layout."""

    num_workers: int = 4
    in_channels: int = 3
    # null = the pretrained model's input size, else 64. Fixed-size datasets never leave image_size null.
    image_size: int | None = None  # type: ignore[assignment]
    augment: bool = True
    max_bad_samples: int = 0  # unreadable images skipped (with a warning) before the run stops
    # Added to data.augment's crop + flip, on training images only (lab.data.augment). auto_augment is a policy:
    # null | randaugment (2 ops, magnitude 9) | trivialaugment (TrivialAugmentWide). random_erasing is the
    # probability of erasing a random rectangle of each normalized image (0 = never; 0.25 is usual).
    auto_augment: str | None = None
    random_erasing: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.max_bad_samples >= 0, f"data.max_bad_samples must be >= 0, got {self.max_bad_samples}")
        _require(
            self.auto_augment in (None, "randaugment", "trivialaugment"),
            f"data.auto_augment={self.auto_augment!r} is not valid; choose null, randaugment or trivialaugment",
        )
        _in_range("data.random_erasing", self.random_erasing, 0, 1, hint="a probability; 0 = off")
        _require(
            self.augment or (self.auto_augment is None and self.random_erasing == 0),
            "data.auto_augment and data.random_erasing add to the training augmentation, which data.augment=false "
            "turns off; set data.augment=true, or drop them",
        )

    def build(self) -> DataModule:
        from lab.data.folder import build_image_folder

        return build_image_folder(self)


@dataclass
class SyntheticConfig(ImageDataConfig):
    """num_samples random tensors of a configurable shape, for benchmarks and smoke tests, not for learning.

    data.augment=true adds CIFAR-10's augmentation (random crop after padding 4 + horizontal flip)."""

    in_channels: int = 3
    image_size: int = 32
    num_classes: int | None = 10
    num_samples: int = 2048

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.num_samples >= 1, f"data.num_samples must be >= 1, got {self.num_samples}")

    def build(self) -> DataModule:
        from lab.data.builtin import build_synthetic

        return build_synthetic(self)


@dataclass
class DiabetesConfig(DataConfig):
    """scikit-learn's bundled diabetes table (442 patients, 10 features, offline), for task=regression.

    Features and target are standardised with the train split's statistics, which the checkpoint keeps."""

    batch_size: int = 32  # 442 rows: small batches, several steps per epoch

    def build(self) -> DataModule:
        from lab.data.tabular import build_diabetes

        return build_diabetes(self)


def _encoding(value: str) -> None:
    """Raise ConfigError unless data.encoding is a text encoding Python knows (codecs like base64 are refused)."""
    try:
        "".encode(value)
    except LookupError:
        raise ConfigError(
            f"data.encoding={value!r} is not a text encoding Python knows; give the file's, e.g. utf-8, latin-1, cp1252"
        ) from None


@dataclass
class CsvConfig(DataConfig):
    """Your own table: `python scripts/train.py data=csv data.path=my.csv data.target=price task=regression`.

    Feature columns are numeric, all but the target unless data.features lists them, and standardised with the train
    split's statistics. The target is a class label (task=classification) or a value (task=regression)."""

    path: str = MISSING  # the .csv file (header row required)
    target: str = MISSING  # target column's name
    features: list[str] | None = None  # null = every other column
    target_type: str = "${task.target_type}"  # class (labels) | value (regression); follows the task
    encoding: str = "utf-8"  # invalid bytes are read as U+FFFD, and a warning counts them

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("data.target_type", self.target_type, ("class", "value"))
        _encoding(self.encoding)

    def build(self) -> DataModule:
        from lab.data.tabular import build_csv

        return build_csv(self)


@dataclass
class TextConfig(DataConfig):
    """A text corpus for char- or byte-level language modelling, cut into windows of block_size tokens.

    Train/val/test are contiguous parts. data.path=null reads a sample of Python's own standard-library sources."""

    path: str | None = None  # a text file; null = Python's standard-library sources (always there offline)
    level: str = "char"  # char (vocabulary of the corpus' characters) | byte (256 symbols, any text)
    block_size: int = 64  # tokens per training window (the model's context)
    max_chars: int = 1_000_000  # cap on the corpus read (null-path corpus included)
    encoding: str = "utf-8"  # of data.path; invalid bytes are read as U+FFFD, and a warning counts them
    batch_size: int = 32
    val_fraction: float = 0.1  # train/val/test are contiguous parts of the corpus
    test_fraction: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("data.level", self.level, ("char", "byte"))
        _require(self.block_size >= 2, f"data.block_size must be >= 2, got {self.block_size}")
        _require(self.max_chars >= 1, f"data.max_chars must be >= 1, got {self.max_chars}")
        _encoding(self.encoding)

    def build(self) -> DataModule:
        from lab.data.text import build_text

        return build_text(self)
