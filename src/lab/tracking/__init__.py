"""What a run records: the wandb run (offline without credentials) mirrored to metrics.jsonl / summary.json in the
run dir (``tracker``), and where the run came from: git commit, diff, versions (``provenance``)."""

from lab.tracking.tracker import Tracker, from_config, has_wandb_credentials, job_identity, resolve_mode

__all__ = ["Tracker", "from_config", "has_wandb_credentials", "job_identity", "resolve_mode"]
