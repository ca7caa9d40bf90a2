"""Checkpoints: atomic writes, `weights_only` loads, wrapper-free state dicts, RNG capture.

Format (DESIGN.md): {format_version, model, optimizer, scheduler, scaler, progress, rng, config, data_meta, provenance}.
Only tensors and plain containers, so `torch.load(path, weights_only=True)` loads it without running pickled code.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from lab.errors import UserError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module under DDP / torch.compile wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def strip_wrapper_prefixes(state: dict[str, Any]) -> dict[str, Any]:
    """Accept state dicts saved from wrapped models (keys like `module._orig_mod.fc.weight`)."""
    cleaned = {}
    for key, value in state.items():
        while key.startswith(_WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        cleaned[key] = value
    return cleaned


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """The host RNG streams, plus the CUDA generator of the run's own GPU (`cuda` is None off CUDA). One device's
    state, not every visible GPU's: a resume in an allocation that sees fewer GPUs must still find its own."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    on_cuda = device is not None and device.type == "cuda"
    return {
        "python": [version, list(internal), gauss_next],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if on_cuda else None,
    }


def restore_rng(state: dict[str, Any], device: torch.device | None = None) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if isinstance(cuda, list):  # checkpoints of earlier versions: one state per GPU that was visible then
        index = (device.index or 0) if device is not None else 0
        cuda = cuda[index] if index < len(cuda) else None
    if cuda is not None and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda, device)


def save(path: str | Path, payload: dict[str, Any]) -> None:
    """Write to a temp file then rename: a crash mid-write never leaves a truncated checkpoint behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        torch.save({"format_version": FORMAT_VERSION, **payload}, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial file (disk full...) would only take space; the old one is intact
        raise


def copy(src: str | Path, dst: str | Path) -> None:
    """Atomic copy (e.g. last.pt -> best.pt)."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.tmp")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def require_file(path: str | Path | None) -> None:
    """A missing checkpoint path is a user mistake: say which path and what to pass instead."""
    if path is not None and not Path(path).is_file():
        raise UserError(f"checkpoint not found: {path} (pass ckpt_path=<run dir>/checkpoints/last.pt)")


def load(path: str | Path) -> dict[str, Any]:
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


def load_model_state(model: nn.Module, state: dict[str, Any], strict: bool = True) -> None:
    """Load weights, tolerating wrapper prefixes; name the missing/unexpected/misshapen keys instead of a bare error."""
    target = unwrap(model)
    state = strip_wrapper_prefixes(state)
    own = target.state_dict()
    # load_state_dict raises a bare RuntimeError on a shape mismatch even with strict=False: set those keys aside.
    mismatched = {
        key: (tuple(value.shape), tuple(own[key].shape))
        for key, value in state.items()
        if isinstance(value, torch.Tensor) and isinstance(own.get(key), torch.Tensor) and value.shape != own[key].shape
    }
    result = target.load_state_dict({k: v for k, v in state.items() if k not in mismatched}, strict=False)
    missing = [key for key in result.missing_keys if key not in mismatched]
    if missing or result.unexpected_keys or mismatched:
        detail = f"missing keys {missing[:5]}, unexpected keys {result.unexpected_keys[:5]}"
        if mismatched:
            detail += ", shape mismatches " + ", ".join(
                f"{key}: checkpoint {saved} vs model {wanted}" for key, (saved, wanted) in list(mismatched.items())[:5]
            )
        if strict:
            raise UserError(f"checkpoint does not fit the model ({detail}); was it trained with another model config?")
        log.warning("loaded non-strictly, skipped: %s", detail)
