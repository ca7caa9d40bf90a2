"""Sharded checkpoints (dist=fsdp), written with torch.distributed.checkpoint (DCP).

Every rank writes its own shards of the weights and optimizer moments, and no rank gathers the whole model;
`last.pt` names the DCP directory (`shards/<name>`, relative to its own folder). DCP renames its `.metadata` into
place last, so a directory without it is incomplete, never read, and removed at the next start. DCP reads the
tensors back resharded to whatever the reader holds, through `lab.checkpointing.dcp_reading` (nothing in a shard
directory can run code), imported only then, as torch.distributed.checkpoint is slow to import.
"""

from __future__ import annotations

import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

DIR = "shards"  # under <run dir>/checkpoints: one directory per sharded checkpoint

# without a process group (one process, eval, a background save's thread) DCP warns on every save and load that
# it assumes one process. That is the intent wherever this module gives it no group.
warnings.filterwarnings("ignore", "torch.distributed is disabled, unavailable or uninitialized")


def is_complete(directory: str | Path) -> bool:
    """Return whether `directory` holds a finished save. DCP renames its metadata into place last."""
    return (Path(directory) / ".metadata").is_file()


def write(state: dict[str, Any], directory: Path, group: Any, background: bool) -> Future | None:
    """Write this rank's shards of `state` to `directory`, a collective over `group`.

    `group` is a gloo group nothing else uses, so the background writer's collectives never interleave with
    training's. In the background, the tensors are first copied to host memory (the stall) and the returned future
    completes once the metadata is written. Otherwise the call returns then."""
    import torch.distributed.checkpoint as dcp

    if background:
        return dcp.async_save(state, checkpoint_id=str(directory), process_group=group)  # type: ignore[return-value]
    dcp.save(state, checkpoint_id=str(directory), process_group=group)
    return None


def load(state: dict[str, Any], directory: str | Path, group: Any) -> None:
    """Fill `state` in place from `directory`, as sharded or whole tensors, however this process holds them."""
    import torch.distributed.checkpoint as dcp

    from lab.checkpointing.dcp_reading import Planner, Reader, read_errors

    with read_errors(directory):
        dcp.load(state, storage_reader=Reader(str(directory)), planner=Planner(), process_group=group)


def read_model(directory: str | Path) -> dict[str, torch.Tensor]:
    """Return the whole model weights of a sharded checkpoint, on the CPU, for eval, export, infer and
    model.init_from. Reads in this process alone, with no process group, and skips the optimizer's tensors."""
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
    """Return a checkpoint's whole model weights: its `model`, else read from its `shards`, which
    `lab.checkpointing.read` has made an absolute path."""
    if "model" in ckpt:
        return ckpt["model"]
    return read_model(ckpt["shards"])
