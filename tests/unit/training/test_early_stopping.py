"""callback=early_stopping: stops after `patience` validations without an improvement larger than `min_delta`,
records it in the summary, and a resume continues the count exactly."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_trainer import _trainer

from lab import checkpointing
from lab.config import validate
from lab.errors import ConfigError, UserError
from lab.run_dir import _refuse_unresumable
from lab.training.early_stopping import EarlyStopping
from lab.training.options import EarlyStoppingConfig
from lab.training.state import Progress

# the toy run's validation loss falls every epoch, but never by 1e3: only the first validation is an improvement
NEVER_ENOUGH = {"early_stopping": EarlyStoppingConfig(patience=2, min_delta=1e3)}


def _stopping(tmp_path: Path, **settings):
    return _trainer(tmp_path, callbacks=NEVER_ENOUGH, **settings)


def test_the_count_needs_an_improvement_larger_than_min_delta_and_nan_is_none() -> None:
    stopping, progress = (
        EarlyStopping(patience=2, min_delta=0.01, task=SimpleNamespace(mode="max", monitor="acc")),
        Progress(),
    )
    counts = []
    for value in (0.5, 0.505, 0.509, 0.515, float("nan"), 0.52, 0.6):
        stopping.record(progress, value)
        counts.append(progress.stale_validations)
    # 0.515 beats the reference 0.5 by more than 0.01 (a slow climb counts); 0.52 does not beat 0.515 by enough
    assert counts == [0, 1, 2, 0, 1, 2, 0]
    assert progress.early_stopping_reference == 0.6


def test_a_nan_first_validation_is_no_reference() -> None:
    stopping, progress = (
        EarlyStopping(patience=3, min_delta=0.0, task=SimpleNamespace(mode="min", monitor="loss")),
        Progress(),
    )
    stopping.record(progress, float("nan"))
    assert (progress.stale_validations, progress.early_stopping_reference) == (1, None)
    stopping.record(progress, 0.9)  # any number beats no reference
    assert (progress.stale_validations, progress.early_stopping_reference) == (0, 0.9)


def test_training_stops_after_patience_validations_and_says_so(tmp_path: Path, caplog) -> None:
    trainer = _stopping(tmp_path, max_epochs=10)
    with caplog.at_level(logging.INFO, logger="lab.training.early_stopping"):
        summary = trainer.fit()
    trainer.tracker.finish()
    assert summary["stopped_early"] is True and summary["stopped_epoch"] == 3 and summary["epochs"] == 3
    assert summary["global_step"] == 3 * 8
    # best.pt follows any improvement: the loss fell each epoch, so the best is the last one
    assert summary["best_epoch"] == 3 and summary["val/loss_best"] == summary["val/loss"]
    (line,) = [r.getMessage() for r in caplog.records if "early stopping" in r.getMessage()]
    assert line.startswith("early stopping at epoch 3: val/loss did not improve by more than 1000 for 2 validations")
    assert f"best {summary['val/loss_best']:.4f} at epoch 3" in line


def test_without_early_stopping_the_run_goes_on(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=4)
    summary = trainer.fit()
    trainer.tracker.finish()
    assert summary["epochs"] == 4 and "stopped_early" not in summary


def test_the_count_survives_a_resume_and_a_stopped_run_is_not_resumed(tmp_path: Path) -> None:
    straight = _stopping(tmp_path / "straight", max_epochs=10)
    straight.fit()
    first = _stopping(tmp_path / "first", max_epochs=2)  # interrupted after epoch 2
    first.fit()
    saved = checkpointing.read(tmp_path / "first" / "checkpoints" / "last.pt")
    assert saved["progress"]["stale_validations"] == 1  # epoch 1 set the reference, epoch 2's did not beat it
    resumed = _stopping(tmp_path / "resumed", max_epochs=10)
    resumed.resume(saved, tmp_path / "first" / "checkpoints" / "last.pt")
    summary = resumed.fit()
    for trainer in (straight, first, resumed):
        trainer.tracker.finish()
    assert summary["stopped_epoch"] == 3 and resumed.progress.global_step == straight.progress.global_step == 24
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    stopped = tmp_path / "straight" / "checkpoints" / "last.pt"
    again = _stopping(tmp_path / "again", max_epochs=10)
    again.tracker.finish()
    # a toy model (nn.Linear) of no model option: the weights' check finds no model to build and lets it be
    run = SimpleNamespace(ckpt_path=str(stopped), trainer=again.cfg, callbacks=NEVER_ENOUGH, model=None)
    with pytest.raises(UserError, match=r"stopped early at epoch 3 .*raise the patience"):
        _refuse_unresumable(run, writer=True)  # before any file is opened
    run.callbacks = {}
    _refuse_unresumable(run, writer=True)  # without callback=early_stopping it trains further


def test_callback_early_stopping_alone_waits_5_validations_and_a_bad_value_is_one_config_error(compose) -> None:
    assert compose(["callback=early_stopping"]).callbacks.early_stopping.patience == 5
    with pytest.raises(ConfigError, match=r"callbacks.early_stopping.patience must be >= 1, got 0"):
        validate(compose(["callback=early_stopping", "callbacks.early_stopping.patience=0"]))
    with pytest.raises(ConfigError, match=r"callbacks.early_stopping.min_delta must be >= 0, got -1.0"):
        EarlyStoppingConfig(min_delta=-1.0)
