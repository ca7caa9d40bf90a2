"""Checkpoint files: atomic writes and `weights_only` reads (the format: docs/architecture.md, Checkpoint format).

Only tensors and plain containers, so `torch.load(path, weights_only=True)` reads a file without running pickled
code."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from lab.checkpointing import sharded
from lab.errors import UserError
from lab.files import atomic_path

FORMAT_VERSION = 1


def save(path: str | Path, payload: dict[str, Any]) -> None:
    """Write to a temp file, then rename, so a crash mid-write never leaves a truncated checkpoint behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a file object, not a path, so torch's C++ writer fails through Python's write. Its RuntimeError then keeps
    # the OSError (disk full, ulimit -f) as __context__, and the message can name the cause.
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save({"format_version": FORMAT_VERSION, **payload}, f)


def copy(src: str | Path, dst: str | Path) -> None:
    """Copy atomically (e.g. last.pt -> best.pt)."""
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def require_file(path: str | Path | None) -> None:
    """Check a checkpoint path the user gave is a non-empty file. If not, raise a `UserError` saying what to pass."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        inside = next((c for c in (path / "checkpoints" / "last.pt", path / "last.pt") if c.is_file()), None)
        example = inside or "<run dir>/checkpoints/last.pt"
        hint = f"pass the .pt file, e.g. ckpt_path={example}"
        raise UserError(f"ckpt_path={path} is a directory, not a checkpoint file; {hint}")
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path} (pass ckpt_path=<run dir>/checkpoints/last.pt)")
    if path.stat().st_size == 0:
        raise UserError(f"{path} is empty (0 bytes): its write never completed; use another checkpoint (best.pt)")


def read(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint of this template with `weights_only=True`, so nothing in the file can run code."""
    path = Path(path)
    require_file(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"cannot read checkpoint {path}: {_why_unreadable(err)}") from err
    if (
        not isinstance(ckpt, dict)
        or ckpt.get("format_version") != FORMAT_VERSION
        or not {"model", "shards"} & set(ckpt)
    ):
        raise UserError(f"{path} is not a format-{FORMAT_VERSION} checkpoint of this template")
    if "shards" in ckpt:
        shards = _shards_dir(path, ckpt["shards"])
        if not sharded.is_complete(shards):
            raise UserError(
                f"{path}: its sharded weights and optimizer state ({shards}) are missing or incomplete; was the "
                "checkpoints directory copied without its shards/? Use another checkpoint (best.pt)"
            )
        from lab.checkpointing import dcp_reading

        dcp_reading.read_metadata(shards)  # refuse metadata that is not DCP's here, before any run writes a file
        ckpt["shards"] = str(shards)
    return ckpt


def _shards_dir(path: Path, named: Any) -> Path:
    """Return the shard directory a checkpoint names. It is relative to the file, so a moved run dir (or a kept copy
    of `checkpoints/`) stays whole. It must lie inside the file's folder once links resolve, so a checkpoint from
    elsewhere cannot point the reader at another directory of the machine."""
    root = path.parent.resolve()
    relative = isinstance(named, str) and named != "" and not Path(named).is_absolute()
    shards = (path.parent / named).resolve() if relative else root
    if shards == root or not shards.is_relative_to(root):
        raise UserError(
            f"{path} names shards={named!r}, which is not a directory inside {root} (relative to the file, no link "
            "leading out): refused; use a checkpoint that scripts/train.py wrote"
        )
    return shards


def _why_unreadable(err: Exception) -> str:
    text = str(err)
    if "zip archive" in text or "central directory" in text:
        return "the file is truncated or damaged (an interrupted write or copy?); use another checkpoint (best.pt)"
    unsupported = next((line for line in text.splitlines() if "Unsupported global" in line), None)
    if unsupported is not None:
        name = unsupported.split("GLOBAL ", 1)[-1].split(" ", 1)[0]
        return f"it holds a pickled Python object ({name}), which is never loaded (it could run code)"
    return "not a torch checkpoint (unreadable content); was it written by scripts/train.py?"
