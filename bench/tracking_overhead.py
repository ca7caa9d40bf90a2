"""What wandb (offline) costs the training process per run: Tracker start + 40 log events + finish, against
logger=none, with wandb in its child process (the default, `logger.child_process=true`) and in this process.

    python bench/tracking_overhead.py [--runs 5]

The variants run in this process, alternating. For each: the wall time of a run (finish waits for wandb to
close its run, wherever it runs), the CPU time this process spends (what competes with training for the GIL and
the cores: the child's work is not in it), and the 40 `log` calls alone. The first run of each wandb variant
(wandb's import and the start of its service process) is reported separately: a single `train.py` pays it once.
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

from lab.config.trackers import logger_config
from lab.tracking import Tracker, child_process
from lab.tracking.options import WandbConfig

VARIANTS = {
    "none": {},
    "wandb, child process": {"child_process": True},
    "wandb, this process": {"child_process": False},
}


def one_run(root: Path, variant: str) -> tuple[float, float, float]:
    """(wall s, CPU s of this process, s spent in the 40 log calls)"""
    settings = VARIANTS[variant]
    backends = {"wandb": True} if settings else {}
    cfg = OmegaConf.structured(logger_config(backends=backends, wandb=WandbConfig(mode="offline"), **settings))
    start, cpu = time.perf_counter(), time.process_time()
    tracker = Tracker(root / f"run-{time.monotonic_ns()}", logger_cfg=cfg, config={"a": 1}).start()
    logging_started = time.perf_counter()
    for step in range(1, 41):
        tracker.log({"train/loss": 1.0 / step, "train/lr": 0.1}, step=step, epoch=1)
    logs = time.perf_counter() - logging_started
    tracker.summary({"val/acc_best": 0.9})
    tracker.finish()
    return time.perf_counter() - start, time.process_time() - cpu, logs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.pop("WANDB_MODE", None)
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as root:
        first = {name: one_run(Path(root), name) for name in VARIANTS if name != "none"}
        for _ in range(args.runs):
            for name in VARIANTS:
                results[name].append(one_run(Path(root), name))
        child_process.close()
    print(f"python {sys.version.split()[0]}, {args.runs} runs each (median); a run = start + 40 logs + finish")
    print(f"{'':>22}  {'wall/run':>9}  {'CPU here/run':>12}  {'40 logs':>8}")
    for name, runs in results.items():
        wall, cpu, logs = (statistics.median(column) for column in zip(*runs, strict=True))
        print(f"{name:>22}  {wall:8.3f}s  {cpu:11.3f}s  {logs * 1e3:6.1f}ms")
    for name, (wall, cpu, _) in first.items():
        print(f"first run, {name}: {wall:.3f} s wall, {cpu:.3f} s CPU here (includes wandb's import and service start)")


if __name__ == "__main__":
    main()
