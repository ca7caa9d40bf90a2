"""Hydra multirun sweeps through the real CLI, shared by the core's sweep tests and the sweeps extension's."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

from helpers import REPO, script_env
from warm_python import run_python

QUICK = ["debug=fast", "model=mlp"]


def run_sweep(sweep_dir: Path, *overrides: str, env: dict | None = None, multirun: bool = True):
    args = [str(REPO / "scripts/train.py"), *(["-m"] if multirun else []), f"hydra.sweep.dir={sweep_dir}", *overrides]
    return run_python(args, cwd=REPO, env=env or script_env(), timeout=300)


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def summary_rows(sweep_dir: Path) -> list[dict]:
    with open(sweep_dir / "sweep_summary.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def sweep_job(sweep_dir: Path, num: int, name: str = "summary.json") -> dict:
    return json.loads((sweep_dir / str(num) / name).read_text())
