"""The datasets the core ships, one option each (the keys every dataset has: lab.config.data).

So `data=digits data.num_samples=5` is refused (only synthetic has it). `build()` imports its code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from omegaconf import MISSING

from lab.config.checks import in_range as _in_range
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.data import DataConfig, ImageDataConfig
from lab.errors import ConfigError

if TYPE_CHECKING:
    from lab.data.common import DataModule


DIGITS = tuple(str(i) for i in range(10))  # class names of digits and MNIST


@dataclass
class DigitsConfig(ImageDataConfig):
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, offline), split by split_seed.

    num_workers stays 0: the set is in-memory tensors, where worker processes would only add IPC cost."""

    class_names: ClassVar[tuple[str, ...]] = DIGITS

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

    example_overrides = ("data.root=/path/to/images",)

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

    example_overrides = ("data.path=table.csv", "data.target=y")

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
