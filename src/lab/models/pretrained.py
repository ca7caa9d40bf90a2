"""Weights from elsewhere: a pretrained file, or another run's checkpoint (``model.init_from``), loaded into a model
whose head (and maybe stem) differs from theirs.

Every tensor whose name and shape match is loaded; a first convolution made for 3 channels is adapted to the
data's channels (RGB -> grey sums the filters, as converting a grey image to RGB repeats it); every other mismatch
(the classifier of another class count) keeps the fresh initialisation it has. What was loaded, adapted and
skipped is logged with counts, so a head that silently stayed random cannot pass unseen.
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
    adapted: list[str] = field(default_factory=list)  # input convolutions summed/repeated to the data's channels
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why (shape mismatch): left as initialised
    not_in_file: list[str] = field(default_factory=list)  # the model's tensors the file lacks: left as initialised

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
    """The model state of a file: this template's checkpoint (its ``model``), a plain state dict, or a dict that
    nests one under ``state_dict`` / ``model`` (the usual layouts of published weights); .safetensors too."""
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
    """Before a run writes anything: a sharded checkpoint's shard directory, checked as `read_weights` reads it
    (where it lies, what its metadata names); only the file's header is read (memory-mapped)."""
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
    """A sharded checkpoint (dist=fsdp) whose model is in its shards alone."""
    return isinstance(state, dict) and "shards" in state and "model" not in state


def load_matching(model: nn.Module, state: dict[str, torch.Tensor], what: str) -> Loaded:
    """Load every tensor of `state` that fits `model` (see the module doc); refuses a file that fits nothing."""
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
    """A conv weight that differs only in its input channels, from or to the RGB the weights were trained on."""
    return (
        source.ndim == target.ndim == 4
        and source.shape[0] == target.shape[0]
        and source.shape[2:] == target.shape[2:]
        and 3 in (source.shape[1], target.shape[1])
    )


def _adapt_channels(weight: torch.Tensor, channels: int) -> torch.Tensor:
    """RGB filters for `channels` inputs: summed for grey (a grey image seen as RGB has three equal planes), else
    repeated and rescaled so the response to a constant image keeps its size."""
    rgb = weight.shape[1]
    if channels == 1:
        return weight.sum(dim=1, keepdim=True)
    repeats = -(-channels // rgb)
    return weight.repeat(1, repeats, 1, 1)[:, :channels] * (rgb / channels)
