"""Checkpoints: the files (``storage``: atomic save, safe read), wrapper-free model weights (``state_dicts``), the RNG
streams (``rng``), a run's checkpoint paths and cadence (``manager``), and a trained model rebuilt from a file for
eval, export and infer (``restore``, imported on its own: it pulls in the data, model and task packages)."""

from lab.checkpointing.manager import CheckpointManager
from lab.checkpointing.rng import capture_rng, restore_rng
from lab.checkpointing.state_dicts import load_model_state, strip_wrapper_prefixes, unwrap
from lab.checkpointing.storage import FORMAT_VERSION, copy, read, require_file, save

__all__ = [
    "FORMAT_VERSION",
    "CheckpointManager",
    "capture_rng",
    "copy",
    "load_model_state",
    "read",
    "require_file",
    "restore_rng",
    "save",
    "strip_wrapper_prefixes",
    "unwrap",
]
