"""The Trainer on its own: a toy task and a linear model, in-process, no Hydra, no subprocess."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lab import checkpointing, stopping
from lab.checkpointing import CheckpointManager
from lab.config import TrainerConfig
from lab.data.loaders import EpochLoader
from lab.distributed.parallel import Parallel
from lab.errors import Interrupted, UserError
from lab.optim.schedulers import PerStep
from lab.runtime import Precision
from lab.tasks.base import BaseTask
from lab.tracking import Tracker
from lab.training.trainer import Trainer

CPU = torch.device("cpu")


class SquaredError(BaseTask):
    """Mean squared error; the monitor is the validation loss itself."""

    name, monitor, mode = "toy", "loss", "min"

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((outputs.float().squeeze(-1) - targets) ** 2).sum()

    def metrics(self, device: torch.device, full: bool = False) -> SquaredErrorSum:
        return SquaredErrorSum(device)


class SquaredErrorSum:
    def __init__(self, device: torch.device) -> None:
        self.total = torch.zeros((), device=device)
        self.count = torch.zeros((), device=device)

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.total += ((outputs.squeeze(-1) - targets) ** 2).sum()
        self.count += targets.numel()

    def compute(self) -> dict[str, float]:
        return {"loss": float(self.total / self.count)}


class SpySchedule(PerStep):
    """A constant schedule that records the validations it was told about."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        super().__init__(torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0))
        self.validations: list[float] = []

    def step_validation(self, metrics: dict[str, float]) -> None:
        self.validations.append(metrics["val/loss"])


def _data(n: int = 64, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    y = x @ torch.tensor([1.5, -2.0, 0.5]) + 0.3
    return TensorDataset(x, y)


def _trainer(
    tmp_path: Path,
    batch_size: int = 8,
    model: nn.Module | None = None,
    lr: float = 0.05,
    callbacks: dict | None = None,
    **settings,
):
    cfg = TrainerConfig(**{"grad_clip": None, "progress_bar": "off", "log_every_n_steps": 4, **settings})
    torch.manual_seed(0)
    model = model if model is not None else nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(_data(), batch_size=batch_size, shuffle=False, drop_last=True)
    parallel = Parallel()
    return Trainer(
        model=model,
        optimizer=optimizer,
        scheduler=SpySchedule(optimizer),
        task=SquaredError(),
        train_batches=EpochLoader(loader, None, seed=0, limit=cfg.limit_train_batches),
        val_loader=DataLoader(_data(32, seed=1), batch_size=16),
        device=CPU,
        precision=Precision("fp32", autocast_dtype=None, grad_scaler=False),
        cfg=cfg,
        tracker=Tracker(tmp_path).start(),
        checkpoints=CheckpointManager(tmp_path, parallel, cfg.ckpt_every_n_steps, extras={"config": {"toy": 1}}),
        parallel=parallel,
        callbacks=callbacks,
    )


def test_fit_learns_validates_every_epoch_and_writes_last_and_best(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=4)
    summary = trainer.fit()
    trainer.tracker.finish()
    losses = trainer.scheduler.validations
    assert len(losses) == 4 and losses[-1] < losses[0] / 4  # the schedule heard of each validation
    assert summary["global_step"] == 4 * 8 and summary["epochs"] == 4
    assert summary["val/loss_best"] == min(losses) and summary["best_epoch"] == losses.index(min(losses)) + 1
    last = checkpointing.read(tmp_path / "checkpoints" / "last.pt")
    assert last["config"] == {"toy": 1} and last["progress"]["global_step"] == 32  # the run's extras in every file
    assert (tmp_path / "checkpoints" / "best.pt").is_file()


def test_accumulated_micro_batches_step_like_one_large_batch(tmp_path: Path) -> None:
    """Two micro-batches of 8 with accumulation give the weights of one batch of 16 (same data, same order)."""
    accumulated = _trainer(tmp_path / "a", batch_size=8, grad_accum_steps=2, max_epochs=1)
    large = _trainer(tmp_path / "b", batch_size=16, max_epochs=1)
    large.model.load_state_dict(accumulated.model.state_dict())
    accumulated.train_epoch(0)
    large.train_epoch(0)
    for trainer in (accumulated, large):
        trainer.tracker.finish()
    assert accumulated.progress.global_step == large.progress.global_step == 4
    for a, b in zip(accumulated.model.parameters(), large.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_max_steps_ends_mid_epoch_and_checkpoints_follow_their_cadence(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=5, max_steps=11, ckpt_every_n_steps=3)
    saved = []
    trainer.checkpoints.save = lambda state, best, **_: saved.append((state["progress"]["global_step"], best))
    trainer.fit()
    trainer.tracker.finish()
    assert trainer.progress.global_step == 11
    assert [step for step, _ in saved] == [3, 6, 8, 9, 11]  # every 3 steps, and at the end of each epoch (8, 11)
    assert trainer.progress.epoch == 1 and trainer.progress.batch_in_epoch == 3  # a resume starts at batch 3


def test_a_resumed_trainer_continues_exactly_where_the_checkpoint_stopped(tmp_path: Path) -> None:
    straight = _trainer(tmp_path / "straight", max_epochs=3)
    straight.fit()
    first = _trainer(tmp_path / "first", max_epochs=3, max_steps=13)
    first.fit()
    resumed = _trainer(tmp_path / "resumed", max_epochs=3, model=copy.deepcopy(nn.Linear(3, 1)))
    resumed.resume(checkpointing.read(tmp_path / "first" / "checkpoints" / "last.pt"))
    resumed.fit()
    for trainer in (straight, first, resumed):
        trainer.tracker.finish()
    assert resumed.progress.global_step == straight.progress.global_step == 24
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_a_loss_that_diverges_stops_the_run_naming_the_step(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=2, lr=1e6)  # SGD at lr 1e6 overflows within a few steps
    with pytest.raises(UserError, match=r"loss became (nan|inf) at optimizer step \d+ \(epoch 1\)"):
        trainer.fit()
    trainer.tracker.finish()
    assert not (tmp_path / "checkpoints" / "last.pt").exists()  # nothing written from diverged weights


def test_train_loss_logged_per_window_is_the_sample_weighted_mean(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=1, lr=0.0)  # lr 0: every step sees the initial model
    trainer.fit()
    trainer.tracker.finish()
    model = trainer.model
    x, y = _data().tensors
    with torch.no_grad():
        expected = float(((model(x[:32]).squeeze(-1) - y[:32]) ** 2).mean())  # the first 4 steps of 8 samples
    logged = [line for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if "train/loss" in line]
    first = float(logged[0].split('"train/loss": ')[1].split(",")[0])
    assert math.isclose(first, expected, rel_tol=1e-5)


class SignalAtStep(SquaredError):
    """Sends `signum` to this process during the loss of optimizer step `step` (the signal lands mid-step)."""

    def __init__(self, step: int, signum: int) -> None:
        self.calls, self.step, self.signum = 0, step, signum

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.step:
            os.kill(os.getpid(), self.signum)
        return super().loss(outputs, targets)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_stop_signal_finishes_the_step_saves_and_resumes_exactly(tmp_path: Path, signum: int) -> None:
    straight = _trainer(tmp_path / "straight", max_epochs=2)
    straight.fit()
    stopped = _trainer(tmp_path / "stopped", max_epochs=2)
    stopped.task = SignalAtStep(11, signum)
    handler_before = signal.getsignal(signum)
    with pytest.raises(Interrupted, match=rf"interrupted by {signum.name} after optimizer step 11; saved ") as caught:
        stopped.fit()
    assert caught.value.exit_code == 128 + signum and signal.getsignal(signum) is handler_before
    saved = checkpointing.read(tmp_path / "stopped" / "checkpoints" / "last.pt")
    assert saved["progress"]["global_step"] == 11 and saved["progress"]["batch_in_epoch"] == 3  # epoch 2, batch 3
    resumed = _trainer(tmp_path / "resumed", max_epochs=2)
    resumed.resume(saved)
    resumed.fit()
    for trainer in (straight, stopped, resumed):
        trainer.tracker.finish()
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_a_second_ctrl_c_quits_at_once(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=2)
    with trainer.stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert trainer.stop.received == signal.SIGINT
        os.kill(os.getpid(), signal.SIGINT)  # the same press, forwarded by a launcher: still saving
        stopping._first_at -= 2  # a second press, later
        with pytest.raises(SystemExit) as caught:
            os.kill(os.getpid(), signal.SIGINT)
    trainer.tracker.finish()
    assert caught.value.code == 130


class NaNAt(SquaredError):
    """A loss that is NaN at the given optimizer steps (1-based; one micro-batch per step)."""

    def __init__(self, steps: set[int]) -> None:
        self.calls, self.steps = 0, steps

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        loss = super().loss(outputs, targets)
        return loss * math.nan if self.calls in self.steps else loss


def test_a_nan_at_an_epochs_last_step_is_named_with_that_epoch(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=3, log_every_n_steps=100)
    trainer.task = NaNAt({8})  # the last step of epoch 1 (8 steps per epoch); found when epoch 1 is saved
    with pytest.raises(UserError, match=r"loss became nan at optimizer step 8 \(epoch 1\)"):
        trainer.fit()
    trainer.tracker.finish()


def test_max_bad_steps_skips_non_finite_steps_and_stops_after_too_many_in_a_row(tmp_path: Path) -> None:
    skipping = _trainer(tmp_path / "skip", max_epochs=2, max_bad_steps=2)
    skipping.task = NaNAt({3, 4, 9})
    skipping.fit()
    skipping.tracker.finish()
    assert skipping.bad_steps.total == 3 and skipping.progress.global_step == 16
    assert all(torch.isfinite(p).all() for p in skipping.model.parameters())
    logged = [json.loads(line) for line in (tmp_path / "skip" / "metrics.jsonl").read_text().splitlines()]
    assert [m["train/bad_steps"] for m in logged if "train/bad_steps" in m][:2] == [2, 2]  # steps 4 and 8

    stopping = _trainer(tmp_path / "stop", max_epochs=2, max_bad_steps=1)
    stopping.task = NaNAt({3, 4})
    with pytest.raises(UserError, match=r"loss was nan for 2 optimizer steps in a row, the last at step 4 \(epoch 1\)"):
        stopping.fit()
    stopping.tracker.finish()


class NaNFirstValidation(SquaredError):
    """The validation loss is NaN at the first validation only (a model that produced NaN on the val split)."""

    def __init__(self) -> None:
        self.validations = 0

    def metrics(self, device: torch.device, full: bool = False) -> SquaredErrorSum:
        self.validations += 1
        metrics = super().metrics(device, full)
        if self.validations == 1:
            metrics.total += math.nan
        return metrics


def test_a_nan_first_validation_writes_no_best_pt_and_the_next_validation_becomes_the_best(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.task = NaNFirstValidation()
    summary = trainer.fit()
    assert math.isnan(summary["val/loss"]) and summary["val/loss_best"] is None and summary["best_epoch"] is None
    assert (tmp_path / "checkpoints" / "last.pt").is_file() and not (tmp_path / "checkpoints" / "best.pt").exists()
    trainer.cfg.max_epochs = 2  # the run goes on: its first real number is the best, not ignored behind the NaN
    summary = trainer.fit()
    trainer.tracker.finish()
    assert summary["best_epoch"] == 2 and summary["val/loss_best"] == summary["val/loss"] < math.inf
    best = checkpointing.read(tmp_path / "checkpoints" / "best.pt")
    assert best["progress"]["best_epoch"] == 2 and best["progress"]["global_step"] == 16
