"""Checkpoints: safe files (`storage`), DCP shards under FSDP (`sharded`), wrapper-free weights (`state_dicts`),
RNG streams (`rng`) and a run's checkpoint paths and cadence (`manager`). Rebuilding a trained model, its task and
its data from a file (eval, export, infer) lives in `lab.workflows.restore`."""

from lab.checkpointing import sharded
from lab.checkpointing.manager import CheckpointManager
from lab.checkpointing.rng import capture_rng, restore_rng
from lab.checkpointing.state_dicts import load_model_state, strip_wrapper_prefixes, unwrap
from lab.checkpointing.storage import FORMAT_VERSION, copy, read, save

__all__ = [
    "FORMAT_VERSION",
    "CheckpointManager",
    "capture_rng",
    "copy",
    "load_model_state",
    "read",
    "restore_rng",
    "save",
    "sharded",
    "strip_wrapper_prefixes",
    "unwrap",
]
