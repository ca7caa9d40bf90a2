"""Read a DCP directory (`lab.checkpointing.sharded`) without running anything a file in it names.

DCP's `.metadata` is a pickle, and plain unpickling calls whatever the file names. So we read it with an unpickler
that allows only the classes DCP writes there (its metadata dataclasses, sizes, dtypes, a path), and refuse the
file otherwise. An allow-list, rather than a format of our own, keeps the standard DCP layout that torch's own tools
read and reshard. The data files the metadata names must lie in the directory. A value DCP stores as bytes (an
optimizer's lr, betas) is unpickled by DCP with weights_only=False, so it must first load with weights_only=True.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import CheckpointException, FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from lab.errors import UserError

# every global DCP writes into `.metadata`, and nothing else; all are plain values or dataclasses that run no code
_METADATA_GLOBALS = {
    *(
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "ChunkStorageMetadata",
            "BytesStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    ),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a layout by its name
    *(("pathlib", name) for name in ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")),
}


class _NotMetadata(pickle.UnpicklingError):
    """A global that DCP never writes into `.metadata`."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)  # torch.float32, ...
        if (module, name) in _METADATA_GLOBALS or dtype:
            return super().find_class(module, name)
        raise _NotMetadata(f"{module}.{name}")


def read_metadata(directory: str | Path) -> Metadata:
    """Read a DCP directory's `.metadata` without running anything it names, and check its data files lie in
    `directory`. Raises a one-line `UserError` otherwise."""
    path = Path(directory) / ".metadata"
    fix = "use a checkpoint that scripts/train.py wrote (best.pt)"
    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except _NotMetadata as err:
        raise UserError(
            f"{path} names {err}, which DCP metadata never holds: not loaded (it could run code); {fix}"
        ) from err
    except Exception as err:
        raise UserError(f"{path} is not DCP metadata ({type(err).__name__}: {err}); {fix}") from err
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise UserError(f"{path} is not DCP metadata (it holds a {type(metadata).__name__}); {fix}")
    root = Path(directory).resolve()
    for info in metadata.storage_data.values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or not (root / name).resolve().is_relative_to(root):
            raise UserError(f"{path} names a data file outside {root} ({name!r}): not read; {fix}")
    return metadata


class Reader(FileSystemReader):
    """DCP's file reader, reading metadata through `read_metadata`. It takes no `rank`, so DCP never falls back to
    a per-rank metadata file, which this template does not write."""

    def read_metadata(self) -> Metadata:
        metadata = read_metadata(Path(self.path))
        metadata.storage_meta = metadata.storage_meta or StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class Planner(DefaultLoadPlanner):
    """DCP's planner, but a value stored as bytes must be plain data, since DCP unpickles it with weights_only=False."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        try:
            torch.load(value, weights_only=True)
        except Exception as err:
            raise UserError(
                f"a sharded checkpoint's {read_item.dest_index.fqn} is not plain data: not loaded (it could run "
                "code); use a checkpoint that scripts/train.py wrote (best.pt)"
            ) from err
        value.seek(0)
        super().load_bytes(read_item, value)


@contextmanager
def read_errors(directory: str | Path) -> Iterator[None]:
    """Turn a failed read of `directory` into a one-line `UserError`. DCP wraps what a rank raised in a
    CheckpointException, a BaseException whose text holds tracebacks. Metadata that passed the allow-list may still
    hold nonsense (a size that is not a shape) that fails deeper in."""
    try:
        yield
    except UserError:
        raise
    except (Exception, CheckpointException) as err:
        cause: BaseException = err
        if isinstance(err, CheckpointException):
            cause = next((exc for exc, _ in err.failures.values()), err)
        if isinstance(cause, UserError):  # this module's own refusal, raised inside DCP
            raise UserError(str(cause)) from err
        first = (str(cause).splitlines() or [""])[0][:200]
        raise UserError(
            f"cannot read the sharded checkpoint {directory} ({type(cause).__name__}: {first}): damaged, or not "
            "written by scripts/train.py; use another checkpoint (best.pt)"
        ) from err
