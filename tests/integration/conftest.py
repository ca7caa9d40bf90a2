"""Helpers for tests that run the real entry scripts in subprocesses, the way a user does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    dir: Path

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    def metrics(self) -> list[dict]:
        return [json.loads(line) for line in (self.dir / "metrics.jsonl").read_text().splitlines()]

    def summary(self) -> dict:
        return json.loads((self.dir / "summary.json").read_text())

    def weights(self, name: str = "last.pt") -> dict:
        import torch

        return torch.load(self.dir / "checkpoints" / name, weights_only=True)["model"]


def run_script(script: str, *overrides: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, str(REPO / "scripts" / script), *overrides], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def train(tmp_path):
    """train("model=mlp", ...) -> Run in a fresh run dir under tmp_path; asserts success unless check=False."""
    counter = iter(range(1000))

    def _train(*overrides: str, check: bool = True, run_dir: Path | None = None) -> Run:
        run_dir = run_dir or tmp_path / f"run{next(counter)}"
        proc = run_script("train.py", f"hydra.run.dir={run_dir}", *overrides)
        if check:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        return Run(proc, run_dir)

    return _train


def max_abs_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].numel())
