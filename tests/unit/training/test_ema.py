"""callback=ema: the average follows the hand-computed formula, is what validation scores and best.pt holds, and a
resumed run continues it bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_trainer import CPU, _trainer
from torch import nn

from lab import checkpointing
from lab.config import validate
from lab.errors import ConfigError
from lab.training import trainer as trainer_module
from lab.training.callbacks import Callback
from lab.training.ema import EMA
from lab.training.evaluation import score
from lab.training.options import EMAConfig


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))


def _with_ema(tmp_path: Path, decay: float = 0.8, every_n_steps: int = 1, **settings):
    """A trainer with callback=ema on: the Trainer builds the EMA from its option."""
    ema = EMAConfig(decay=decay, every_n_steps=every_n_steps)
    return _trainer(tmp_path, model=_model(), callbacks={"ema": ema}, **settings)


def _ema(trainer) -> EMA:
    (ema,) = [callback for callback in trainer.callbacks if isinstance(callback, EMA)]
    return ema


class Recorder(Callback):
    """A step hook that keeps the trained weights and buffers after every optimizer step."""

    def __init__(self) -> None:
        self.weights: list[list[torch.Tensor]] = []
        self.buffers: list[list[torch.Tensor]] = []

    def on_train_step_end(self, trainer) -> None:
        self.weights.append([p.detach().clone() for p in trainer.model.parameters()])
        self.buffers.append([b.clone() for b in trainer.model.buffers()])


def test_the_average_is_the_hand_computed_one_updated_every_n_steps(tmp_path: Path) -> None:
    decay, every = 0.8, 3
    trainer = _with_ema(tmp_path, decay=decay, every_n_steps=every, max_epochs=2)
    initial = [p.detach().clone() for p in trainer.model.parameters()]
    recorder = Recorder()
    trainer.callbacks.insert(0, recorder)  # before the EMA's update: the weights it averages
    trainer.fit()
    trainer.tracker.finish()
    expected = initial
    for step, weights in enumerate(recorder.weights, start=1):
        if step % every == 0:
            expected = [decay * e + (1 - decay) * w for e, w in zip(expected, weights)]
    assert len(recorder.weights) == 16
    for averaged, hand in zip(_ema(trainer).module.parameters(), expected):
        torch.testing.assert_close(averaged, hand, rtol=1e-6, atol=1e-7)
    assert not torch.equal(next(_ema(trainer).module.parameters()), next(trainer.model.parameters()))
    # buffers (BatchNorm statistics) are copied, not averaged: those of the last update, step 15
    for averaged, own in zip(_ema(trainer).module.buffers(), recorder.buffers[14]):
        assert torch.equal(averaged, own)


def test_validation_and_best_pt_use_the_average_and_last_pt_keeps_both(tmp_path: Path) -> None:
    trainer = _with_ema(tmp_path, max_epochs=3)
    summary = trainer.fit()
    trainer.tracker.finish()
    args = (trainer.task, trainer.parallel, CPU, trainer.precision)
    ema_loss = score(_ema(trainer).module, _ema(trainer).module, trainer.val_loader, *args)["loss"]
    raw_loss = score(trainer.model, trainer.model, trainer.val_loader, *args)["loss"]
    assert summary["val/loss"] == ema_loss != raw_loss
    last = checkpointing.read(tmp_path / "checkpoints" / "last.pt")
    for key, value in _ema(trainer).module.state_dict().items():
        assert torch.equal(last["model"][key], value)
        assert torch.equal(last["raw_model"][key], trainer.model.state_dict()[key])
    best = checkpointing.read(tmp_path / "checkpoints" / "best.pt")
    restored = _model()
    restored.load_state_dict(best["model"])  # what eval / export / infer load
    assert score(restored, restored, trainer.val_loader, *args)["loss"] == summary["val/loss_best"]


def test_the_raw_weights_are_validated_beside_the_average_as_val_raw_only_with_ema(tmp_path: Path, monkeypatch) -> None:
    scored = []  # the module of every validation pass

    def counted(model, *args, **kwargs):
        scored.append(model)
        return score(model, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "score", counted)
    plain = _trainer(tmp_path / "plain", model=_model(), max_epochs=2)
    plain.fit()
    plain.tracker.finish()
    assert scored == [plain.model] * 2 and not any(k.startswith("val_raw/") for k in plain.last_val)  # no extra pass
    scored.clear()
    trainer = _with_ema(tmp_path / "ema", max_epochs=2)
    summary = trainer.fit()
    trainer.tracker.finish()
    assert scored == [trainer.model] * 4  # one more pass per validation: the average's, then the raw weights
    args = (trainer.task, trainer.parallel, CPU, trainer.precision)
    raw_loss = score(trainer.model, trainer.model, trainer.val_loader, *args)["loss"]
    assert summary["val_raw/loss"] == raw_loss != summary["val/loss"]
    logged = [json.loads(line) for line in (tmp_path / "ema" / "metrics.jsonl").read_text().splitlines()]
    validations = [event for event in logged if "val/loss" in event]
    assert len(validations) == 2 and all("val_raw/loss" in event for event in validations)
    # best.pt follows the average, not the raw weights
    assert summary["val/loss_best"] == min(event["val/loss"] for event in validations)
    assert "val_raw/loss_best" not in summary


def test_a_resumed_run_continues_the_average_bit_for_bit(tmp_path: Path) -> None:
    straight = _with_ema(tmp_path / "straight", max_epochs=3)
    straight.fit()
    first = _with_ema(tmp_path / "first", max_epochs=3, max_steps=13)  # stops mid-epoch 2
    first.fit()
    resumed = _with_ema(tmp_path / "resumed", max_epochs=3)  # fresh weights: the checkpoint brings both back
    resumed.resume(checkpointing.read(tmp_path / "first" / "checkpoints" / "last.pt"))
    resumed.fit()
    for trainer in (straight, first, resumed):
        trainer.tracker.finish()
    assert resumed.progress.global_step == straight.progress.global_step == 24
    for module in ("model", "ema"):
        a = straight.model if module == "model" else _ema(straight).module
        b = resumed.model if module == "model" else _ema(resumed).module
        for key, value in a.state_dict().items():
            assert torch.equal(value, b.state_dict()[key]), (module, key)


def test_a_run_without_ema_resumes_with_the_average_starting_at_its_weights(tmp_path: Path) -> None:
    plain = _trainer(tmp_path / "plain", model=_model(), max_epochs=1)
    plain.fit()
    plain.tracker.finish()
    resumed = _with_ema(tmp_path / "resumed", max_epochs=2)
    resumed.resume(checkpointing.read(tmp_path / "plain" / "checkpoints" / "last.pt"))
    resumed.tracker.finish()
    for a, b in zip(_ema(resumed).module.state_dict().values(), plain.model.state_dict().values()):
        assert torch.equal(a, b)


def test_ema_under_fsdp_is_refused_at_configuration_time(compose) -> None:
    cfg = compose(["dist=fsdp", "callback=ema"])
    with pytest.raises(ConfigError, match=r"callback=ema does not work with dist=fsdp .* use dist=ddp"):
        validate(cfg)
    validate(compose(["dist=ddp", "callback=ema"]))  # DDP is fine


def test_callback_ema_alone_averages_with_decay_0_999_and_a_decay_out_of_range_is_one_config_error(compose) -> None:
    assert compose(["callback=ema"]).callbacks.ema.decay == 0.999
    with pytest.raises(ConfigError, match=r"callbacks.ema.decay must be in \(0, 1\), got 1.0"):
        validate(compose(["callback=ema", "callbacks.ema.decay=1.0"]))
    with pytest.raises(ConfigError, match=r"callbacks.ema.every_n_steps must be >= 1, got 0"):
        EMAConfig(every_n_steps=0)
