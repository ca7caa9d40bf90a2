"""Image to normalized tensor transforms, and cheap batched augmentation for in-memory tensors.

Transforms are classes, not closures, so DataLoader workers can pickle them under spawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from lab.errors import ConfigError


def normalize_(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Normalize (C,H,W) or (N,C,H,W) float images in [0,1] in place, with per-channel `mean`/`std` of shape (C,).
    In place, for a batch the caller owns: on CPU each new tensor is fresh memory to fault in."""
    return x.sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))


def pil_mode(in_channels: int) -> str:
    if in_channels == 1:
        return "L"
    if in_channels == 3:
        return "RGB"
    raise ConfigError(f"data.in_channels={in_channels} cannot be read from image files; use 1 (grayscale) or 3 (RGB)")


def to_mode(img: Image.Image, mode: str) -> Image.Image:
    """Convert to L or RGB. 16-bit grayscale is rescaled first, since PIL's own conversion clips it at 255."""
    if img.mode.startswith("I;16"):
        img = Image.fromarray((np.asarray(img).astype(np.float32) / 257.0).round().astype(np.uint8), mode="L")
    return img.convert(mode)


class ToNormalizedTensor:
    """Turn an 8-bit PIL image already in the right mode and size into a normalized float32 (C,H,W) tensor."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor(list(mean), dtype=torch.float32)
        self.std = torch.tensor(list(std), dtype=torch.float32)

    def __call__(self, img: Image.Image) -> torch.Tensor:
        array = np.asarray(img, dtype=np.uint8)
        if array.ndim == 2:
            array = array[:, :, None]
        x = torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255.0)
        return normalize_(x, self.mean, self.std)


class EvalTransform:
    """Turn any PIL image into the normalized float32 (C, image_size, image_size) tensor the model expects.
    The shorter side is resized to image_size / crop_pct, then the centre square is cut, so non-square images are
    not distorted. crop_pct < 1 keeps a margin, as pretrained models were evaluated. `crop_pct=None` squashes to a
    square, as checkpoints from before crop_pct were trained. `image_size=None` keeps the image's own size, for a
    fully convolutional model."""

    def __init__(
        self,
        in_channels: int,
        image_size: int | None,
        mean: Sequence[float],
        std: Sequence[float],
        crop_pct: float | None = 1.0,
        interpolation: str = "bilinear",
    ) -> None:
        self.mode = pil_mode(in_channels)
        self.size, self.crop_pct = image_size, crop_pct
        self.resample = Image.Resampling[interpolation.upper()]
        self.to_tensor = ToNormalizedTensor(mean, std)

    def __call__(self, img: Image.Image) -> torch.Tensor:
        img = to_mode(img, self.mode)
        if self.size is None:
            return self.to_tensor(img)
        if self.crop_pct is None:
            if img.size != (self.size, self.size):
                img = img.resize((self.size, self.size), self.resample)
            return self.to_tensor(img)
        width, height = img.size
        shorter = math.floor(self.size / self.crop_pct)
        scale = shorter / min(width, height)
        resized = (max(shorter, round(width * scale)), max(shorter, round(height * scale)))
        if resized != img.size:
            img = img.resize(resized, self.resample)
        left, top = (resized[0] - self.size) // 2, (resized[1] - self.size) // 2
        if (left, top) != (0, 0) or resized != (self.size, self.size):
            img = img.crop((left, top, left + self.size, top + self.size))
        return self.to_tensor(img)


def eval_transform(meta: Mapping[str, Any], resize: bool = True) -> EvalTransform:
    """The one definition of what the model expects, for a dataset's `meta`: image_folder's val/test items, and
    inference with the `meta` a checkpoint saved. `resize=False` keeps each image's size (fully convolutional)."""
    return EvalTransform(
        meta["in_channels"],
        int(meta["image_size"]) if resize else None,
        meta["mean"],
        meta["std"],
        meta.get("crop_pct"),  # absent in checkpoints from before crop_pct, trained on squashed images
        meta.get("interpolation", "bilinear"),
    )


def keeps_size(meta: Mapping[str, Any], dynamic_dims: Any) -> bool:
    """Check whether the model takes images at any size: every axis after the channels of its input is dynamic.
    Then infer keeps each image's own size instead of resizing it."""
    spatial = range(2, 1 + len(meta.get("input_shape", ())))
    return len(spatial) > 0 and all(d in dynamic_dims for d in spatial)


class TrainImageTransform:
    """Lightly augment user image folders: a mild random resized crop and a horizontal flip."""

    def __init__(
        self,
        in_channels: int,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        interpolation: str = "bilinear",
    ) -> None:
        from torchvision.transforms import v2  # imported lazily, as torchvision is slow to import

        self.mode = pil_mode(in_channels)
        mode = v2.InterpolationMode(interpolation)
        # scale >= 0.7 keeps most of the object in view. The usual ImageNet 0.08 is too harsh for small data
        self.augment = v2.Compose(
            [
                v2.RandomResizedCrop(image_size, scale=(0.7, 1.0), interpolation=mode, antialias=True),
                v2.RandomHorizontalFlip(),
            ]
        )
        self.to_tensor = ToNormalizedTensor(mean, std)

    def __call__(self, img: Image.Image) -> torch.Tensor:
        return self.to_tensor(self.augment(to_mode(img, self.mode)))


class RandomShiftFlip:
    """Randomly shift each sample of a batch (crop after zero padding), optionally with a horizontal flip.

    It works on (N,C,H,W) images in [0,1] before normalization, so padding is black, as in the usual CIFAR recipe
    (RandomCrop(32, padding=4) + RandomHorizontalFlip). It draws every sample's offsets at once on the batch's
    device. data.loader=device passes its own `generator`; None means the global RNG, as in DataLoader workers.
    """

    def __init__(self, padding: int, flip: bool) -> None:
        self.padding = padding
        self.flip = flip

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        n, c, h, w = x.shape
        p = self.padding
        on: dict[str, Any] = {"device": x.device}
        if p == 0 and not self.flip:
            return x
        # (N,H) source row of each output row; (N,W) source column of each output column
        rows, cols = torch.arange(h, **on).expand(n, h), torch.arange(w, **on).expand(n, w)
        if p > 0:
            x = F.pad(x, (p, p, p, p))
            rows = rows + torch.randint(0, 2 * p + 1, (n, 1), generator=generator, **on)
            cols = cols + torch.randint(0, 2 * p + 1, (n, 1), generator=generator, **on)
        if self.flip:  # a mirrored crop reads its columns right to left, so no separate flip pass
            flipped = torch.rand(n, generator=generator, **on) < 0.5
            cols = torch.where(flipped.view(n, 1), cols.flip(-1), cols)
        # One gather over flattened pixels, several times faster than indexing with four broadcast index tensors
        pixels = (rows.view(n, 1, h, 1) * (w + 2 * p) + cols.view(n, 1, 1, w)).view(n, 1, h * w)
        return x.reshape(n, c, -1).gather(2, pixels.expand(n, c, h * w)).view(n, c, h, w)
