"""The Callback seam: each hook is called in the order of a run with what it documents, only overridden hooks are
called, a callback's checkpoint entries come back on resume, and the `callback` options (the one way to turn a
callback on) are chosen and checked by name like every other option and built for the Trainer they hook into, in
the order named."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_trainer import SquaredError, _data, _trainer
from torch import nn
from torch.utils.data import DataLoader

from helpers import forget_option, in_process_trainer
from lab import checkpointing
from lab.config import CallbackConfig
from lab.config import callbacks as callback_options
from lab.errors import ConfigError
from lab.training.callbacks import HOOKS, Callback, hooks
from lab.training.callbacks import build as build_callbacks
from lab.training.ema import EMA
from lab.training.options import EMAConfig


class Journal(Callback):
    """Writes down every hook as it is called; keeps a counter in the checkpoint."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.loaded: dict | None = None

    @contextlib.contextmanager
    def fitting(self, trainer):
        self.calls.append("enter")
        try:
            yield
        finally:
            self.calls.append("exit")

    def on_before_optimizer_step(self, trainer):
        assert all(p.grad is not None for p in trainer.model.parameters())  # the gradients are there
        self.calls.append("before_optimizer_step")

    def on_train_step_end(self, trainer):
        self.calls.append(f"step_end {trainer.progress.global_step}")

    def on_train_log(self, trainer, metrics):
        metrics["train/journal"] = 1.0
        self.calls.append("log")

    def on_validation_start(self, trainer):
        self.calls.append("validation_start")

    def on_validation_end(self, trainer, metrics, epoch):
        metrics["val/journal"] = float(epoch)
        self.calls.append(f"validation_end {epoch}")

    def on_save_checkpoint(self, trainer, checkpoint):
        checkpoint["journal"] = {"steps": trainer.progress.global_step}
        self.calls.append("save")

    def on_load_checkpoint(self, trainer, checkpoint):
        self.loaded = checkpoint["journal"]

    def on_fit_end(self, trainer, summary):
        summary["journal_calls"] = len(self.calls)
        self.calls.append("fit_end")


def test_every_hook_is_called_in_the_order_of_a_run(tmp_path: Path) -> None:
    journal = Journal()
    trainer = _trainer(tmp_path, max_epochs=1, log_every_n_steps=2, limit_train_batches=4)  # 4 steps, 2 log lines
    trainer.callbacks.append(journal)  # before fit(): its step hooks are looked up when fit() starts
    summary = trainer.fit()
    trainer.tracker.finish()
    step = ["before_optimizer_step"]
    assert journal.calls == [
        "enter",
        *step,
        "step_end 1",
        *step,
        "step_end 2",
        "log",
        *step,
        "step_end 3",
        *step,
        "step_end 4",
        "log",
        "validation_start",
        "validation_end 1",
        "save",
        "exit",
        "fit_end",
    ]
    assert summary["journal_calls"] == len(journal.calls) - 1 and summary["val/journal"] == 1.0
    assert checkpointing.read(tmp_path / "checkpoints" / "last.pt")["journal"] == {"steps": 4}
    resumed = _trainer(tmp_path / "resumed", max_epochs=2)
    resumed.callbacks.append(again := Journal())
    resumed.resume(checkpointing.read(tmp_path / "checkpoints" / "last.pt"))
    resumed.tracker.finish()
    assert again.loaded == {"steps": 4}


def test_fitting_is_left_when_the_run_fails(tmp_path: Path) -> None:
    class Boom(Journal):
        def on_validation_end(self, trainer, metrics, epoch):
            raise RuntimeError("pruned")

    boom = Boom()
    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.callbacks.append(boom)
    with pytest.raises(RuntimeError, match="pruned"):
        trainer.fit()
    trainer.tracker.finish()
    assert boom.calls[0] == "enter" and boom.calls[-1] == "exit"


def test_only_overridden_hooks_are_called() -> None:
    class StepOnly(Callback):
        def on_train_step_end(self, trainer):
            pass

    step_only = StepOnly()
    assert hooks([step_only, Callback()], "on_train_step_end") == [step_only.on_train_step_end]
    assert all(hooks([step_only], name) == [] for name in HOOKS if name != "on_train_step_end")


def test_a_callback_is_chosen_by_its_option_name_only() -> None:
    assert callback_options.chosen({"ema": {}}) == {"ema": EMAConfig()}  # its defaults: decay 0.999
    with pytest.raises(ConfigError, match=r"callback=no_such is not an option of callback"):
        callback_options.chosen({"no_such": {"every": 1}})
    with pytest.raises(ConfigError, match=r"callback=mine is not an option of callback"):
        callback_options.chosen({"mine": {"_target_": "builtins.object"}})  # an import path names nothing


@pytest.fixture
def parameter_count():
    """A fork's callback option: its callback is made from the Trainer it hooks into, on rank 0 only if asked."""

    @dataclass
    class ParameterCount(CallbackConfig):
        rank0_only: bool = False
        plain: bool = False  # builds an object that is no Callback: refused

        def build(self, trainer):
            if self.rank0_only and not trainer.parallel.is_main:
                return None
            count = SimpleNamespace() if self.plain else Callback()
            count.parameters = sum(p.numel() for p in trainer.model.parameters())
            return count

    yield ParameterCount
    forget_option(ParameterCount)  # defined at module level, every later --help comparison in this worker saw it


def test_callback_options_are_built_for_their_trainer_in_the_order_named_and_must_be_callbacks(
    compose, parameter_count, tmp_path
) -> None:
    cfg = compose(["callback=ema", "callbacks.ema.decay=0.9", "+callbacks.parameter_count={}"])
    loader = DataLoader(_data(), batch_size=8)
    trainer = in_process_trainer(cfg, nn.Linear(3, 1), SquaredError(), loader, tmp_path)
    trainer.tracker.finish()
    ema, count = trainer.callbacks
    assert isinstance(ema, EMA) and ema.decay == 0.9 and count.parameters == 4
    other_rank = SimpleNamespace(parallel=SimpleNamespace(is_main=False), model=trainer.model)
    assert build_callbacks({"parameter_count": {"rank0_only": True}}, other_rank) == []  # None: nothing added
    with pytest.raises(TypeError, match=r"the parameter_count callback option built a SimpleNamespace, not a lab\.tr"):
        build_callbacks({"parameter_count": {"plain": True}}, trainer)
