"""Read user image folders: `root/train/<class>/*.png|jpg|jpeg`, optional `root/val` and `root/test`.
Without `root/val`, a stratified `data.val_fraction` of train is held out. The option is typed `Any`: lab.data.options
imports this module, and naming its class back would close an import circle."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import Dataset

from lab.data.augment import train_transform
from lab.data.common import DataModule, make_meta, resolve_num_classes, resolve_stats, split_indices
from lab.data.transforms import eval_transform, pil_mode
from lab.errors import ConfigError, UserError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
LAYOUT = "<root>/train/<class>/*.png|jpg|jpeg, optional <root>/val/<class>/... and <root>/test/<class>/..."
DEFAULT_SIZE = 64  # data.image_size when neither the config nor a pretrained model sets it


class ImageFolderDataset(Dataset):
    """Images read from disk on every access. `samples` is a list of (path, class index).

    An unreadable image is skipped with a warning, and the next one takes its place, up to `max_bad` times per
    process. Beyond that, or with the default 0, it raises UserError naming the file."""

    def __init__(
        self, samples: list[tuple[str, int]], transform: Callable[[Image.Image], torch.Tensor], max_bad: int = 0
    ) -> None:
        self.samples = samples
        self.transform = transform
        self.max_bad, self.bad = max_bad, 0

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        try:
            with Image.open(path) as img:
                return self.transform(img), label
        except (OSError, ValueError, SyntaxError) as err:  # what PIL raises for truncated or non-image files
            self.bad += 1
            if self.bad > self.max_bad:
                raise UserError(
                    f"cannot read image {path}: {err} ({self.bad - 1} unreadable image(s) skipped before it; "
                    "remove or replace it, or set data.max_bad_samples=N to skip up to N)"
                ) from None
            log.warning("skipped unreadable image %s (%d of data.max_bad_samples=%d)", path, self.bad, self.max_bad)
            return self[(index + 1) % len(self.samples)]


def _class_dirs(split_dir: Path) -> list[str]:
    # Hidden folders (.ipynb_checkpoints and similar clutter) are never classes
    return sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def _scan(split_dir: Path, class_names: list[str], train: bool = False) -> list[tuple[str, int]]:
    """Return the (path, class index) samples of a split. Val's and test's class folders must match train's, so
    label indices agree."""
    names = class_names if train else _class_dirs(split_dir)
    if names != class_names:
        raise ConfigError(
            f"{split_dir.name}/ has classes {names} but train/ has {class_names}; "
            "every split needs the same class sub-folders (an empty folder is fine)"
        )
    samples = []
    for label, name in enumerate(class_names):
        files = sorted(
            p
            for p in (split_dir / name).iterdir()
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
        )
        if train and not files:  # a class the model never sees in training cannot be learned
            raise ConfigError(f"no .png/.jpg/.jpeg images in {split_dir / name}; remove the folder or add images")
        samples += [(str(p), label) for p in files]
    if not samples:
        raise ConfigError(f"no .png/.jpg/.jpeg images under {split_dir}; expected layout {LAYOUT}")
    return samples


def folder_splits(cfg: Any, root: Path) -> tuple[list[str], dict[str, list[tuple[str, int]] | None]]:
    """Return (class names, {split: [(path, class index)]}) of the image folder `root`; test is None if absent.
    data=image_folder and a prepare that converts such a folder both read this, so they split alike."""
    if not (root / "train").is_dir():
        raise ConfigError(f"{root / 'train'} does not exist; expected layout {LAYOUT}")
    pil_mode(cfg.in_channels)  # fail on e.g. in_channels=2 before scanning anything
    class_names = _class_dirs(root / "train")
    if len(class_names) < 2:
        raise ConfigError(
            f"found {len(class_names)} class folder(s) in {root / 'train'}; need at least 2 (expected layout {LAYOUT})"
        )
    train_samples = _scan(root / "train", class_names, train=True)
    if (root / "val").is_dir():
        val_samples = _scan(root / "val", class_names)
    else:  # stratified hold-out of train/, the same files for every run and its eval (data.split_seed)
        labels = torch.tensor([label for _, label in train_samples])
        kept, held = split_indices(labels, cfg.val_fraction, cfg.split_seed)
        train_samples, val_samples = [train_samples[i] for i in kept], [train_samples[i] for i in held]
    test_samples = _scan(root / "test", class_names) if (root / "test").is_dir() else None
    return class_names, {"train": train_samples, "val": val_samples, "test": test_samples}


def image_pipeline(
    cfg: Any, class_names: list[str]
) -> tuple[dict, Callable[[Image.Image], torch.Tensor], Callable[[Image.Image], torch.Tensor]]:
    """Return (meta, training transform, evaluation transform) for image files of `class_names`, as cfg says."""
    c, s = cfg.in_channels, cfg.image_size or DEFAULT_SIZE
    mean, std = resolve_stats(cfg, c, [0.5] * c, [0.5] * c)
    meta = make_meta(len(class_names), c, s, mean, std, class_names, cfg.crop_pct, cfg.interpolation)
    evaluate = eval_transform(meta)  # the same object inference uses, so val/test match it exactly
    train_tf = train_transform(cfg, c, s, mean, std, meta["interpolation"]) if cfg.augment else evaluate
    return meta, train_tf, evaluate


def build_image_folder(cfg: Any) -> DataModule:
    root = Path(cfg.root).expanduser()
    try:
        class_names, samples = folder_splits(cfg, root)
    except ConfigError as err:
        raise ConfigError(f"data.root={cfg.root}: {err}") from None
    resolve_num_classes(cfg, f"image_folder {root}", len(class_names))
    meta, train_tf, evaluate = image_pipeline(cfg, class_names)
    train, val, test = samples["train"], samples["val"], samples["test"]
    assert train is not None and val is not None  # folder_splits always has them (only test may be None)
    return DataModule(
        train=ImageFolderDataset(train, train_tf, cfg.max_bad_samples),
        val=ImageFolderDataset(val, evaluate, cfg.max_bad_samples),
        test=None if test is None else ImageFolderDataset(test, evaluate, cfg.max_bad_samples),
        meta=meta,
    )
