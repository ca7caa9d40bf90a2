"""Fixtures for tests that run the real entry scripts in subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import Run, run_script


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
