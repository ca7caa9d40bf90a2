"""Tracker.log_histograms: distributions (counts, bin edges) reach the trackers that keep them (wandb), as their
own histogram type."""

from __future__ import annotations

from pathlib import Path


def test_wandb_records_the_histograms(tmp_path: Path) -> None:
    import wandb

    from lab.tracking.backends import RunInfo
    from lab.tracking.wandb_backend import WandbBackend

    class Run:
        def log(self, values: dict, step: int) -> None:
            self.values, self.step = values, step

    backend = WandbBackend(RunInfo(tmp_path))
    backend.wandb_run = Run()
    backend.log_histograms({"stats/grads/fc": ([1.0, 3.0], [-1.0, 0.0, 1.0])}, step=4)
    histogram = backend.wandb_run.values["stats/grads/fc"]
    assert isinstance(histogram, wandb.Histogram) and backend.wandb_run.step == 4
    assert histogram.histogram == [1.0, 3.0] and histogram.bins == [-1.0, 0.0, 1.0]
