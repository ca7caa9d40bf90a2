"""Read what `input=` names into model-ready tensors, with one reader per kind of file, chosen by its suffix.

| suffix | reader | one input per |
|---|---|---|
| `.png` `.jpg` `.jpeg` | `read_image` | file: L/RGB as the model's channels, [0, 1], data_meta's `mean`/`std` |
| `.npy` | `read_npy` | row of the array (any numeric dtype) |
| `.pt` | `read_pt` | row of the tensor (`torch.save`d, read with `weights_only=True`) |
| `.csv` | `read_csv` | row: a table model's feature columns by name, else every column, numeric |

What an array (`.npy`/`.pt`) means depends on the model. For an image model (data_meta has `mean`/`std`), uint8
(N, C, H, W) is raw pixels, preprocessed exactly like image files; any other dtype is already-normalised inputs,
taken as float32. For a table model it is (N, features) rows, standardised like the CSV. For any other model it is
(N, *input_shape) inputs: float32 whatever the stored dtype, or int64 for token ids (data_meta has `vocab_size`).
One sample without the N axis is fine too.

`resize` is the one choice about image sizes. True, for a model that needs the training size (e.g. a classifier
with a flattening head), resizes every image to data_meta's `image_size` and refuses float arrays of another size.
False, for a fully convolutional model (the task's `dynamic_dims` hold H and W), keeps each input's own size.
Either way `Inputs.sizes[name]` is the input's original (H, W), so a dense task can write its mask at that size.

A folder is searched recursively for images, and a glob matches images. An unreadable image is reported and
skipped (`Inputs.skipped`); the others are still predicted.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from lab.data.folder import IMAGE_SUFFIXES
from lab.data.transforms import eval_transform
from lab.errors import ConfigError, UserError

log = logging.getLogger(__name__)

TENSOR_SUFFIXES = (".npy", ".pt")
TABLE_SUFFIXES = (".csv",)
_ACCEPTED = (
    "an image (.png/.jpg/.jpeg), a folder of images, a glob like 'imgs/*.png', a .npy/.pt tensor file or .csv rows"
)

# (name, model-ready tensor of one input, its original spatial size or None)
Item = tuple[str, torch.Tensor, "tuple[int, ...] | None"]
Reader = Callable[[Path, Mapping[str, Any], bool], Iterator[Item]]


def keeps_size(meta: Mapping[str, Any], dynamic_dims: Any) -> bool:
    """Check whether the model takes images at any size: every axis after the channels of its input is dynamic.
    Then infer keeps each image's own size instead of resizing it."""
    spatial = range(2, 1 + len(meta.get("input_shape", ())))
    return len(spatial) > 0 and all(d in dynamic_dims for d in spatial)


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def discover(spec: str, suffixes: Iterable[str] = ()) -> list[Path]:
    """Return the files `input=` names, sorted: `suffixes` are a model's own, beside READERS'. Raises UserError when
    it names nothing usable."""
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() in READERS or path.suffix.lower() in suffixes:
            return [path]
        raise UserError(f"input={spec} is not {_ACCEPTED}")
    if path.is_dir():
        # Hidden folders (.ipynb_checkpoints, ...) hold copies, not inputs
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


def image_transform(meta: Mapping[str, Any], resize: bool) -> Callable[[Image.Image], torch.Tensor]:
    """Return validation's own PIL-to-tensor transform (`lab.data.transforms.eval_transform`), set by data_meta.
    It gives normalised float32 (C, H, W). With `resize=False` the image keeps its size."""
    if "mean" not in meta or "in_channels" not in meta:
        raise UserError("this model was not trained on images (no mean/in_channels in its data_meta)")
    return eval_transform(meta, resize=resize and "image_size" in meta)


def read_image(path: Path, meta: Mapping[str, Any], resize: bool) -> Iterator[Item]:
    """Read one image file. It is decoded here, so a truncated file raises OSError now, which the caller skips."""
    if "feature_names" in meta:  # a table model, whose reader names the files it takes
        yield from _table_rows(path, meta)
        return
    with Image.open(path) as image:
        size = (image.height, image.width)
        tensor = image_transform(meta, resize)(image)
    yield str(path), tensor, size


def _load(path: Path) -> Any:
    try:
        if path.suffix.lower() == ".npy":
            return np.load(path, allow_pickle=False)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"input={path}: cannot read the tensor file ({str(err).splitlines()[0]})") from err


def _table_rows(path: Path, meta: Mapping[str, Any]) -> Iterator[Item]:
    """Read a table model's rows: the training features, standardised (`rows`)."""
    from lab.inference.rows import read_rows

    for name, row in read_rows(str(path), meta):
        yield name, row, None


def read_npy(path: Path, meta: Mapping[str, Any], resize: bool) -> Iterator[Item]:
    """Read a .npy array of inputs, of any numeric dtype. The module docstring says what it means per model."""
    if "feature_names" in meta:
        yield from _table_rows(path, meta)
    else:
        yield from _array_items(path, _load(path), meta, resize)


def read_pt(path: Path, meta: Mapping[str, Any], resize: bool) -> Iterator[Item]:
    """Read a `torch.save`d tensor of inputs, with weights_only=True."""
    if "feature_names" in meta:
        yield from _table_rows(path, meta)
    else:
        yield from _array_items(path, _load(path), meta, resize)


def read_csv(path: Path, meta: Mapping[str, Any], resize: bool) -> Iterator[Item]:
    """Read CSV rows: a table model's feature columns by name (standardised), else every column as one input."""
    if "feature_names" in meta:
        yield from _table_rows(path, meta)
        return
    from lab.data.tabular import INPUT_ENCODING_FIX, numeric_columns
    from lab.data.tabular import read_csv as read_table

    try:
        header, rows = read_table(path, fix=INPUT_ENCODING_FIX)
        matrix = numeric_columns(rows, header, header, path)
    except ConfigError as err:
        raise UserError(f"input={path}: {err}") from err
    yield from _array_items(path, matrix, meta, resize)


# suffix -> reader, the one place that decides how a file becomes inputs
READERS: dict[str, Reader] = {
    **dict.fromkeys(IMAGE_SUFFIXES, read_image),
    ".npy": read_npy,
    ".pt": read_pt,
    ".csv": read_csv,
}


def _array_items(path: Path, data: Any, meta: Mapping[str, Any], resize: bool) -> Iterator[Item]:
    if isinstance(data, np.ndarray):
        if not (np.issubdtype(data.dtype, np.number) or data.dtype == np.bool_):
            raise UserError(f"input={path} holds {data.dtype} values; give numbers")
        data = torch.from_numpy(data)
    if not isinstance(data, torch.Tensor):
        raise UserError(f"input={path} holds a {type(data).__name__}, not a tensor of inputs")
    size: tuple[int, ...] | None
    if "mean" in meta and "in_channels" in meta:
        batch = _image_array(path, data, meta, resize)
        size = (int(data.shape[-2]), int(data.shape[-1]))  # as stored, before any resize
    else:
        batch = _model_array(path, data, meta, resize)
        size = tuple(int(d) for d in batch.shape[2:]) or None
    for index, row in enumerate(batch):
        yield f"{path}[{index}]", row, size


def _image_array(path: Path, data: torch.Tensor, meta: Mapping[str, Any], resize: bool) -> torch.Tensor:
    """Return (N, C, H, W) inputs of an image model: uint8 pixels preprocessed like image files, else floats."""
    data = data.unsqueeze(0) if data.ndim == 3 else data
    c, size = int(meta["in_channels"]), int(meta.get("image_size", 0))
    if data.ndim != 4 or data.shape[1] != c:
        raise UserError(
            f"input={path} has shape {tuple(data.shape)}; expected (N, {c}, H, W) images for this model "
            f"({c} channel(s))"
        )
    if data.dtype == torch.uint8:  # raw pixels get exactly the image files' preprocessing
        transform = image_transform(meta, resize)
        pages = data.permute(0, 2, 3, 1).numpy()  # (H, W) uint8 -> mode L, (H, W, 3) -> RGB
        return torch.stack([transform(Image.fromarray(p[..., 0] if c == 1 else p)) for p in pages])
    if data.dtype == torch.bool or (resize and tuple(data.shape[2:]) != (size, size)):
        raise UserError(
            f"input={path} has shape {tuple(data.shape)} and dtype {data.dtype}; give uint8 pixels (N, {c}, H, W) "
            f"or normalized float inputs (N, {c}, {size}, {size})"
        )
    return data.float()


def _model_array(path: Path, data: torch.Tensor, meta: Mapping[str, Any], resize: bool) -> torch.Tensor:
    """Return (N, *input_shape) model inputs: float32 whatever the stored dtype, int64 for token ids.
    With `resize` off, only the number of axes and the channel axis must match; other axes take any size."""
    shape = [int(d) for d in meta["input_shape"]]
    wanted = f"(N, {', '.join(map(str, shape))})"
    data = data.unsqueeze(0) if data.ndim == len(shape) else data
    fits = data.ndim == len(shape) + 1 and (
        list(data.shape[1:]) == shape or (not resize and len(shape) > 1 and data.shape[1] == shape[0])
    )
    if not fits:
        raise UserError(f"input={path} has shape {tuple(data.shape)}; the model takes {wanted}")
    if "vocab_size" in meta:
        if data.is_floating_point():
            raise UserError(f"input={path} holds {data.dtype} values; this model takes integer token ids")
        return data.long()
    return data.float()


@dataclass
class Inputs:
    """Iterate (name, model-ready tensor) over the inputs of `files`, each read by its suffix's reader.
    `sizes[name]` is an input's original spatial size (H, W), when it has one. Unreadable images land in `skipped`,
    and the others are still read."""

    files: list[Path]
    meta: Mapping[str, Any]
    resize: bool = True
    skipped: list[dict[str, str]] = field(default_factory=list)
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    readers: Mapping[str, Reader] = field(default_factory=dict)  # a model's own (ModelConfig.input_readers)

    @classmethod
    def read(
        cls, spec: str, meta: Mapping[str, Any], resize: bool = True, readers: Mapping[str, Reader] | None = None
    ) -> Inputs:
        return cls(discover(spec, readers or ()), meta, resize, readers=readers or {})

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for path in self.files:
            reader = self.readers.get(path.suffix.lower()) or READERS.get(path.suffix.lower())
            if reader is None:
                raise UserError(f"input={path} is not {_ACCEPTED}")
            try:
                for name, tensor, size in reader(path, self.meta, self.resize):
                    if size is not None:
                        self.sizes[name] = size
                    yield name, tensor
            # OSError covers unidentified and truncated images. Some PIL decoders raise SyntaxError on bad chunks
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                if reader is not read_image:
                    raise
                reason = str(err).splitlines()[0] if str(err) else type(err).__name__
                log.warning("skipped %s: cannot read it as an image (%s)", path, reason)
                self.skipped.append({"path": str(path), "error": reason})
