"""The data commands of the page (README_data.md here) end to end, as a user runs them, on a CSV the test writes:
prepare_data.py into Arrow parts, then a short regression run; and the memory benchmark at its shortest settings."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from helpers import run_script, script_env
from warm_python import run_python

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "README_data.md"
# the page's table commands, line by line (tests/integration/test_readme.py: each sh line is quoted by a test here)
SHOWN = [
    "python scripts/prepare_data.py data=hf data.source=/data/big.csv data.path=/data/big-arrow",
    "python scripts/train.py data=hf data.source=/data/big.csv data.path=/data/big-arrow data.target=price task=regression model=mlp",  # noqa: E501
]
BENCH = "python -m lab.extensions.hf.bench_table_memory"
QUICK = "--base-mb 0.2 --scales 1,2 --repeats 1"  # 0.2 and 0.4 MB of CSV


def _page_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_pages_table_commands_prepare_and_train(tmp_path: Path) -> None:
    lines = _page_lines()
    assert all(command in lines for command in [*SHOWN, BENCH])
    x = np.random.default_rng(0).normal(size=(200, 2))
    (tmp_path / "big.csv").write_text("x0,x1,price\n" + "".join(f"{a:.4f},{b:.4f},{3 * a - b:.4f}\n" for a, b in x))
    places = {"/data/big.csv": str(tmp_path / "big.csv"), "/data/big-arrow": str(tmp_path / "big-arrow")}
    for command in SHOWN:
        for placeholder, path in places.items():
            command = command.replace(placeholder, path)
        args = [*shlex.split(command)[2:], "data.batch_size=16", "data.rows_per_part=64"]
        if "train.py" in command:
            args += ["trainer.max_epochs=1", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
        proc = run_script(shlex.split(command)[1].removeprefix("scripts/"), *args)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
    assert json.loads((tmp_path / "big-arrow" / "manifest.json").read_text())["info"]["rows"] == 200
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def test_the_memory_benchmark_runs(tmp_path: Path) -> None:
    args = [*shlex.split(BENCH)[1:], *shlex.split(QUICK)]
    proc = run_python(args, cwd=tmp_path, env=script_env(), timeout=300)
    assert proc.returncode == 0, f"{BENCH}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
