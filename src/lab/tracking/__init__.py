"""Record a run: metrics and summary to the chosen trackers and the run dir, and where the run came from.

`tracker` feeds wandb (offline without credentials), CSV or an extension's tracker (one class each in `backends`),
and mirrors them to metrics.jsonl and summary.json. `provenance` records the git commit, diff and versions."""

from lab.tracking.backends import Backend, RunInfo
from lab.tracking.tracker import Tracker, from_config, job_identity

__all__ = [
    "Backend",
    "RunInfo",
    "Tracker",
    "from_config",
    "job_identity",
]
