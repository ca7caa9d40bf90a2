"""Builders for the in-memory datasets: digits, MNIST / Fashion-MNIST, CIFAR-10 and synthetic noise, and the
`TensorImageDataset` they hold their images in. A builder types its option `Any` beyond the kind's keys:
lab.data.options imports this module, and naming its classes back would close an import circle."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lab.config.data import ImageDataConfig
from lab.data import bundled
from lab.data.common import (
    DataModule,
    InMemoryDataset,
    make_meta,
    resolve_num_classes,
    resolve_stats,
    split_indices,
    train_val_test,
)
from lab.data.transforms import RandomShiftFlip, normalize_
from lab.errors import ConfigError, UserError

# CIFAR-10's per-channel statistics over its official training set, pixels in [0,1]. MNIST's are in its option
CIFAR10_STATS = ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616])


class TensorImageDataset(InMemoryDataset):
    """Images held as one (N,C,H,W) tensor. Items are `(normalized float32 x, int y)`.

    Images stay in their compact source dtype (uint8 for MNIST/CIFAR uses 4x less memory than float). On fetch
    they are scaled by `1/scale` to [0,1], augmented, then normalized. `__getitems__` does this for a whole batch
    in a few tensor ops, and the DataLoader uses it instead of one `__getitem__` per sample.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        scale: float,
        mean: Sequence[float],
        std: Sequence[float],
        augment: Callable[..., torch.Tensor] | None = None,  # (x) or (x, generator)
        source_indices: torch.Tensor | None = None,
    ) -> None:
        if images.ndim != 4 or len(images) != len(labels):
            raise ValueError(f"expected images (N,C,H,W) and N labels, got {tuple(images.shape)} and {len(labels)}")
        self.images = images
        self.labels = labels.long()
        self.scale = float(scale)
        self.mean = torch.tensor(list(mean), dtype=torch.float32, device=images.device)
        self.std = torch.tensor(list(std), dtype=torch.float32, device=images.device)
        self.augment = augment
        # Row of each item in the source data (e.g. load_digits order), so tests and audits can check splits
        self.source_indices = torch.arange(len(labels)) if source_indices is None else source_indices

    def __len__(self) -> int:
        return len(self.labels)

    def fetch(self, index: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return items `index` as one batch `(x, y)` on the images' device.
        Augmentation draws from `generator`. None means the global RNG, which only the DataLoader path uses."""
        # index_select gives the same rows as images[index], 5-20x faster on CPU. The gather is this batch's own
        # copy, so scaling and normalization can run in place
        x = self.images.index_select(0, index).float()
        if self.scale != 1.0:
            x.div_(self.scale)
        if self.augment is not None:  # returns a new tensor or its input
            x = self.augment(x) if generator is None else self.augment(x, generator)
        return normalize_(x, self.mean, self.std), self.labels.index_select(0, index)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x, y = self.fetch(torch.tensor([index]))
        return x[0], int(y[0])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, int]]:
        xs, ys = self.fetch(torch.as_tensor(indices, dtype=torch.long))
        return list(zip(xs.unbind(0), ys.tolist()))

    def to(self, device: torch.device) -> TensorImageDataset:
        """Return this split on `device`, for data.loader=device.
        Raises UserError if the augmentation cannot run there as batched tensor ops (only `RandomShiftFlip` can)."""
        if self.augment is not None and not isinstance(self.augment, RandomShiftFlip):
            raise UserError(
                f"data.loader=device cannot run this dataset's augmentation ({type(self.augment).__name__}) as "
                "batched tensor ops on the device; use data.loader=torch"
            )
        moved = copy.copy(self)
        vars(moved).update({key: getattr(self, key).to(device) for key in ("images", "labels", "mean", "std")})
        return moved

    def subset(
        self,
        index: torch.Tensor,
        augment: Callable[..., torch.Tensor] | None = None,  # (x) or (x, generator)
    ) -> TensorImageDataset:
        """Return a new dataset of rows `index` with its own augment. Rows are copied, so the parent can be freed."""
        part = copy.copy(self)
        vars(part).update(
            images=self.images[index],
            labels=self.labels[index],
            augment=augment,
            source_indices=self.source_indices[index],
        )
        return part


def _train_augment(cfg: ImageDataConfig, padding: int, flip: bool) -> RandomShiftFlip | None:
    return RandomShiftFlip(padding, flip) if cfg.augment else None


def _fixed_shape(cfg: ImageDataConfig, dataset: str, in_channels: int, image_size: int) -> int:
    """Raise ConfigError unless the config agrees with a dataset's fixed image shape and 10 classes; return 10."""
    if cfg.in_channels != in_channels:
        raise ConfigError(
            f"data.in_channels={cfg.in_channels} but {dataset} images have {in_channels} channel(s); "
            f"set data.in_channels={in_channels}"
        )
    if cfg.image_size != image_size:
        raise ConfigError(
            f"data.image_size={cfg.image_size} but {dataset} images are {image_size}x{image_size}; "
            f"set data.image_size={image_size}"
        )
    return resolve_num_classes(cfg, dataset, 10)


def _with_official_test(
    cfg: ImageDataConfig, train: TensorImageDataset, test: TensorImageDataset, padding: int, flip: bool, meta: dict
) -> DataModule:
    """Carve val from the official training set (data.val_fraction, split_seed); test is the official test set."""
    train_idx, val_idx = split_indices(train.labels, cfg.val_fraction, cfg.split_seed)
    augment = _train_augment(cfg, padding, flip)
    return DataModule(train=train.subset(train_idx, augment), val=train.subset(val_idx), test=test, meta=meta)


def build_digits(cfg: Any) -> DataModule:
    """Build sklearn's bundled 8x8 digits (1,797 images, values 0..16), split by split_seed."""
    num_classes = _fixed_shape(cfg, "digits", 1, 8)
    pixels, targets = bundled.digits()
    images = torch.from_numpy(pixels.astype(np.uint8)).unsqueeze(1)  # (N,1,8,8), values 0..16
    labels = torch.from_numpy(targets).long()

    train_idx, val_idx, test_idx = train_val_test(labels, cfg)

    # Statistics from the train split only, so nothing about val/test leaks into the inputs
    train_pixels = images[train_idx].float() / 16.0
    own_mean = train_pixels.mean(dim=(0, 2, 3)).tolist()
    own_std = train_pixels.std(dim=(0, 2, 3), unbiased=False).tolist()
    mean, std = resolve_stats(cfg, 1, own_mean, own_std)

    full = TensorImageDataset(images, labels, scale=16.0, mean=mean, std=std)
    return DataModule(
        train=full.subset(train_idx, _train_augment(cfg, padding=1, flip=False)),  # digits are not mirror-symmetric
        val=full.subset(val_idx),
        test=None if test_idx is None else full.subset(test_idx),
        meta=make_meta(num_classes, 1, 8, mean, std, cfg.class_names, cfg.crop_pct, cfg.interpolation),
    )


def build_mnist(cfg: Any) -> DataModule:
    """Build MNIST or Fashion-MNIST (the option's `torchvision_class`) from the raw idx files.
    Val is carved from the official train set."""
    from torchvision import datasets  # lazy, as torchvision is slow to import

    cls = getattr(datasets, cfg.torchvision_class)
    num_classes = _fixed_shape(cfg, cfg.name, 1, 28)
    raw = Path(cfg.root).expanduser() / cls.__name__ / "raw"
    names = [f"{split}-{kind}" for split in ("train", "t10k") for kind in ("images-idx3-ubyte", "labels-idx1-ubyte")]
    missing = [name for name in names if not (raw / name).is_file()]
    if missing and not cfg.download:
        raise ConfigError(
            f"data.name={cfg.name}: missing {', '.join(missing)} in {raw}; "
            f"pass data.download=true or data.root=<folder holding {cls.__name__}/raw>"
        )

    official_train = cls(str(Path(cfg.root).expanduser()), train=True, download=cfg.download)
    official_test = cls(str(Path(cfg.root).expanduser()), train=False, download=False)
    mean, std = resolve_stats(cfg, 1, [cfg.stats[0]], [cfg.stats[1]])
    train_full = TensorImageDataset(
        official_train.data.unsqueeze(1), official_train.targets, scale=255.0, mean=mean, std=std
    )
    test = TensorImageDataset(official_test.data.unsqueeze(1), official_test.targets, scale=255.0, mean=mean, std=std)
    meta = make_meta(num_classes, 1, 28, mean, std, cfg.class_names, cfg.crop_pct, cfg.interpolation)
    return _with_official_test(cfg, train_full, test, padding=2, flip=False, meta=meta)


# The official CIFAR format is a pickle, and a plain unpickler calls whatever the file names. These files hold
# dicts of bytes, lists and numpy arrays, so only what rebuilds an array is allowed (numpy 1 and 2 name its module
# differently). A file that names anything else is refused unread.
_CIFAR_GLOBALS = {
    *((f"numpy.{core}.multiarray", "_reconstruct") for core in ("core", "_core")),
    *((f"numpy.{core}.numeric", "_frombuffer") for core in ("core", "_core")),  # pickle protocol 5
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),  # bytes as Python 3 writes them at protocol 2
}


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _CIFAR_GLOBALS:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which CIFAR's batches never hold")
        return super().find_class(module, name)


def _unpickle_cifar(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            return _CifarUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise ConfigError(
            f"data.name=cifar10: {path} is not a CIFAR-10 python batch ({err}): not loaded (a pickle can run code); "
            "delete the folder and pass data.download=true, or point data.root at the official files"
        ) from err


def _read_cifar_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    batch = _unpickle_cifar(path)
    data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    return torch.from_numpy(data.copy()), torch.tensor(batch[b"labels"], dtype=torch.long)


def _cifar_dir(cfg: Any) -> Path:
    root = Path(cfg.root).expanduser()
    folder = root / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing and cfg.download:
        from torchvision import datasets

        # torchvision fetches and md5-checks the archive. We then read the extracted pickles ourselves
        datasets.CIFAR10(str(root), train=True, download=True)
        missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise ConfigError(
            f"data.name=cifar10: missing {', '.join(missing)} in {folder}; "
            "pass data.download=true or data.root=<folder holding cifar-10-batches-py>"
        )
    return folder


def build_cifar10(cfg: Any) -> DataModule:
    """Build CIFAR-10 from the python-format batches, with val carved from the 50k train images."""
    num_classes = _fixed_shape(cfg, "cifar10", 3, 32)
    folder = _cifar_dir(cfg)
    parts = [_read_cifar_batch(folder / f"data_batch_{i}") for i in range(1, 6)]
    class_names = [name.decode() for name in _unpickle_cifar(folder / "batches.meta")[b"label_names"]]

    mean, std = resolve_stats(cfg, 3, *CIFAR10_STATS)
    train_full = TensorImageDataset(
        torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]), scale=255.0, mean=mean, std=std
    )
    test = TensorImageDataset(*_read_cifar_batch(folder / "test_batch"), scale=255.0, mean=mean, std=std)
    meta = make_meta(num_classes, 3, 32, mean, std, class_names, cfg.crop_pct, cfg.interpolation)
    return _with_official_test(cfg, train_full, test, padding=4, flip=True, meta=meta)


def build_synthetic(cfg: Any) -> DataModule:
    """Build Gaussian noise images with random labels, for throughput benchmarks (nothing to learn)."""
    num_classes = cfg.num_classes or 10
    c, s = cfg.in_channels, cfg.image_size
    n_eval = max(1, round(cfg.num_samples * cfg.val_fraction))
    gen = torch.Generator().manual_seed(cfg.split_seed)

    def make(n: int, augment: RandomShiftFlip | None = None) -> TensorImageDataset:
        # Already ~N(0,1), so mean 0 and std 1 make normalization the identity
        x = torch.randn(n, c, s, s, generator=gen)
        y = torch.randint(0, num_classes, (n,), generator=gen)
        return TensorImageDataset(x, y, scale=1.0, mean=[0.0] * c, std=[1.0] * c, augment=augment)

    # data.augment uses CIFAR-10's recipe (pad 4, crop, flip), so augmentation's cost can be benchmarked too
    train = make(cfg.num_samples, _train_augment(cfg, padding=4, flip=True))
    val, test = make(n_eval), make(n_eval)
    names = [f"class_{i}" for i in range(num_classes)]
    meta = make_meta(num_classes, c, s, [0.0] * c, [1.0] * c, names, cfg.crop_pct, cfg.interpolation)
    return DataModule(train=train, val=val, test=test, meta=meta)
