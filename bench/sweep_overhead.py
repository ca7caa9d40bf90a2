"""Per-job cost of a Hydra sweep against one plain run: (sweep wall time / jobs) / (single run wall time).

    python bench/sweep_overhead.py [--jobs 4] [--launcher basic|joblib] [overrides ...]

Both are the real CLI in subprocesses with the same overrides (default `debug=fast model=mlp`), so the figure
includes what a user pays: interpreter start, imports, config composition, wandb, the sweep summary. Below 1 means
a sweep job costs less than a separate command (the basic launcher imports torch once for all jobs); joblib pays
the imports once per worker.
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
    parser.add_argument("--jobs", type=int, default=4, help="sweep jobs (seed=1..N)")
    parser.add_argument("--launcher", default="basic", help="hydra/launcher: basic, joblib, submitit_local")
    parser.add_argument("overrides", nargs="*", default=["debug=fast", "model=mlp"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        single = timed([f"hydra.run.dir={tmp}/single", *args.overrides])
        seeds = ",".join(str(s) for s in range(1, args.jobs + 1))
        sweep = timed(
            ["-m", f"hydra.sweep.dir={tmp}/sweep", f"hydra/launcher={args.launcher}", f"seed={seeds}", *args.overrides]
        )
    per_job = sweep / args.jobs
    print(f"single run: {single:.2f} s   sweep of {args.jobs} ({args.launcher}): {sweep:.2f} s = {per_job:.2f} s/job")
    print(f"per-job sweep cost / single run: {per_job / single:.2f}")


if __name__ == "__main__":
    main()
