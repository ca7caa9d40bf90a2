"""Load weights from a pretrained file or another run's checkpoint (`model.init_from`) into a new model.

Every tensor whose name and shape match is loaded; a first convolution made for 3 channels is adapted to the data's
channels; any other mismatch (a classifier for another class count) keeps its fresh initialisation. The counts are
logged, so a head that silently stayed random gets noticed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab.checkpointing import sharded, state_dicts, storage
from lab.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    loaded: list[str] = field(default_factory=list)
    adapted: list[str] = field(default_factory=list)  # input convolutions fitted to the data's channels
    skipped: dict[str, str] = field(default_factory=dict)  # name -> shape mismatch; left as initialised
    not_in_file: list[str] = field(default_factory=list)  # left as initialised

    def summary(self) -> str:
        parts = [f"{len(self.loaded) + len(self.adapted)} tensors loaded"]
        if self.adapted:
            parts.append(f"{len(self.adapted)} adapted to the data's channels ({', '.join(self.adapted[:3])})")
        if self.skipped:
            shown = "; ".join(f"{name}: {why}" for name, why in list(self.skipped.items())[:4])
            parts.append(f"{len(self.skipped)} re-initialised for this model ({shown})")
        if self.not_in_file:
            parts.append(f"{len(self.not_in_file)} not in the file ({', '.join(self.not_in_file[:4])})")
        return ", ".join(parts)


def read_weights(path: str | Path, what: str) -> dict[str, torch.Tensor]:
    """Read a model state from a checkpoint, a state dict (maybe under `state_dict` or `model`) or .safetensors.

    Raises UserError when the file is missing or holds no tensors."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(
            f"{what}: no such file ({path}); pass a checkpoint (<run dir>/checkpoints/best.pt) or a weights file"
        )
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"{what}: cannot read it as weights ({str(err).splitlines()[0][:200]})") from err
    if _is_sharded(state):
        state = sharded.model_weights(storage.read(path))
    for key in ("model", "state_dict"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)} if isinstance(state, dict) else {}
    if not tensors:
        raise UserError(f"{what}: the file holds no tensors by name (not a state dict or checkpoint)")
    return state_dicts.strip_wrapper_prefixes(tensors)


def check_shards(path: str | Path, what: str) -> None:
    """Check a sharded checkpoint's shards as `read_weights` will, reading only the file's header (memory-mapped)."""
    try:
        head = torch.load(Path(path).expanduser(), map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return  # not a checkpoint of this template (safetensors, another layout): read_weights reads it
    if _is_sharded(head):
        try:
            storage.read(Path(path).expanduser())
        except UserError as err:
            raise UserError(f"{what}: {err}") from err


def _is_sharded(state: Any) -> bool:
    """Whether `state` is a sharded checkpoint (dist=fsdp) whose model is in its shards alone."""
    return isinstance(state, dict) and "shards" in state and "model" not in state


def load_matching(model: nn.Module, state: dict[str, torch.Tensor], what: str) -> Loaded:
    """Load every tensor of `state` that fits `model` (see the module doc); raise UserError if none fits."""
    own = model.state_dict()
    result, fitting = Loaded(), {}
    for name, target in own.items():
        source = state.get(name)
        if source is None:
            result.not_in_file.append(name)
        elif source.shape == target.shape:
            fitting[name] = source
            result.loaded.append(name)
        elif _is_input_conv(source, target):
            fitting[name] = _adapt_channels(source, target.shape[1])
            result.adapted.append(name)
        else:
            result.skipped[name] = f"{list(source.shape)} in the file, {list(target.shape)} here"
    if not fitting:
        raise UserError(
            f"{what}: no tensor of the file fits this model (file keys e.g. {list(state)[:3]}, model keys e.g. "
            f"{list(own)[:3]}); was it saved from another architecture?"
        )
    model.load_state_dict(fitting, strict=False)
    log.info("%s: %s", what, result.summary())
    return result


def _is_input_conv(source: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether `source` and `target` are conv weights that differ only in input channels, one side being RGB."""
    return (
        source.ndim == target.ndim == 4
        and source.shape[0] == target.shape[0]
        and source.shape[2:] == target.shape[2:]
        and 3 in (source.shape[1], target.shape[1])
    )


def _adapt_channels(weight: torch.Tensor, channels: int) -> torch.Tensor:
    """Adapt RGB filters to `channels` inputs: summed for grey, else repeated and rescaled.

    A grey image seen as RGB has three equal planes. Rescaling keeps the response to a constant image the same."""
    rgb = weight.shape[1]
    if channels == 1:
        return weight.sum(dim=1, keepdim=True)
    repeats = -(-channels // rgb)
    return weight.repeat(1, repeats, 1, 1)[:, :channels] * (rgb / channels)
