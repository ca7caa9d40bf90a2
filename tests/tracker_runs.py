"""A Tracker session over a fixed list of events, for the trackers' tests (tests/unit/tracking/, and an extension's
tracker tests): importable as ``tracker_runs``, like ``helpers``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lab.config.trackers import logger_config
from lab.tracking import Tracker, child_process
from lab.tracking.options import WandbConfig

CONFIG = {"model": {"name": "mlp", "hidden_dims": [8, 4]}, "optimizer": {"lr": 0.1}, "seed": 3}
PROVENANCE = {"git_commit": "0123abc", "git_branch": "main", "git_dirty": False, "versions": {"python": "3"}}
GIT = {"git_commit": "0123abc", "git_branch": "main", "git_dirty": False}
# (metrics, step, epoch): keys appear as a run goes (validation after training lines, test at the end)
EVENTS = [
    ({"train/loss": 2.0, "train/lr": 0.1}, 1, 1),
    ({"train/loss": 1.5, "train/lr": 0.1}, 2, 1),
    ({"val/loss": 1.25, "val/acc": 0.5}, 2, 1),
    ({"train/loss": 1.0, "train/lr": 0.05, "train/grad_norm": float("nan")}, 3, 2),
    ({"test/acc": 0.75}, 3, None),
]


def logger(*names: str) -> DictConfig:
    """The `logger` node turning on the trackers `names` (wandb, if chosen, offline)."""
    return OmegaConf.structured(logger_config(backends=dict.fromkeys(names, True), wandb=WandbConfig(mode="offline")))


def record(run_dir: Path, *names: str, events=EVENTS, resume_id: str | None = None, continuing=False) -> dict:
    """A run recorded by the trackers `names`: `events` logged, a summary, finished; its summary.json."""
    tracker = Tracker(
        run_dir,
        logger_cfg=logger(*names),
        config=CONFIG,
        provenance=PROVENANCE,
        resume_id=resume_id,
        continuing=continuing,
    )
    with tracker.session():
        for metrics, step, epoch in events:
            tracker.log(metrics, step=step, epoch=epoch)
        tracker.summary({"val/acc_best": 0.5})
    if "wandb" in names:
        child_process.close()  # its end ends wandb, which may still be writing the run file's last block
    return json.loads((run_dir / "summary.json").read_text())


def csv_rows(run_dir: Path) -> tuple[list[str], list[dict]]:
    """csv/metrics.csv: its header and its rows."""
    with open(run_dir / "csv/metrics.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)
