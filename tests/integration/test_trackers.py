"""`logger=[wandb,csv]` through the real CLI: one short training run, each tracker read back with its own library
and compared with the run dir's metrics.jsonl and resolved config."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from omegaconf import OmegaConf

from helpers import run_script
from wandb_reader import find_run_files, read_run

pytestmark = pytest.mark.slow


def _same(series: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """Same steps, same values (to float32, as a tracker may keep them)."""
    steps, values = zip(*series) if series else ((), ())
    return list(steps) == [s for s, _ in expected] and list(values) == pytest.approx([v for _, v in expected])


def test_train_writes_every_chosen_tracker(tmp_path, monkeypatch):
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no credentials: wandb writes offline
    run_dir = tmp_path / "run"
    overrides = ["debug=fast", "model=mlp", "trainer.max_epochs=2", "logger=[wandb,csv]"]
    proc = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]

    local = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["train/loss"]) for r in local if "train/loss" in r]
    val_acc = [(r["step"], r["val/acc"]) for r in local if "val/acc" in r]
    assert len(losses) >= 4 and len(val_acc) == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    resolved = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra/config.yaml"), resolve=True)
    git = {key: summary[key] for key in ("git_commit", "git_dirty")}

    # wandb: the offline run file
    run = read_run(find_run_files(run_dir / "wandb")[0])
    assert _same([(r["_step"], r["train/loss"]) for r in run.history if "train/loss" in r], losses)
    assert run.run_id == summary["wandb_id"] and run.config["optimizer"] == resolved["optimizer"]

    # csv: the csv module, and config.yaml
    with open(run_dir / "csv/metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(local)
    assert _same([(int(r["step"]), float(r["train/loss"])) for r in rows if r["train/loss"]], losses)
    assert _same([(int(r["step"]), float(r["val/acc"])) for r in rows if r["val/acc"]], val_acc)
    config = yaml.safe_load((run_dir / "csv/config.yaml").read_text())
    assert config.pop("hydra_overrides") == overrides
    provenance = config.pop("provenance")
    assert {k: provenance[k] for k in git} == git
    assert config == resolved
