"""What `input=` names, turned into model-ready tensors with the evaluation preprocessing.

Images (a file, a folder searched recursively, or a glob) go through `lab.data.eval_transform(meta)`, the
transform validation used in training. Tensor files (.npy / .pt) are either raw uint8 pixels (N, C, H, W),
preprocessed like images, or float arrays taken as already-normalized model inputs (what a DataLoader yields).
An image that cannot be read is reported and skipped; the others are still predicted.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from lab.data import eval_transform
from lab.data.folder import IMAGE_SUFFIXES
from lab.errors import UserError

log = logging.getLogger(__name__)

TENSOR_SUFFIXES = (".npy", ".pt")
_ACCEPTED = "an image (.png/.jpg/.jpeg), a folder of images, a glob like 'imgs/*.png', or a .npy/.pt tensor file"


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def discover(spec: str) -> list[Path]:
    """The files `input=` names, sorted; a UserError when it names nothing usable."""
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() in IMAGE_SUFFIXES + TENSOR_SUFFIXES:
            return [path]
        raise UserError(f"input={spec} is not {_ACCEPTED}")
    if path.is_dir():
        # hidden folders (.ipynb_checkpoints, ...) hold copies, not inputs
        files = sorted(
            p for p in path.rglob("*") if _is_image(p) and not any(s.startswith(".") for s in p.relative_to(path).parts)
        )
        if not files:
            raise UserError(f"input={spec}: no .png/.jpg/.jpeg images in this folder or below it")
        return files
    if glob.has_magic(spec):
        files = sorted(p for p in map(Path, glob.glob(os.path.expanduser(spec), recursive=True)) if _is_image(p))
        if not files:
            raise UserError(f"input={spec}: the pattern matches no .png/.jpg/.jpeg image")
        return files
    raise UserError(f"input={spec} does not exist; give {_ACCEPTED}")


@dataclass
class Samples:
    """Iterates (name, normalized (C, H, W) tensor) over the files; unreadable ones land in `skipped`."""

    files: list[Path]
    meta: Mapping[str, Any]
    skipped: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.transform = eval_transform(self.meta)

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for path in self.files:
            if path.suffix.lower() in TENSOR_SUFFIXES:
                batch = load_tensor_file(path, self.meta, self.transform)
                for index, row in enumerate(batch):
                    yield f"{path}[{index}]", row
                continue
            try:
                with Image.open(path) as image:
                    tensor = self.transform(image)  # converting decodes the pixels: truncated files fail here
            # OSError covers unidentified and truncated files; some PIL decoders raise SyntaxError on bad chunks
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                reason = str(err).splitlines()[0] if str(err) else type(err).__name__
                log.warning("skipped %s: cannot read it as an image (%s)", path, reason)
                self.skipped.append({"path": str(path), "error": reason})
                continue
            yield str(path), tensor


def load_tensor_file(path: Path, meta: Mapping[str, Any], transform: Any) -> torch.Tensor:
    """(N, C, H, W) model inputs from a .npy / .pt file (a single (C, H, W) sample is fine too)."""
    try:
        if path.suffix.lower() == ".npy":
            data = torch.from_numpy(np.load(path, allow_pickle=False))
        else:
            data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"input={path}: cannot read the tensor file ({str(err).splitlines()[0]})") from err
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if not isinstance(data, torch.Tensor):
        raise UserError(f"input={path} holds a {type(data).__name__}, not a tensor of images (N, C, H, W)")
    if data.ndim == 3:
        data = data.unsqueeze(0)
    c, size = int(meta["in_channels"]), int(meta["image_size"])
    if data.ndim != 4 or data.shape[1] != c:
        raise UserError(
            f"input={path} has shape {tuple(data.shape)}; expected (N, {c}, H, W) images for this model "
            f"({c} channel(s))"
        )
    if data.dtype == torch.uint8:  # raw pixels: exactly the image path's preprocessing
        pages = data.permute(0, 2, 3, 1).numpy()  # (H, W) uint8 -> mode L, (H, W, 3) -> RGB
        return torch.stack([transform(Image.fromarray(p[..., 0] if c == 1 else p)) for p in pages])
    if not data.is_floating_point() or tuple(data.shape[2:]) != (size, size):
        raise UserError(
            f"input={path} has shape {tuple(data.shape)} and dtype {data.dtype}; give uint8 pixels (N, {c}, H, W) "
            f"or normalized float inputs (N, {c}, {size}, {size})"
        )
    return data.float()


def load_array(spec: str, meta: Mapping[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """(name, row) for each row of a .npy / .pt array of model inputs, (N, *input_shape) as the model takes them."""
    path = Path(spec).expanduser()
    shape = [int(d) for d in meta["input_shape"]]
    wanted = f"(N, {', '.join(map(str, shape))})"
    if not path.is_file() or path.suffix.lower() not in TENSOR_SUFFIXES:
        raise UserError(f"input={spec}: give a .npy or .pt array of model inputs, shape {wanted}")
    try:
        data = (
            np.load(path, allow_pickle=False) if path.suffix.lower() == ".npy" else torch.load(path, weights_only=True)
        )
    except Exception as err:
        raise UserError(f"input={spec}: cannot read the array ({str(err).splitlines()[0]})") from err
    array = torch.as_tensor(data)
    array = array.unsqueeze(0) if list(array.shape) == shape else array  # one sample
    if list(array.shape[1:]) != shape:
        raise UserError(f"input={spec} has shape {tuple(array.shape)}; the model takes {wanted}")
    array = array.float() if array.is_floating_point() else array
    return [(f"{path}[{i}]", row) for i, row in enumerate(array)]
