"""Added cost of wandb (offline) per run: Tracker start + 40 log events + finish, wandb vs logger=none.

    python bench/tracking_overhead.py [--runs 5]

Both variants run in this process, alternating. The one-off `import wandb` and the first run (which starts
wandb's service process) are reported separately: together they are what a single `train.py` run pays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from lab.config import LoggerConfig
from lab.tracking import Tracker


def one_run(root: Path, logger: str) -> float:
    cfg = OmegaConf.structured(LoggerConfig(backends={logger: True} if logger != "none" else {}, mode="offline"))
    start = time.perf_counter()
    tracker = Tracker(root / f"{logger}-{time.monotonic_ns()}", logger_cfg=cfg, config={"a": 1}).start()
    for step in range(1, 41):
        tracker.log({"train/loss": 1.0 / step, "train/lr": 0.1}, step=step, epoch=1)
    tracker.summary({"val/acc_best": 0.9})
    tracker.finish()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.pop("WANDB_MODE", None)
    start = time.perf_counter()
    import wandb

    import_s = time.perf_counter() - start
    times: dict[str, list[float]] = {"none": [], "wandb": []}
    with tempfile.TemporaryDirectory() as root:
        cold = one_run(Path(root), "wandb")  # the first run also starts the wandb-core service
        for _ in range(args.runs):
            for logger in times:
                times[logger].append(one_run(Path(root), logger))
    none, with_wandb = (statistics.median(times[k]) for k in ("none", "wandb"))
    print(f"python {sys.version.split()[0]}, wandb {wandb.__version__}, {args.runs} runs each (median)")
    print(f"import wandb (once per process): {import_s:.3f} s")
    print(f"logger=none : {none:.3f} s per run")
    print(f"logger=wandb: {with_wandb:.3f} s per run (offline)")
    print(f"first wandb run in a process (starts wandb-core): {cold:.3f} s")
    print(
        f"added by wandb: {import_s + cold - none:.3f} s for a single-run process (import + first run), "
        f"{with_wandb - none:.3f} s for each further run (multirun jobs)"
    )


if __name__ == "__main__":
    main()
