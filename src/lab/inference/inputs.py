"""Read what `input=` names into model-ready tensors, with one reader per kind of file, chosen by its suffix
(`READERS`: images, `.npy`, `.pt`, `.csv`; a table model's files all go to `_table_rows`).

What an array (`.npy`/`.pt`) means depends on the model. For an image model (data_meta has `mean`/`std`), uint8
(N, C, H, W) is raw pixels, preprocessed exactly like image files; any other dtype is already-normalised inputs,
taken as float32. For any other model it is (N, *input_shape) inputs: float32 whatever the stored dtype, or int64
for token ids (data_meta has `vocab_size`). One sample without the N axis is fine too.

`resize` True (a model that needs the training size) resizes every image to data_meta's `image_size` and refuses
float arrays of another size; False (`dynamic_dims` hold H and W) keeps each input's own size. Either way
`Inputs.sizes[name]` is the input's original (H, W), so a dense task can write its mask at that size. An array's
axes named in `Inputs.dynamic_dims` (the task's, or an export's) take any size too: a sequence model's time axis.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from lab.data.folder import IMAGE_SUFFIXES
from lab.data.transforms import eval_transform
from lab.errors import ConfigError, UnreadableInput, UserError

log = logging.getLogger(__name__)

_ACCEPTED = (
    "an image (.png/.jpg/.jpeg), a folder of images, a glob like 'imgs/*.png', a .npy/.pt tensor file or .csv rows"
)


def _accepted(own: Iterable[str]) -> str:
    """What `input=` may name: `_ACCEPTED`, with the suffixes of a model's own readers when it has some."""
    extra = sorted({suffix.lower() for suffix in own} - set(IMAGE_SUFFIXES))
    if not extra:
        return _ACCEPTED
    return (
        f"an image (.png/.jpg/.jpeg) or a {'/'.join(extra)} file, a folder of them, a glob like 'inputs/*{extra[0]}', "
        "a .npy/.pt tensor file or .csv rows"
    )


# (name, model-ready tensor of one input, its original spatial size or None)
Item = tuple[str, torch.Tensor, "tuple[int, ...] | None"]
Reader = Callable[[Path, Mapping[str, Any], bool], Iterator[Item]]


def discover(spec: str, suffixes: Iterable[str] = ()) -> list[Path]:
    """Return the files `input=` names, sorted: `suffixes` are a model's own, beside READERS'. A folder or a glob
    gives its images, and the files of a model's own suffixes. Raises UserError when it names nothing usable."""
    path, own = Path(spec).expanduser(), {suffix.lower() for suffix in suffixes}
    kinds = [*IMAGE_SUFFIXES, *sorted(own - set(IMAGE_SUFFIXES))]
    what = f"{'/'.join(kinds)} {'file' if own else 'image'}"

    def wanted(p: Path) -> bool:
        return p.is_file() and p.suffix.lower() in kinds and not p.name.startswith(".")

    if path.is_file():
        if path.suffix.lower() in READERS or path.suffix.lower() in own:
            return [path]
        raise UserError(f"input={spec} is not {_accepted(own)}")
    if path.is_dir():
        # Hidden folders (.ipynb_checkpoints, ...) hold copies, not inputs
        files = sorted(
            p for p in path.rglob("*") if wanted(p) and not any(s.startswith(".") for s in p.relative_to(path).parts)
        )
        if not files:
            raise UserError(f"input={spec}: no {what}s in this folder or below it")
        return files
    if glob.has_magic(spec):
        files = sorted(p for p in map(Path, glob.glob(os.path.expanduser(spec), recursive=True)) if wanted(p))
        if not files:
            raise UserError(f"input={spec}: the pattern matches no {what}")
        return files
    raise UserError(f"input={spec} does not exist; give {_accepted(own)}")


def image_transform(meta: Mapping[str, Any], resize: bool) -> Callable[[Image.Image], torch.Tensor]:
    """Return validation's own PIL-to-tensor transform (`lab.data.transforms.eval_transform`), set by data_meta.
    It gives normalised float32 (C, H, W). With `resize=False` the image keeps its size."""
    if "mean" not in meta or "in_channels" not in meta:
        raise UserError("this model was not trained on images (no mean/in_channels in its data_meta)")
    return eval_transform(meta, resize=resize and "image_size" in meta)


def read_image(path: Path, meta: Mapping[str, Any], resize: bool) -> Iterator[Item]:
    """Read one image file. It is decoded here, so a truncated file raises OSError now, which the caller skips."""
    with Image.open(path) as image:
        size = (image.height, image.width)
        tensor = image_transform(meta, resize)(image)
    yield str(path), tensor, size


def _load(path: Path, what: str) -> Any:
    """Read a .npy array (no pickles) or a `torch.save`d tensor (weights_only=True)."""
    try:
        if path.suffix.lower() == ".npy":
            return np.load(path, allow_pickle=False)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"input={path}: cannot read {what} ({str(err).splitlines()[0]})") from err


def read_tensor(path: Path, meta: Mapping[str, Any], resize: bool, dims: Sequence[int] = (0,)) -> Iterator[Item]:
    """Read a .npy array of inputs (any numeric dtype) or a `torch.save`d tensor; `dims` take any size."""
    yield from _array_items(path, _load(path, "the tensor file"), meta, resize, dims)


def read_csv(path: Path, meta: Mapping[str, Any], resize: bool, dims: Sequence[int] = (0,)) -> Iterator[Item]:
    """Read CSV rows, every column as one input (a table model's rows: `_table_rows`); `dims` take any size."""
    from lab.data.tabular import INPUT_ENCODING_FIX, numeric_columns
    from lab.data.tabular import read_csv as read_table

    try:
        header, rows = read_table(path, fix=INPUT_ENCODING_FIX)
        matrix = numeric_columns(rows, header, header, path)
    except ConfigError as err:
        raise UserError(f"input={path}: {err}") from err
    yield from _array_items(path, matrix, meta, resize, dims)


def _table_rows(path: Path, meta: Mapping[str, Any], resize: bool) -> Iterator[Item]:
    """Read a table model's rows: a .csv with the training features as named columns, or a .npy/.pt array (N, F)
    in the training column order, standardised with data_meta's statistics."""
    names = list(meta["feature_names"])
    if not path.is_file():
        raise UserError(
            f"input={path} does not exist; give a .csv with columns {names} or a .npy of shape (N, {len(names)})"
        )
    if path.suffix.lower() == ".csv":
        from lab.data.tabular import INPUT_ENCODING_FIX, numeric_columns
        from lab.data.tabular import read_csv as read_table

        header, rows = read_table(path, fix=INPUT_ENCODING_FIX)
        missing = [n for n in names if n not in header]
        if missing:
            raise UserError(f"input={path} lacks the feature column(s) {missing} the model was trained on")
        matrix = numeric_columns(rows, header, names, path)
    elif path.suffix.lower() in (".npy", ".pt"):
        data = _load(path, "the array")
        matrix = np.asarray(data.numpy() if isinstance(data, torch.Tensor) else data, dtype=np.float64)
        matrix = matrix[None] if matrix.ndim == 1 else matrix
        if matrix.ndim != 2 or matrix.shape[1] != len(names):
            raise UserError(
                f"input={path} has shape {tuple(np.shape(data))}; the model takes rows of {len(names)} features "
                f"({', '.join(names)}): give shape (N, {len(names)})"
            )
    else:
        raise UserError(f"input={path}: give a .csv with columns {names} or a .npy / .pt array (N, {len(names)})")
    if not np.isfinite(matrix).all():
        raise UserError(f"input={path} holds NaN or inf values; a prediction for them would mean nothing")
    x = (torch.from_numpy(matrix) - torch.tensor(meta["feature_mean"])) / torch.tensor(meta["feature_std"])
    for i, row in enumerate(x.float()):
        yield f"{path}[{i}]", row, None


# suffix -> reader, the one place that decides how a file becomes inputs
READERS: dict[str, Reader] = {
    **dict.fromkeys(IMAGE_SUFFIXES, read_image),
    ".npy": read_tensor,
    ".pt": read_tensor,
    ".csv": read_csv,
}


def _array_items(path: Path, data: Any, meta: Mapping[str, Any], resize: bool, dims: Sequence[int]) -> Iterator[Item]:
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
        batch = _model_array(path, data, meta, resize, dims)
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


def _model_array(
    path: Path, data: torch.Tensor, meta: Mapping[str, Any], resize: bool, dims: Sequence[int]
) -> torch.Tensor:
    """Return (N, *input_shape) model inputs: float32 whatever the stored dtype, int64 for token ids.
    The axes in `dims` take any size, and with `resize` off every axis after the first (the channels) does too."""
    shape = [int(d) for d in meta["input_shape"]]
    free = {d for d in dims if d > 0} | (set() if resize else set(range(2, len(shape) + 1)))
    wanted = f"(N, {', '.join('any' if d in free else str(n) for d, n in enumerate(shape, start=1))})"
    data = data.unsqueeze(0) if data.ndim == len(shape) else data
    fits = data.ndim == len(shape) + 1 and all(d in free or data.shape[d] == n for d, n in enumerate(shape, start=1))
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
    `sizes[name]` is an input's original spatial size (H, W), when it has one. Unreadable images, and files a
    model's own reader refuses with `UnreadableInput`, land in `skipped`, and the others are still read."""

    files: list[Path]
    meta: Mapping[str, Any]
    resize: bool = True
    skipped: list[dict[str, str]] = field(default_factory=list)
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    readers: Mapping[str, Reader] = field(default_factory=dict)  # a model's own (ModelConfig.input_readers)
    dynamic_dims: Sequence[int] = (0,)  # an array's axes of any size: the task's, or the export's

    @classmethod
    def read(
        cls,
        spec: str,
        meta: Mapping[str, Any],
        resize: bool = True,
        readers: Mapping[str, Reader] | None = None,
        dynamic_dims: Sequence[int] = (0,),
    ) -> Inputs:
        return cls(discover(spec, readers or ()), meta, resize, readers=readers or {}, dynamic_dims=dynamic_dims)

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for path in self.files:
            own = self.readers.get(path.suffix.lower())
            reader = own or READERS.get(path.suffix.lower())
            if reader is None:
                raise UserError(f"input={path} is not {_accepted(self.readers)}")
            if own is None and "feature_names" in self.meta:  # a table model, whose reader names the files it takes
                reader = _table_rows
            elif reader in (read_tensor, read_csv):  # arrays of another length along a dynamic axis are fine
                reader = functools.partial(reader, dims=self.dynamic_dims)
            try:
                for name, tensor, size in reader(path, self.meta, self.resize):
                    if size is not None:
                        self.sizes[name] = size
                    yield name, tensor
            except UnreadableInput as err:  # a model's own reader says so
                log.warning("skipped %s: %s", path, err)
                self.skipped.append({"path": str(path), "error": str(err)})
            # OSError covers unidentified and truncated images. Some PIL decoders raise SyntaxError on bad chunks
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                if reader is not read_image:
                    raise
                reason = str(err).splitlines()[0] if str(err) else type(err).__name__
                log.warning("skipped %s: cannot read it as an image (%s)", path, reason)
                self.skipped.append({"path": str(path), "error": reason})
