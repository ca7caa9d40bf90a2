"""The LR range test: the suggestion on synthetic loss curves, a sweep that leaves the model (and the RNG) as it was
and stops on divergence, the plot, and the command's run on the regression and language-model experiments
(classification runs as a subprocess in tests/integration/test_tools.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from lab.errors import UserError
from lab.extensions.tools import lr_find
from lab.extensions.tools.lr_find import Options, Result, exponential_lrs, range_test, suggest
from lab.tasks.base import BaseTask


def synthetic_curve(lrs: list[float], center: float, blow_up: float) -> list[float]:
    """Flat at 2.3 for tiny LRs, falling fastest at `center` (a sigmoid in log LR), exploding past `blow_up`."""
    out = []
    for lr in lrs:
        x = math.log10(lr)
        fall = 2.0 / (1 + math.exp(-3 * (x - math.log10(center))))
        out.append(2.3 - fall + 5 * max(0.0, x - math.log10(blow_up)) ** 2)
    return out


@pytest.mark.parametrize("center", [1e-4, 1e-3, 3e-2])
def test_the_suggestion_is_the_steepest_descent(center: float) -> None:
    lrs = exponential_lrs(1e-7, 10, 100)
    suggestion = suggest(lrs, synthetic_curve(lrs, center, blow_up=center * 300))
    assert center / 1.5 < suggestion < center * 1.5


def test_a_noisy_start_does_not_win() -> None:
    lrs = exponential_lrs(1e-7, 10, 100)
    losses = synthetic_curve(lrs, 1e-3, blow_up=0.3)
    losses[1] -= 1.0  # a lucky early batch: a steep drop, then a jump back
    assert 1e-3 / 1.5 < suggest(lrs, losses) < 1e-3 * 1.5


def test_short_or_rising_curves() -> None:
    assert suggest([1e-3, 1e-2, 1e-1], [1.0, 0.9, 2.0]) is None
    lrs = exponential_lrs(1e-3, 1, 20)
    assert suggest(lrs, [float(i) for i in range(20)]) == pytest.approx(lrs[0] / 10)  # lowest at the start


def test_exponential_lrs() -> None:
    lrs = exponential_lrs(1e-7, 10, 9)
    assert lrs[0] == pytest.approx(1e-7) and lrs[-1] == pytest.approx(10)
    assert np.allclose(np.diff(np.log10(lrs)), 1.0)


@pytest.mark.parametrize("bad", [{"steps": 2}, {"start_lr": 1.0, "end_lr": 0.1}, {"diverge": 1.0}, {"smoothing": 1}])
def test_bad_options_are_user_errors(bad: dict) -> None:
    with pytest.raises(UserError):
        Options(**bad)


class SquaredError(BaseTask):
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((outputs.squeeze(-1) - targets) ** 2).sum()


def regression_batches():
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(8, generator=generator)
    while True:
        inputs = torch.randn(32, 8, generator=generator)
        yield inputs, inputs @ weights


def test_the_sweep_leaves_the_model_and_the_rng_as_they_were_and_stops_on_divergence() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.1), nn.ReLU(), nn.Linear(16, 1)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    trained = []

    def make_optimizer(trial: nn.Module) -> torch.optim.Optimizer:
        trained.append(trial)
        return torch.optim.SGD(trial.parameters(), lr=1.0, momentum=0.9)

    result = range_test(
        model,
        SquaredError(),
        regression_batches(),
        make_optimizer,
        device=torch.device("cpu"),
        options=Options(start_lr=1e-5, end_lr=100, steps=100),
    )
    assert trained[0] is not model and trained[0].training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and not model.training
    assert torch.equal(torch.get_rng_state(), rng)  # dropout in the copy drew from a forked stream
    assert result.stopped in ("diverged", "non-finite loss") and len(result.lrs) < 100
    assert result.optimizer == "SGD" and all(a < b for a, b in zip(result.lrs, result.lrs[1:]))
    assert len(result.losses) == len(result.smoothed) == len(result.lrs)
    assert result.suggestion is not None and result.lrs[0] < result.suggestion < result.lrs[-1]
    assert result.suggestion <= result.min_loss_lr


def test_the_plot(tmp_path: Path) -> None:
    lrs = exponential_lrs(1e-6, 1, 50)
    losses = synthetic_curve(lrs, 1e-3, blow_up=0.1)
    result = Result(lrs, losses, losses, 1e-3, 0.05, "diverged", "AdamW")
    path = lr_find.lr_find_png(result, tmp_path / "lr_find.png", "title")
    with Image.open(path) as image:
        assert image.size == (736, 464)
        red = int(np.all(np.asarray(image.convert("RGB")) == (200, 60, 60), axis=-1).sum())
        assert red > 100  # the suggestion's line and dot


RUNS = {
    "regression": ["experiment=diabetes_regression", "optimizer=sgd"],
    "language_model": ["experiment=char_lm", "data.max_chars=20000", "model.n_layer=1"],
}


@pytest.mark.integration  # starts git (the run records its provenance)
@pytest.mark.parametrize("overrides", RUNS.values(), ids=RUNS.keys())
def test_the_command_on_each_task(compose, tmp_path: Path, overrides: list[str], capsys) -> None:
    cfg = compose([*overrides, "logger=none"])
    result = lr_find.run(cfg, tmp_path, Options(steps=12, end_lr=100))
    saved = json.loads((tmp_path / "lr_find.json").read_text())
    assert saved["lrs"] == result.lrs and saved["suggestion"] == result.suggestion and saved["options"]["steps"] == 12
    assert saved["optimizer"] == ("SGD" if "optimizer=sgd" in overrides else "AdamW")
    assert (tmp_path / "lr_find.png").is_file()
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [entry["lr_find/lr"] for entry in logged] == result.lrs
    out = capsys.readouterr().out
    assert f"use: optimizer.lr={result.suggestion:.2e}" in out
