"""Model state dicts free of wrappers. The prefixes DDP (`module.`) and torch.compile (`_orig_mod.`) add are
never saved, and are stripped when a checkpoint of a wrapped model is loaded."""

from __future__ import annotations

import logging
from typing import Any, cast

import torch
from torch import nn

from lab.errors import UserError

log = logging.getLogger(__name__)

_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile


def unwrap(model: nn.Module) -> nn.Module:
    """Return the user's module from under DDP and torch.compile wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = cast(nn.Module, model._orig_mod)  # torch.compile's wrapper of the module
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def strip_wrapper_prefixes(state: dict[str, Any]) -> dict[str, Any]:
    """Strip wrapper prefixes from keys like `module._orig_mod.fc.weight`, so wrapped models' states load."""
    cleaned = {}
    for key, value in state.items():
        while key.startswith(_WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        cleaned[key] = value
    return cleaned


def misfit(own: dict[str, Any], state: dict[str, Any]) -> str | None:
    """Describe what keeps `state` (prefixes stripped) from loading into a model whose state dict is `own`: its
    missing, unexpected and misshapen keys. Return None when it fits."""
    mismatched = {
        key: (tuple(value.shape), tuple(own[key].shape))
        for key, value in state.items()
        if isinstance(value, torch.Tensor) and isinstance(own.get(key), torch.Tensor) and value.shape != own[key].shape
    }
    missing = [key for key in own if key not in state]
    unexpected = [key for key in state if key not in own]
    if not (missing or unexpected or mismatched):
        return None
    detail = f"missing keys {missing[:5]}, unexpected keys {unexpected[:5]}"
    if mismatched:
        detail += ", shape mismatches " + ", ".join(
            f"{key}: checkpoint {saved} vs model {wanted}" for key, (saved, wanted) in list(mismatched.items())[:5]
        )
    return detail


def load_model_state(model: nn.Module, state: dict[str, Any], strict: bool = True) -> None:
    """Load weights despite wrapper prefixes. A misfit raises a `UserError` naming the keys, or warns if not strict."""
    target = unwrap(model)
    state = strip_wrapper_prefixes(state)
    own = target.state_dict()
    detail = misfit(own, state)
    # load_state_dict raises a bare RuntimeError on a shape mismatch even with strict=False, so set those keys aside
    fitting = {
        k: v for k, v in state.items() if not isinstance(v, torch.Tensor) or k not in own or v.shape == own[k].shape
    }
    target.load_state_dict(fitting, strict=False)
    if detail is not None:
        if strict:
            raise UserError(f"checkpoint does not fit the model ({detail}); was it trained with another model config?")
        log.warning("loaded non-strictly, skipped: %s", detail)
