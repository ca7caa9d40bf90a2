"""Runs that are stopped, rerun or fed broken files: the real script in a subprocess, as a cluster treats it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from helpers import PYTHON, REPO, script_env

SMALL = ["model=mlp", "logger=none", "trainer.log_every_n_steps=1"]


def _start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [PYTHON, str(REPO / "scripts" / "train.py"), f"hydra.run.dir={run_dir}", *SMALL, *overrides],
        cwd=REPO,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_steps(run_dir: Path, proc: subprocess.Popen, steps: int, limit_s: float = 300) -> None:
    """Until metrics.jsonl holds `steps` train lines: the run is inside its step loop."""
    deadline = time.monotonic() + limit_s
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file() and metrics.read_text().count("train/loss") >= steps:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never reached step {steps}: {proc.poll()=}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_stop_signal_saves_last_pt_records_interrupted_and_exits_128_plus_signal(tmp_path: Path, signum) -> None:
    run_dir = tmp_path / "run"
    proc = _start(run_dir, "trainer.max_epochs=50")
    _wait_for_steps(run_dir, proc, 3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)  # a hang must end: the bound is the feature here
    assert proc.returncode == 128 + signum, err[-3000:]
    last_line = err.strip().splitlines()[-1]
    assert last_line.startswith(f"interrupted by {signum.name} after optimizer step "), err[-3000:]
    assert "Traceback" not in err
    step = int(last_line.split("optimizer step ")[1].split(";")[0])
    saved = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert saved["progress"]["global_step"] == step >= 3
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
