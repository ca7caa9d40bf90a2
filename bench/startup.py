"""Time from `python scripts/train.py` to its first optimizer step, minus what `import torch` alone costs.

    python bench/startup.py [--repeats 3] [overrides ...]      (default overrides: debug=fast)

Each figure is the median over `--repeats` fresh processes, measured in this one run of the script: a bare
`python -c "import torch"`; a hand-written script's first step (import torch, a small CNN, AdamW, one step on a
random batch: the floor for any torch.optim user, since torch 2.14 imports torch._dynamo, 1-2 s, when an optimizer
is first made); then the real CLI with logger=none and with logger=wandb (offline), in turns so that machine noise
hits all of them alike. The CLI runs with a probe callback (`callback=first_step`, bench/probe/sitecustomize.py)
that records the wall-clock time of the first optimizer step and ends the process there: what comes after the first
step (more steps, validation, the test split) is not start-up. Goal (issue 38): first step - import torch <= 1.0 s
without a tracker, <= 1.5 s with wandb.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMP_ENV = "LAB_BENCH_FIRST_STEP_FILE"


def seconds_to_import_torch() -> float:
    start = time.time()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.time() - start


HAND_WRITTEN_FIRST_STEP = """
import time, torch
from torch import nn
model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 64, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss = nn.functional.cross_entropy(model(torch.randn(64, 1, 8, 8)), torch.randint(0, 10, (64,)))
loss.backward()
optimizer.step()
print(repr(time.time()))
"""


def seconds_to_hand_written_first_step() -> float:
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", HAND_WRITTEN_FIRST_STEP], check=True, capture_output=True, text=True)
    return float(proc.stdout) - start


def seconds_to_first_step(overrides: list[str], logger: str, tmp: Path) -> float:
    stamp = tmp / "stamp"
    stamp.unlink(missing_ok=True)
    env = {
        **os.environ,
        STAMP_ENV: str(stamp),
        "PYTHONPATH": f"{REPO / 'bench' / 'probe'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    env.pop("WANDB_API_KEY", None)  # offline: no server is reached, whatever the machine has
    args = [
        sys.executable,
        str(REPO / "scripts/train.py"),
        f"hydra.run.dir={tmp / f'run-{time.time_ns()}'}",
        f"logger={logger}",
        "logger.wandb.mode=offline" if logger == "wandb" else "trainer.progress_bar=off",
        "callback=first_step",
        *overrides,
    ]
    start = time.time()
    proc = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not stamp.exists():
        sys.exit(f"error: {' '.join(args[1:])} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return float(stamp.read_text()) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", default=["debug=fast"])
    args = parser.parse_args()
    times: dict[str, list[float]] = {"import torch": [], "hand-written": [], "none": [], "wandb": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            times["import torch"].append(seconds_to_import_torch())
            times["hand-written"].append(seconds_to_hand_written_first_step())
            for logger in ("none", "wandb"):
                times[logger].append(seconds_to_first_step(args.overrides, logger, Path(tmp)))
    torch_s, hand_s = statistics.median(times["import torch"]), statistics.median(times["hand-written"])
    print(f"overrides: {' '.join(args.overrides)}   median of {args.repeats} fresh processes each")
    print(f"python -c 'import torch': {torch_s:.2f} s   hand-written script's first step: {hand_s:.2f} s")
    for logger in ("none", "wandb"):
        first = statistics.median(times[logger])
        print(
            f"logger={logger:<6} first optimizer step at {first:.2f} s   minus import torch: {first - torch_s:.2f} s"
            f"   minus the hand-written first step: {first - hand_s:.2f} s"
        )


if __name__ == "__main__":
    main()
