"""Sharded checkpoints (dist=fsdp): every rank writes its own shards of the weights and optimizer moments with
torch.distributed.checkpoint (DCP), in the foreground or in the background, and no rank gathers the whole model.

A checkpoint is then two things (docs/run-dirs.md): the usual `last.pt`, holding everything but
the tensors that are sharded (progress, schedule, RNG, config, data_meta, provenance) and `shards`, the path of a
DCP directory relative to the file's own directory (`shards/<name>`). DCP writes its `.metadata` last, renamed into
place once every rank's shards are written: a directory without it is incomplete, never read, and removed at the
next start. `last.pt` is switched to a new directory only after that directory is complete, so a save killed midway
leaves the previous checkpoint whole.

DCP reads the tensors back resharded to whatever the reader holds: FSDP shards on any number of ranks, or whole
tensors (DDP, one process, eval/export/infer).

Nothing a shard directory holds can run code: it is read through lab.checkpointing.dcp_reading, imported when a
shard directory is read (torch.distributed.checkpoint is slow to import).
"""

from __future__ import annotations

import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

DIR = "shards"  # under <run dir>/checkpoints: one directory per sharded checkpoint

# DCP warns on every save and load without a process group (one process, eval, a background save's thread) that
# it assumes one process: that is the intent wherever this module gives it no group
warnings.filterwarnings("ignore", "torch.distributed is disabled, unavailable or uninitialized")


def is_complete(directory: str | Path) -> bool:
    """DCP renames its metadata into place once every rank's shards are written."""
    return (Path(directory) / ".metadata").is_file()


def write(state: dict[str, Any], directory: Path, group: Any, background: bool) -> Future | None:
    """Every rank writes its shards of `state` to `directory` (a collective over `group`, a gloo group that
    nothing else uses: the background writer's collectives never interleave with training's). In the background,
    the tensors are first copied to host memory (the stall), and the returned future completes once the
    checkpoint's metadata is written; else the call returns then."""
    import torch.distributed.checkpoint as dcp

    if background:
        return dcp.async_save(state, checkpoint_id=str(directory), process_group=group)  # type: ignore[return-value]
    dcp.save(state, checkpoint_id=str(directory), process_group=group)
    return None


def load(state: dict[str, Any], directory: str | Path, group: Any) -> None:
    """Fill `state` (sharded or whole tensors, as this process holds them) in place from `directory`."""
    import torch.distributed.checkpoint as dcp

    from lab.checkpointing.dcp_reading import Planner, Reader, read_errors

    with read_errors(directory):
        dcp.load(state, storage_reader=Reader(str(directory)), planner=Planner(), process_group=group)


def read_model(directory: str | Path) -> dict[str, torch.Tensor]:
    """The whole model weights of a sharded checkpoint, on the CPU, in this process alone (no process group, and
    none of the optimizer's tensors are read): what eval, export, infer and model.init_from load."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from lab.checkpointing.dcp_reading import Planner, Reader, read_errors

    with read_errors(directory):
        reader = Reader(str(directory))
        metadata = reader.read_metadata()
        model: dict[str, torch.Tensor] = {}
        for flat, stored in metadata.state_dict_metadata.items():
            path = (metadata.planner_data or {}).get(flat, (flat,))  # ("model", "fc.weight") for "model.fc.weight"
            if path[0] == "model" and len(path) == 2 and isinstance(stored, TensorStorageMetadata):
                model[path[1]] = torch.empty(stored.size, dtype=stored.properties.dtype)
        planner = Planner(allow_partial_load=True)
        dcp.load({"model": model}, storage_reader=reader, planner=planner, no_dist=True)
    return model


def model_weights(ckpt: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's whole model weights: its `model`, else read from its shards (lab.checkpointing.read gives
    `shards` as an absolute path)."""
    if "model" in ckpt:
        return ckpt["model"]
    return read_model(ckpt["shards"])
