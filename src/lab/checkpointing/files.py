"""Checkpoint files: atomic writes and `weights_only` reads.

Format (README, "What a run leaves behind"): {format_version, model, optimizer, scheduler, scaler, progress, rng,
config, data_meta, provenance}. Only tensors and plain containers, so `torch.load(path, weights_only=True)` reads
it without running pickled code.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from lab.errors import UserError
from lab.files import atomic_path

FORMAT_VERSION = 1


def save(path: str | Path, payload: dict[str, Any]) -> None:
    """Write to a temp file then rename: a crash mid-write never leaves a truncated checkpoint behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save({"format_version": FORMAT_VERSION, **payload}, tmp)


def copy(src: str | Path, dst: str | Path) -> None:
    """Atomic copy (e.g. last.pt -> best.pt)."""
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def require_file(path: str | Path | None) -> None:
    """A missing checkpoint path is a user mistake: say which path and what to pass instead."""
    if path is not None and not Path(path).is_file():
        raise UserError(f"checkpoint not found: {path} (pass ckpt_path=<run dir>/checkpoints/last.pt)")


def read(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    require_file(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
        reason = next((line for line in lines if "Unpickler error" in line), lines[0])
        raise UserError(
            f"cannot read checkpoint {path}: {reason} (corrupt, or not a checkpoint of this template?)"
        ) from err
    if not isinstance(ckpt, dict) or ckpt.get("format_version") != FORMAT_VERSION or "model" not in ckpt:
        raise UserError(f"{path} is not a format-{FORMAT_VERSION} checkpoint of this template")
    return ckpt
