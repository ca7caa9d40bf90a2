"""Record a run: metrics and summary to the chosen trackers and the run dir, and where the run came from."""

from lab.tracking.backends import Backend, RunInfo
from lab.tracking.tracker import Tracker, from_config, job_identity

__all__ = [
    "Backend",
    "RunInfo",
    "Tracker",
    "from_config",
    "job_identity",
]
