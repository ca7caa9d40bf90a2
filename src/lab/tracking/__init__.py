"""What a run records: the chosen trackers (wandb, offline without credentials; CSV files; an extension's) mirrored
to metrics.jsonl / summary.json in the run dir (``tracker``, one class per tracker in ``backends`` and its
modules), and where the run came from: git commit, diff, versions (``provenance``)."""

from lab.tracking.backends import Backend, RunInfo
from lab.tracking.tracker import Tracker, from_config, job_identity
from lab.tracking.wandb_backend import has_wandb_credentials, resolve_mode

__all__ = [
    "Backend",
    "RunInfo",
    "Tracker",
    "from_config",
    "has_wandb_credentials",
    "job_identity",
    "resolve_mode",
]
