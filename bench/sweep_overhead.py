"""What one more job costs in a Hydra sweep, against one plain run of the same job.

    python bench/sweep_overhead.py [--jobs 5] [--launcher basic|joblib] [overrides ...]

Three commands of the real CLI in subprocesses, with the same overrides (default `debug=fast model=mlp`, wandb
offline): a plain run, a 1-job sweep and an N-job sweep (seed=1..N). A job's cost in a sweep is the time each job
after the first adds, (sweep of N - sweep of 1) / (N - 1), so what a sweep pays once (interpreter, imports, the
sweep summary) is not spread over the jobs; the ratio to the plain run (goal <= 0.25) is what a job costs beyond
its share of that. The basic launcher runs the jobs one after another in one process; joblib pays the imports once
per worker.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(REPO / "scripts/train.py"), *args], cwd=REPO, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"error: train.py {' '.join(args)} failed:\n{proc.stderr.decode()[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5, help="sweep jobs (seed=1..N), at least 2")
    parser.add_argument("--launcher", default="basic", help="hydra/launcher: basic, joblib, submitit_local")
    parser.add_argument("overrides", nargs="*", default=["debug=fast", "model=mlp"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:

        def sweep(jobs: int) -> float:
            seeds = ",".join(str(s) for s in range(1, jobs + 1))
            where = f"hydra.sweep.dir={tmp}/sweep{jobs}"
            return timed(["-m", where, f"hydra/launcher={args.launcher}", f"seed={seeds}", *args.overrides])

        single = timed([f"hydra.run.dir={tmp}/single", *args.overrides])
        one, many = sweep(1), sweep(args.jobs)
    per_job = (many - one) / (args.jobs - 1)
    print(f"plain run: {single:.2f} s   sweep of 1: {one:.2f} s   sweep of {args.jobs} ({args.launcher}): {many:.2f} s")
    print(f"each further job: {per_job:.2f} s   / plain run: {per_job / single:.2f}")


if __name__ == "__main__":
    main()
