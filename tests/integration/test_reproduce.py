"""docs/run-dirs.md *Reproduce a run from its run dir*: the overrides a run dir records give the same losses again."""

from __future__ import annotations

import json

import pytest
import yaml

from helpers import run_script

pytestmark = pytest.mark.slow


def read_losses(run_dir) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [entry["train/loss"] for entry in map(json.loads, lines) if "train/loss" in entry]


def test_the_overrides_of_a_run_dir_give_the_same_losses(finished_run, tmp_path):
    """`python scripts/train.py <the overrides of .hydra/overrides.yaml>` at its `git_commit` (this checkout's)."""
    summary = json.loads((finished_run / "summary.json").read_text())
    assert summary["git_commit"] and "git_dirty" in summary
    overrides = yaml.safe_load((finished_run / ".hydra" / "overrides.yaml").read_text())
    proc = run_script("train.py", *overrides, f"hydra.run.dir={tmp_path / 'again'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = read_losses(finished_run)
    assert losses and losses == pytest.approx(read_losses(tmp_path / "again"), rel=1e-6)
