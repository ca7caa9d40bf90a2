"""debug=anomaly: a NaN/inf seeded in each place it can come from is named in one line, for toy models and for each
shipped task's real model and data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import in_process_trainer
from lab import cli
from lab.config import options
from lab.errors import UserError
from lab.tasks.base import BaseTask

SETTINGS = [
    "logger=none",
    "trainer.progress_bar=off",
    "debug=anomaly",
    "trainer.max_epochs=1",
    "trainer.grad_clip=null",
]


class SquaredError(BaseTask):
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((outputs.float().squeeze(-1) - targets) ** 2).sum()


class Explode(nn.Module):
    """Finite until its input passes 0, then inf (an exp that overflows)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, torch.full_like(x, float("inf")), x)


class NaNGradient(torch.autograd.Function):
    """Identity forward, NaN backward: a custom op with a broken gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("nan")


class Net(nn.Module):
    def __init__(self, middle: nn.Module | None = None, between=None, backward_nan: bool = False) -> None:
        super().__init__()
        self.first, self.middle, self.last = nn.Linear(3, 4), middle or nn.Identity(), nn.Linear(4, 1)
        self.between, self.backward_nan = between, backward_nan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.middle(self.first(x))
        if self.between is not None:
            x = self.between(x)
        if self.backward_nan:
            x = NaNGradient.apply(x)
        return self.last(x)


def _data(bad_inputs: bool = False, bad_targets: bool = False) -> DataLoader:
    x, y = torch.randn(32, 3, generator=torch.Generator().manual_seed(0)), torch.randn(32)
    if bad_inputs:
        x[13, 1] = float("nan")  # in the second batch of 8
    if bad_targets:
        y[20] = float("inf")  # in the third batch
    return DataLoader(TensorDataset(x, y), batch_size=8)


def _fit(compose, tmp_path: Path, model: nn.Module, loader: DataLoader) -> str:
    trainer = in_process_trainer(compose(SETTINGS), model, SquaredError(), loader, tmp_path)
    try:
        with pytest.raises(UserError) as caught:  # debug=anomaly: the Trainer adds the detector
            trainer.fit()
    finally:
        trainer.tracker.finish()
    assert "loss" not in vars(trainer.task)  # the task's own loss again
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # every hook removed
    return str(caught.value)


def _poisoned_weights() -> Net:
    net = Net()
    with torch.no_grad():
        net.last.weight[0, 2] = float("nan")
    return net


CASES = {
    "module": (
        lambda: Net(middle=Explode()),
        {},
        ["training step 1 (epoch 1)", "output of `middle` (Explode)", "inf", "though its input was finite (range ["],
    ),
    "data": (Net, {"bad_inputs": True}, ["the data batch of training step 2", "non-finite inputs", "1 NaN"]),
    "targets": (Net, {"bad_targets": True}, ["training step 3", "the loss is non-finite", "targets are non-finite"]),
    "between modules": (
        lambda: Net(between=lambda x: torch.log(x - 1e9)),
        {},
        [
            "output of `last` (Linear)",
            "its input was already non-finite",
            "between modules, after `middle` (Identity) and before `last` (Linear)",
        ],
    ),
    "weights": (
        _poisoned_weights,
        {},
        ["output of `last` (Linear)", "its parameters (weight) were already non-finite"],
    ),
    "backward": (
        lambda: Net(backward_nan=True),
        {},
        [
            "training step 1",
            "the backward of NaNGradientBackward produced NaN",
            "test_anomaly.py:",
            "`x = NaNGradient.apply(x)`",
        ],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_first_non_finite_value_is_named(compose, tmp_path: Path, case) -> None:
    build, data, expected = case
    message = _fit(compose, tmp_path, build(), _data(**data))
    assert message.startswith("anomaly: ") and "\n" not in message
    for part in expected:
        assert part in message, message


def test_the_run_ends_with_one_error_line(compose, tmp_path: Path, capsys) -> None:
    trainer = in_process_trainer(compose(SETTINGS), Net(middle=Explode()), SquaredError(), _data(), tmp_path)
    try:
        with pytest.raises(SystemExit) as ended, cli.user_errors():
            trainer.fit()
    finally:
        trainer.tracker.finish()
    assert str(ended.value.code).startswith("error: anomaly: training step 1 (epoch 1): the output of `middle`")


TASKS = {
    "classification": [],
    "regression": ["experiment=diabetes_regression"],
    # a small model on short windows: the steps' cost is not what is checked
    "language_model": [
        *("experiment=char_lm", "data.max_chars=20000", "data.block_size=32", "data.batch_size=16"),
        *("model.n_layer=1", "model.n_embd=32", "model.n_head=2"),
    ],
}


@pytest.mark.parametrize("overrides", TASKS.values(), ids=TASKS.keys())
def test_each_task_runs_clean_then_names_a_diverged_layer(compose, tmp_path: Path, overrides: list[str]) -> None:
    """A sane run passes every check (no false alarm); a learning rate of 1e30 blows up the first weights, and the
    second step names the first layer whose output overflows."""
    from lab.data.datasets import build as build_data
    from lab.models.common import build as build_model
    from lab.tasks.common import build as build_task

    for lr, steps in ((None, 2), (1e30, 3)):
        extra = [] if lr is None else ["scheduler=constant", "scheduler.warmup_steps=0"]
        cfg = compose([*overrides, *SETTINGS, f"trainer.limit_train_batches={steps}", *extra])
        cfg.data = options.instantiate("data", cfg.data)
        datamodule = build_data(cfg.data)
        torch.manual_seed(0)
        model = build_model(cfg.model, datamodule.meta)
        loader = DataLoader(datamodule.train, batch_size=cfg.data.batch_size, drop_last=True)
        trainer = in_process_trainer(cfg, model, build_task(cfg.task, datamodule.meta), loader, tmp_path / str(lr))
        if lr is not None:  # past optimizer.lr's bound, which the config refuses: set on the built optimizer
            for group in trainer.optimizer.param_groups:
                group["lr"] = lr
        try:
            if lr is None:
                trainer.fit()
                continue
            with pytest.raises(UserError, match=r"anomaly: training step 2 \(epoch 1\): the output of `"):
                trainer.fit()
        finally:
            trainer.tracker.finish()
