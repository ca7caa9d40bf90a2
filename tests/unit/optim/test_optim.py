"""lab.optim: weight-decay parameter groups, optimizers from the composed configs, LR schedules step by step."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from lab.config import validate
from lab.errors import UserError
from lab.optim.optimizers import build_optimizer, parameter_groups
from lab.optim.schedulers import WarmupPlateau, build_scheduler


class Net(nn.Module):
    """Conv (with bias) + BatchNorm + LayerNorm + Linear, a frozen layer and a tied (shared) weight."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.conv_nobias = nn.Conv2d(4, 4, 1, bias=False)
        self.ln = nn.LayerNorm(4)
        self.fc = nn.Linear(4, 3)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.tied = nn.Linear(4, 3)
        self.tied.weight = self.fc.weight  # shared: must appear once
        self.scale = nn.Parameter(torch.ones(4))  # a 1-d gain outside any norm layer: not decayed either

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_nobias(self.bn(self.conv(x))).mean((2, 3))
        return self.fc(self.ln(self.frozen(x * self.scale))) + self.tied(x)


def _ids(params) -> set[int]:
    return {id(p) for p in params}


# --------------------------------------------------------------------------- parameter groups
def test_parameter_groups_split_decay_from_norms_and_biases() -> None:
    net = Net()
    decay, no_decay = parameter_groups(net, weight_decay=0.3)
    assert decay["weight_decay"] == 0.3 and no_decay["weight_decay"] == 0.0
    assert _ids(decay["params"]) == _ids([net.conv.weight, net.conv_nobias.weight, net.fc.weight])
    assert _ids(no_decay["params"]) == _ids(
        [net.conv.bias, net.bn.weight, net.bn.bias, net.ln.weight, net.ln.bias, net.fc.bias, net.tied.bias, net.scale]
    )


def test_parameter_groups_cover_every_trainable_parameter_exactly_once() -> None:
    net = Net()
    decay, no_decay = parameter_groups(net, weight_decay=0.1)
    grouped = [*decay["params"], *no_decay["params"]]
    assert len(grouped) == len(_ids(grouped))  # nothing twice (the tied weight included)
    trainable = _ids(p for p in net.parameters() if p.requires_grad)  # .parameters() dedups shared tensors
    assert _ids(grouped) == trainable
    assert not _ids(net.frozen.parameters()) & _ids(grouped)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_build_optimizer_from_the_composed_config(compose, optimizer: str) -> None:
    cfg = compose([f"optimizer={optimizer}"])
    validate(cfg)
    net = Net()
    opt = build_optimizer(cfg.optimizer, net, cfg.model)
    expected_class = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer]
    assert type(opt) is expected_class
    assert [g["lr"] for g in opt.param_groups] == [cfg.optimizer.lr] * 2
    assert [g["weight_decay"] for g in opt.param_groups] == [cfg.optimizer.weight_decay, 0.0]
    assert cfg.optimizer.weight_decay > 0  # otherwise the line above proves nothing
    if optimizer == "sgd":
        assert all(g["nesterov"] is True and g["momentum"] == 0.9 for g in opt.param_groups)
        assert cfg.optimizer.lr == 0.1
    else:
        assert all(tuple(g["betas"]) == (0.9, 0.999) and g["eps"] == 1e-8 for g in opt.param_groups)
        assert cfg.optimizer.lr == 3e-3


def test_build_optimizer_takes_overrides_and_decays_only_the_decay_group(compose) -> None:
    cfg = compose(["optimizer=adamw", "optimizer.lr=0.5", "optimizer.weight_decay=0.2"])
    net = Net()
    opt = build_optimizer(cfg.optimizer, net, cfg.model)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5]
    params = [p for g in opt.param_groups for p in g["params"]]
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()  # zero gradients: only decoupled weight decay moves anything, by a factor (1 - lr * wd)
    decay_ids = _ids(opt.param_groups[0]["params"])
    for p, old in zip(params, before):
        factor = 1 - 0.5 * 0.2 if id(p) in decay_ids else 1.0
        torch.testing.assert_close(p.detach(), old * factor)


# --------------------------------------------------------------------------- schedules
LR = 0.1


def _optimizer(lr: float = LR) -> torch.optim.Optimizer:
    param = nn.Parameter(torch.zeros(2))
    param.grad = torch.zeros(2)
    return torch.optim.SGD([param], lr=lr, momentum=0.9)  # momentum: OneCycleLR cycles it


def _scheduler_cfg(compose, name: str, *overrides: str):
    cfg = compose([f"scheduler={name}", *overrides])
    validate(cfg)
    return cfg.scheduler


def _scheduler(compose, name: str, total_steps: int, *overrides: str, lr: float = LR):
    opt = _optimizer(lr)
    return opt, build_scheduler(_scheduler_cfg(compose, name, *overrides), opt, total_steps)


def _drive(opt, sched, steps: int) -> list[float]:
    """The LR each optimizer step uses, stepping like the trainer: optimizer.step() then scheduler.step()."""
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize("name", ["cosine", "step", "constant", "plateau"])
def test_linear_warmup(compose, name: str) -> None:
    opt, sched = _scheduler(compose, name, 40, "scheduler.warmup_steps=4")
    lrs = _drive(opt, sched, 5)
    assert lrs[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])  # lr * (k + 1) / warmup_steps
    assert lrs[4] == pytest.approx(LR)  # the first step after warmup starts the decay from the full lr


def test_cosine_decays_monotonically_to_min_lr_at_the_last_step(compose) -> None:
    total, warmup = 20, 4
    opt, sched = _scheduler(compose, "cosine", total, f"scheduler.warmup_steps={warmup}", "scheduler.min_lr_ratio=0.1")
    lrs = _drive(opt, sched, total)
    assert lrs[-1] == pytest.approx(LR * 0.1)
    assert min(lrs[warmup:]) == pytest.approx(LR * 0.1)
    after = lrs[warmup - 1 :]
    assert all(a >= b for a, b in itertools.pairwise(after)), after
    assert after[0] > after[-1]
    # 16 steps after warmup span progress 0..1 in 15 intervals: 5 steps in, progress = 1/3, cos(pi/3) = 0.5.
    assert lrs[warmup + 5] == pytest.approx(LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 3))))


def test_step_decays_by_gamma_every_step_size(compose) -> None:
    opt, sched = _scheduler(
        compose, "step", 100, "scheduler.warmup_steps=2", "scheduler.step_size=3", "scheduler.gamma=0.5"
    )
    lrs = _drive(opt, sched, 11)
    expected = [0.05, 0.1] + [0.1] * 3 + [0.05] * 3 + [0.025] * 3
    assert lrs == pytest.approx(expected)


def test_constant_stays_constant(compose) -> None:
    opt, sched = _scheduler(compose, "constant", 30)
    assert _drive(opt, sched, 30) == [LR] * 30


def test_onecycle_peaks_at_lr_after_warmup_and_ends_low(compose) -> None:
    total, warmup = 30, 6
    opt, sched = _scheduler(compose, "onecycle", total, f"scheduler.warmup_steps={warmup}")
    lrs = _drive(opt, sched, total)
    peak = max(range(total), key=lrs.__getitem__)
    assert peak == warmup - 1  # like linear warmup: the warmup_steps-th optimizer step runs at the full lr
    assert lrs[peak] == pytest.approx(LR)
    assert all(a < b for a, b in itertools.pairwise(lrs[: peak + 1]))
    assert all(a > b for a, b in itertools.pairwise(lrs[peak:]))
    assert lrs[0] < LR / 10 and lrs[-1] < LR * 1e-3


def test_plateau_warms_up_per_step_then_decays_on_a_stalled_metric(compose) -> None:
    opt, sched = _scheduler(
        compose,
        "plateau",
        100,
        "scheduler.warmup_steps=3",
        "scheduler.patience=2",
        "scheduler.factor=0.5",
        "scheduler.monitor=val/loss",
        "scheduler.mode=min",
    )
    assert isinstance(sched, WarmupPlateau) and sched.monitor == "val/loss"
    lrs = _drive(opt, sched, 2)
    sched.step_metric(0.1)  # during warmup: ignored (were it recorded as the best, 1.0 below would not improve)
    lrs += _drive(opt, sched, 5)
    assert lrs == pytest.approx([LR / 3, 2 * LR / 3, LR, LR, LR, LR, LR])
    sched.step_metric(1.0)  # first validation after warmup: the best so far
    sched.step_metric(0.5)  # improving
    for _ in range(2):  # patience=2 non-improving validations: tolerated
        sched.step_metric(0.5)
        assert sched.get_last_lr() == pytest.approx([LR])
    sched.step_metric(0.5)  # the third: decay by factor
    assert sched.get_last_lr() == pytest.approx([LR * 0.5])
    assert _drive(opt, sched, 3) == pytest.approx([LR * 0.5] * 3)  # per-step calls leave the decayed lr alone


def test_plateau_mode_max(compose) -> None:
    _, sched = _scheduler(compose, "plateau", 100, "scheduler.mode=max", "scheduler.patience=0")
    sched.step_metric(0.5)
    sched.step_metric(0.6)  # higher is better: an improvement
    assert sched.get_last_lr() == pytest.approx([LR])
    sched.step_metric(0.6)
    assert sched.get_last_lr() == pytest.approx([LR * 0.5])


def test_plateau_reads_its_monitor_from_the_validation_metrics(compose) -> None:
    _, sched = _scheduler(
        compose, "plateau", 100, "scheduler.monitor=val/acc", "scheduler.mode=max", "scheduler.warmup_steps=0"
    )
    sched.step_validation({"val/loss": 0.3, "val/acc": 0.9})
    assert sched.plateau.best == 0.9
    with pytest.raises(
        UserError, match=r"scheduler.monitor='val/acc' is not a validation metric; choose one of val/loss"
    ):
        sched.step_validation({"val/loss": 0.3})


# --------------------------------------------------------------------------- resume
ROUND_TRIP = [
    ("cosine", ["scheduler.warmup_steps=4", "scheduler.min_lr_ratio=0.05"]),
    ("step", ["scheduler.warmup_steps=4", "scheduler.step_size=5", "scheduler.gamma=0.5"]),
    ("constant", ["scheduler.warmup_steps=4"]),
    ("onecycle", ["scheduler.warmup_steps=4"]),
    ("plateau", ["scheduler.warmup_steps=4", "scheduler.patience=1"]),
]


def _drive_with_validations(opt, sched, start: int, stop: int) -> list[float]:
    """Steps start..stop-1; a plateau scheduler also sees a stalled metric every 4 steps, as after validation."""
    lrs = []
    for step in range(start, stop):
        lrs += _drive(opt, sched, 1)
        if isinstance(sched, WarmupPlateau) and step % 4 == 3:
            sched.step_metric(1.0)
    return lrs


@pytest.mark.parametrize("resume_at", [2, 9])  # inside warmup, and after it (plateau: between two validations)
@pytest.mark.parametrize(("name", "overrides"), ROUND_TRIP, ids=[name for name, _ in ROUND_TRIP])
def test_scheduler_state_round_trip_continues_identically(
    compose, tmp_path, name: str, overrides: list[str], resume_at: int
) -> None:
    total, cfg = 24, _scheduler_cfg(compose, name, *overrides)
    opt = _optimizer()
    sched = build_scheduler(cfg, opt, total)
    reference = _drive_with_validations(opt, sched, 0, total)
    assert len(set(reference)) > 2  # the schedule changes over the run, or the comparison proves nothing

    opt = _optimizer()
    sched = build_scheduler(cfg, opt, total)
    first = _drive_with_validations(opt, sched, 0, resume_at)
    path = tmp_path / "state.pt"
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, path)
    state = torch.load(path, weights_only=True)

    opt = _optimizer()  # fresh objects, restored like Trainer.restore: optimizer first, then the scheduler
    sched = build_scheduler(cfg, opt, total)
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    rest = _drive_with_validations(opt, sched, resume_at, total)
    assert first + rest == pytest.approx(reference, rel=1e-12, abs=0)
