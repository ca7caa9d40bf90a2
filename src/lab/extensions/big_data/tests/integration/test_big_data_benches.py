"""The page's benchmarks (README.md here) at their shortest settings: the test checks that they run, not their
figures (as tests/integration/test_readme.py runs the core's)."""

from __future__ import annotations

import shlex

import pytest

from helpers import script_env
from warm_python import run_python

pytestmark = pytest.mark.slow

# each command of the page's benchmark block, and what shortens it
QUICK = {
    # 0.2 MB of text, 0.2 s a loader
    "python -m lab.extensions.big_data.bench_tokens_loader": "--corpus-mb 0.2 --seconds 0.2 --repeats 1",
    # 60 small images; shards of 10: peak RSS for 1x and 2x
    "python -m lab.extensions.big_data.bench_big_data": (
        "--images 60 --size 32 --scales 1,2 --repeats 1 --samples-per-shard 10 --batch-size 8"
    ),
}


@pytest.mark.parametrize("command", QUICK)
def test_a_benchmark_of_the_page_runs(command, tmp_path):
    args = [*shlex.split(command)[1:], *shlex.split(QUICK[command])]
    proc = run_python(args, cwd=tmp_path, env=script_env(), timeout=300)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
