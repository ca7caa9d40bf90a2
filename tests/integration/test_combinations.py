"""The switches together: strategy x precision x model x {channels_last, compile, accumulation, workers+augment}.

An all-pairs design: every pair of settings of any two switches meets in at least one cell (9 cells instead of the
432 of the full product). Each cell trains 2 epochs straight, keeping the checkpoint its first epoch ended with,
and resumes a second run from that checkpoint: the two must end bit-identical (everything here is deterministic on
CPU). eval.py on best.pt must then reproduce the validation metrics training logged for it. On CPU: gloo for
DDP/FSDP, bf16 and fp16 autocast (fp16 with its GradScaler).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import pytest
import torch

from helpers import plugins_env, run_script

pytestmark = pytest.mark.slow

SWITCHES = {
    "strategy": ("none", "ddp", "fsdp"),
    "precision": ("fp32", "bf16", "fp16"),
    "model": ("mlp", "cnn"),  # cnn: BatchNorm
    "channels_last": (False, True),
    "compile": (False, True),
    "accum": (1, 2),
    "workers": (0, 2),  # 2: persistent workers with augmentation
}


@dataclass(frozen=True)
class Cell:
    strategy: str
    precision: str
    model: str
    channels_last: bool
    compile: bool
    accum: int
    workers: int

    @property
    def id(self) -> str:
        flags = [name for name in ("channels_last", "compile") if getattr(self, name)]
        flags += [f"accum{self.accum}"] if self.accum > 1 else []
        flags += [f"workers{self.workers}"] if self.workers else []
        return "-".join([self.strategy, self.precision, self.model, *flags])

    def overrides(self) -> list[str]:
        out = [
            f"dist={self.strategy}",
            f"precision={self.precision}",
            f"model={self.model}",
            f"trainer.channels_last={self.channels_last}",
            f"trainer.compile={self.compile}",
            f"trainer.grad_accum_steps={self.accum}",
            f"data.num_workers={self.workers}",
            f"data.augment={self.workers > 0}",
        ]
        return out + (["dist.nproc=2"] if self.strategy != "none" else [])


# Rows of a covering array of strength 2 (checked below): each (strategy, precision) pair once, the binary switches
# placed so that every pair of values of any two switches appears.
CELLS = [
    Cell(*row)
    for row in [
        ("none", "fp32", "cnn", True, False, 2, 0),
        ("none", "bf16", "mlp", False, True, 1, 2),
        ("none", "fp16", "cnn", True, True, 2, 2),
        ("ddp", "fp32", "mlp", False, False, 1, 0),
        ("ddp", "bf16", "cnn", False, True, 2, 0),
        ("ddp", "fp16", "mlp", True, False, 1, 2),
        ("fsdp", "fp32", "mlp", False, True, 2, 2),
        ("fsdp", "bf16", "cnn", True, False, 1, 0),
        ("fsdp", "fp16", "cnn", False, False, 2, 0),
    ]
]

# Short and deterministic: a constant LR, every step logged so the loss curves can be compared step by step.
COMMON = [
    "logger=none",
    "scheduler=constant",
    "scheduler.warmup_steps=0",
    "trainer.limit_train_batches=4",
    "trainer.log_every_n_steps=1",
]


def test_the_cells_cover_every_pair_of_settings():
    names = list(SWITCHES)
    for first, second in itertools.combinations(names, 2):
        wanted = set(itertools.product(SWITCHES[first], SWITCHES[second]))
        seen = {(getattr(cell, first), getattr(cell, second)) for cell in CELLS}
        assert seen == wanted, (first, second, wanted - seen)


# the straight run copies last.pt as epoch 1 left it to checkpoints/epoch1.pt (tests/integration/plugins)
KEEP_EPOCH_1 = "+callbacks.keep_checkpoint={epoch: 1}"


def _train(run_dir, *overrides):
    proc = run_script("train.py", f"hydra.run.dir={run_dir}", *overrides, timeout=600, env=plugins_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _checkpoint(run_dir, name="last.pt"):
    return torch.load(run_dir / "checkpoints" / name, weights_only=True)


@pytest.mark.parametrize("cell", CELLS, ids=lambda cell: cell.id)
def test_cell_trains_resumes_bitwise_and_evaluates_as_validated(cell, tmp_path):
    overrides = [*cell.overrides(), *COMMON]
    straight = _train(tmp_path / "straight", *overrides, "trainer.max_epochs=2", KEEP_EPOCH_1)
    epoch1 = tmp_path / "straight/checkpoints/epoch1.pt"
    assert _checkpoint(tmp_path / "straight", "epoch1.pt")["progress"]["epoch"] == 1  # what a 1-epoch run leaves
    resumed = _train(tmp_path / "resumed", *overrides, "trainer.max_epochs=2", f"ckpt_path={epoch1}")

    # resume: the second epoch's steps and the final state are those of the run that never stopped
    def losses(rows, epoch):
        return [(row["step"], row["train/loss"]) for row in rows if "train/loss" in row and row["epoch"] == epoch]

    assert losses(resumed, 2) == losses(straight, 2) and losses(straight, 2)
    end, resumed_end = _checkpoint(tmp_path / "straight"), _checkpoint(tmp_path / "resumed")
    # plain weights whatever wrapped the model (torch.compile, DDP, FSDP): no _orig_mod./module. prefixes
    assert not any(key.startswith(("_orig_mod.", "module.")) for key in end["model"]), list(end["model"])[:5]
    for key, value in end["model"].items():
        assert torch.equal(value, resumed_end["model"][key]), f"{key} differs after resume"
    assert end["progress"] == resumed_end["progress"]

    # eval.py on best.pt computes what validation computed for it
    best = _checkpoint(tmp_path / "straight", "best.pt")["progress"]
    logged = next(row for row in straight if "val/loss" in row and row["step"] == best["global_step"])
    proc = run_script(
        "eval.py",
        f"ckpt_path={tmp_path / 'straight/checkpoints/best.pt'}",
        "eval.split=val",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'eval'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    evaluated = json.loads((tmp_path / "eval/eval.json").read_text())["metrics"]
    assert evaluated["acc"] == logged["val/acc"] and evaluated["acc_top5"] == logged["val/acc_top5"]
    assert evaluated["loss"] == pytest.approx(logged["val/loss"], rel=1e-6, abs=1e-7)
