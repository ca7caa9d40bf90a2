"""callback=stats: the per-layer statistics checked against the SGD updates they explain, the layers that never learn
named once each, activation hooks only on statistics steps, and histograms for the trackers that keep them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import in_process_trainer
from lab.extensions.diagnostics.stats import HISTOGRAM_BINS
from lab.tasks.base import BaseTask
from lab.training.callbacks import Callback

SETTINGS = [
    "logger=none",
    "trainer.progress_bar=off",
    "trainer.max_epochs=1",
    "trainer.grad_clip=null",
    "callback=stats",
    "callbacks.stats.every_n_steps=2",
    "optimizer=sgd",
    "optimizer.momentum=0",
    "optimizer.nesterov=false",
    "optimizer.weight_decay=0",
    "scheduler=constant",
    "scheduler.warmup_steps=0",
]
LR = 0.1  # sgd's default


class SquaredError(BaseTask):
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((outputs.squeeze(-1) - targets) ** 2).sum()


class Layers(nn.Module):
    """`used` and `head` learn; `frozen` passes gradients on but has none; `dead` feeds a ReLU that never fires;
    `unused` is never called."""

    def __init__(self) -> None:
        super().__init__()
        self.used, self.frozen, self.dead = nn.Linear(3, 4), nn.Linear(4, 4).requires_grad_(False), nn.Linear(4, 4)
        self.unused, self.head = nn.Linear(4, 4), nn.Linear(4, 1)
        with torch.no_grad():
            self.dead.bias.fill_(-1000.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.frozen(self.used(x))
        return self.head(h + torch.relu(self.dead(h)))


class Spy(Callback):
    """Whether activation hooks were installed for each step's forward (read before TrainingStats removes them: put
    first among the callbacks) and, after each step, a copy of `used`'s parameters."""

    def __init__(self, model: Layers) -> None:
        self.model, self.hooked = model, []
        self.weights = [self._copy()]

    def _copy(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.model.used.parameters()]

    def on_before_optimizer_step(self, trainer) -> None:
        self.hooked.append(bool(self.model.used._forward_hooks))

    def on_train_step_end(self, trainer) -> None:
        self.weights.append(self._copy())


class HistogramBackend:
    name, keeps_histograms = "histograms", True

    def __init__(self) -> None:
        self.logged: dict[int, dict] = {}

    def log(self, metrics, step, epoch) -> None:
        pass

    def log_histograms(self, histograms, step) -> None:
        self.logged[step] = dict(histograms)

    def finish(self, status):
        return {}


def _train(compose, tmp_path: Path, scale: float | None = None):
    torch.manual_seed(0)
    model = Layers()
    spy = Spy(model)
    data = TensorDataset(torch.randn(64, 3), torch.randn(64))
    cfg = compose(SETTINGS)
    # callback=stats: the Trainer builds the TrainingStats callback itself
    trainer = in_process_trainer(cfg, model, SquaredError(), DataLoader(data, batch_size=8), tmp_path)
    trainer.callbacks.insert(0, spy)
    if scale is not None:  # fp16-style loss scaling (fp32 compute): gradients arrive multiplied by `scale`
        trainer.scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    histograms = HistogramBackend()
    trainer.tracker.backends.append(histograms)
    try:
        trainer.fit()
    finally:
        trainer.tracker.finish()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if any(k.startswith("stats/") for k in r)], spy, histograms, model


def _norm(tensors: list[torch.Tensor]) -> float:
    return float(torch.cat([t.flatten() for t in tensors]).norm())


def test_statistics_explain_the_sgd_updates_and_never_learning_layers_are_named(compose, tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="lab.extensions.diagnostics.stats"):
        records, spy, histograms, model = _train(compose, tmp_path)
    assert [r["step"] for r in records] == [2, 4, 6, 8] and records[0]["epoch"] == 1
    for record in records:
        step = record["step"]
        before, after = spy.weights[step - 1], spy.weights[step]  # read before the update, after backward
        assert record["stats/weight_norm/used"] == pytest.approx(_norm(before), rel=1e-5)
        update = [b - a for b, a in zip(before, after)]  # SGD: lr * gradient
        assert record["stats/grad_norm/used"] == pytest.approx(_norm(update) / LR, rel=1e-4)
        assert record["stats/grad_norm/frozen"] == record["stats/grad_norm/unused"] == 0.0
        assert record["stats/grad_norm/dead"] == 0.0 and record["stats/grad_norm/head"] > 0
        assert record["stats/act_mean/dead"] < -900 and record["stats/act_std/used"] > 0
        assert "stats/act_mean/unused" not in record  # never ran
    # activation hooks only for the forward passes of statistics steps (2, 4, ...) and of the first step (installed
    # when built: the first step may be one), none left after fit
    assert spy.hooked == [step == 1 or step % 2 == 0 for step in range(1, 9)]
    assert not any(m._forward_hooks for m in model.modules())
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3  # once per layer, although 4 statistics steps found them
    assert any("layer frozen (Linear)" in w and "requires_grad=False" in w for w in warned)
    assert any("layer unused (Linear)" in w and "backward never reaches it" in w for w in warned)
    assert any("layer dead (Linear)" in w and "dead ReLUs" in w for w in warned)
    # histograms of every layer's weights, and of the gradients of those that have them
    assert set(histograms.logged) == {2, 4, 6, 8}
    logged = histograms.logged[2]
    assert {k for k in logged if k.startswith("stats/grads/")} == {f"stats/grads/{n}" for n in ("used", "dead", "head")}
    counts, edges = logged["stats/weights/used"]
    assert sum(counts) == 3 * 4 + 4 and len(counts) == HISTOGRAM_BINS and len(edges) == HISTOGRAM_BINS + 1
    assert edges[0] == pytest.approx(float(torch.cat([p.flatten() for p in spy.weights[1]]).min()))


def test_gradient_norms_are_unscaled_under_loss_scaling(compose, tmp_path: Path) -> None:
    plain, *_ = _train(compose, tmp_path / "plain")
    scaled, *_ = _train(compose, tmp_path / "scaled", scale=1024.0)
    for a, b in zip(plain, scaled):
        assert b["stats/grad_norm/used"] == pytest.approx(a["stats/grad_norm/used"], rel=1e-5)
