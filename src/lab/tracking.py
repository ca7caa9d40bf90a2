"""Run records: metrics.jsonl (one JSON object per logged event) and summary.json in the run directory.

Every workflow talks to this one interface (start / log / summary / finish); the wandb backend plugs in here.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any


def _plain(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so the file stays valid and the problem stays visible."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


class Tracker:
    def __init__(self, run_dir: str | Path, provenance: dict | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.provenance = provenance or {}
        self._summary: dict[str, Any] = {}
        self._metrics_file = None
        self._started = 0.0

    def start(self) -> Tracker:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._metrics_file = open(self.run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115  (closed in finish)
        # line-buffered: `tail -f metrics.jsonl` shows each event as it happens
        self._started = time.monotonic()
        return self

    def log(self, metrics: dict[str, float], step: int, epoch: int | None = None) -> None:
        """One event: `step` = global optimizer step, `epoch` = 1-based epoch it belongs to."""
        record = {"step": step, "epoch": epoch, **{k: _plain(v) for k, v in metrics.items()}}
        self._metrics_file.write(json.dumps(record) + "\n")

    def summary(self, values: dict[str, Any]) -> None:
        self._summary.update({k: _plain(v) for k, v in values.items()})

    def finish(self, status: str = "completed") -> None:
        summary = {
            **self._summary,
            "status": status,
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "git_commit": self.provenance.get("git_commit"),
            "git_dirty": self.provenance.get("git_dirty"),
        }
        write_json(self.run_dir / "summary.json", summary)
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
