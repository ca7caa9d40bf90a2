"""debug=profile's StepProfiler on its own loops: the bottleneck it names, the files it writes and attaches, each
shipped task's real train_step under it, and the step-time breakdown on hand-made profiler events."""

from __future__ import annotations

import itertools
import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from helpers import in_process_trainer
from lab.config import options
from lab.data.batches import split, to_device
from lab.extensions.diagnostics.options import ProfileConfig
from lab.extensions.diagnostics.profiling import CATEGORIES, TABLE_FILE, TRACE_FILE, StepProfiler, breakdown

CPU = torch.device("cpu")


class FakeTracker:
    is_writer = True

    def __init__(self) -> None:
        self.files: list[Path] = []
        self.values: dict = {}

    def save_file(self, path: Path) -> None:
        self.files.append(Path(path))

    def summary(self, values: dict) -> None:
        self.values.update(values)


class SlowSamples(Dataset):
    """A dataset whose __getitem__ is the bottleneck (think JPEG decoding with heavy augmentation)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.1)
        return torch.randn(8), index % 2


def train(loader, profiler: StepProfiler, steps: int) -> None:
    """A plain training loop with the profiler stepped after each optimizer step, as the trainer does."""
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, targets in itertools.islice(loader, steps):
        nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad()
        profiler.step()


def test_a_slow_loader_is_named_the_bottleneck_and_the_results_are_written(tmp_path: Path) -> None:
    tracker = FakeTracker()
    with StepProfiler(ProfileConfig(), tmp_path, tracker, CPU) as profiler:
        train(DataLoader(SlowSamples(), batch_size=2), profiler, steps=7)
    result = profiler.result
    assert result is not None and result.steps == 3  # wait 1, warmup 1, active 3: the rest is not recorded
    assert result.bottleneck == "data" and result.share("data") > 0.5
    assert result.line().startswith("profile: bottleneck data wait (")
    assert "data.num_workers" in result.advice()
    trace = json.loads((tmp_path / TRACE_FILE).read_text())
    assert any(event.get("name", "").startswith("ProfilerStep#") for event in trace["traceEvents"])
    table = (tmp_path / TABLE_FILE).read_text()
    assert table.startswith(result.line()) and "top operators by self CPU time" in table and "aten::" in table
    assert tracker.files == [tmp_path / TRACE_FILE, tmp_path / TABLE_FILE]
    assert tracker.values["profile/bottleneck"] == "data"


def test_a_run_that_ends_before_the_recorded_steps_says_so(tmp_path: Path, caplog) -> None:
    loader = DataLoader([(torch.randn(8), 0)] * 8, batch_size=4)
    with caplog.at_level(logging.WARNING), StepProfiler(ProfileConfig(wait=2), tmp_path) as profiler:
        train(loader, profiler, steps=2)
    assert profiler.result is None and not (tmp_path / TRACE_FILE).exists()
    assert "before the recorded ones (steps 4-6)" in caplog.text and "trainer.limit_train_batches" in caplog.text


def test_a_run_that_ends_during_the_recorded_steps_keeps_them(tmp_path: Path) -> None:
    loader = DataLoader([(torch.randn(8), 0)] * 16, batch_size=4)
    with StepProfiler(ProfileConfig(wait=0, warmup=1, active=5), tmp_path) as profiler:
        train(loader, profiler, steps=3)  # 2 of the 5 recorded steps
    assert profiler.result is not None and profiler.result.steps == 2  # not the range after the last step
    assert (tmp_path / TRACE_FILE).is_file() and (tmp_path / TABLE_FILE).is_file()


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
def test_each_task_s_train_step_under_the_profiler(compose, tmp_path: Path, overrides: list[str]) -> None:
    from lab.data.datasets import build as build_data
    from lab.models.common import build as build_model
    from lab.tasks.common import build as build_task

    cfg = compose([*overrides, "logger=none", "trainer.progress_bar=off", "debug=profile"])
    cfg.data = options.instantiate("data", cfg.data)
    datamodule = build_data(cfg.data)
    task = build_task(cfg.task, datamodule.meta)
    model = build_model(cfg.model, datamodule.meta)
    loader = DataLoader(datamodule.train, batch_size=cfg.data.batch_size, shuffle=True, drop_last=True)
    trainer = in_process_trainer(cfg, model, task, loader, tmp_path)
    try:
        with StepProfiler(cfg.callbacks.profile, tmp_path, trainer.tracker, CPU) as profiler:
            for batch in itertools.islice(loader, 6):
                trainer.train_step([to_device(split(batch), CPU)])
                profiler.step()
    finally:
        trainer.tracker.finish()
    result = profiler.result
    assert result is not None and result.steps == cfg.callbacks.profile.active
    assert sum(result.share(c) for c in CATEGORIES) == pytest.approx(1.0)  # every microsecond in one category
    assert result.share("forward") > 0 and result.share("backward") > 0 and result.share("optimizer") > 0
    assert (tmp_path / TRACE_FILE).stat().st_size > 0 and "aten::" in (tmp_path / TABLE_FILE).read_text()


# --------------------------------------------------------------------------- the breakdown on hand-made events
def event(name: str, cpu: float, parent=None, device: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(name=name, cpu_time_total=cpu, device_time_total=device, cpu_parent=parent)


def test_step_time_is_split_by_what_each_range_is() -> None:
    step = event("ProfilerStep#3", 100.0)
    events = [
        step,
        event("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 30.0, step),
        event("aten::to", 5.0, step, device=9.0),  # a host-to-device copy; its memcpy took 9 us on the GPU
        event("aten::linear", 20.0, step, device=40.0),
        event("aten::addmm", 19.0, parent=None),  # nested ranges count through their top-level parent only
        event("autograd::engine::evaluate_function: AddmmBackward0", 15.0, step, device=10.0),
        event("Optimizer.step#AdamW.step", 8.0, step),
        event("aten::_foreach_norm", 2.0, step),  # gradient clipping
        event("autograd::engine::evaluate_function: MmBackward0", 6.0, parent=None),  # autograd's device thread
    ]
    cpu = breakdown(events, on_device=False)
    assert cpu.steps == 1 and cpu.total_us == 100.0
    assert cpu.per_category_us == {
        "data": 30.0,
        "copy": 5.0,
        "forward": 20.0,
        "backward": 21.0,
        "optimizer": 10.0,
        "other": 20.0,  # 100 - (30 + 5 + 20 + 15 + 8 + 2) covered by no range
    }
    assert cpu.bottleneck == "data" and cpu.share("data") == pytest.approx(0.3)
    gpu = breakdown(events, on_device=True)  # a range costs its kernels' time when that is longer
    assert gpu.per_category_us["forward"] == 40.0 and gpu.per_category_us["copy"] == 9.0
    assert gpu.bottleneck == "forward" and "forward (40% of step time" in gpu.line()


def test_no_recorded_step_is_reported_as_such() -> None:
    assert breakdown([], on_device=False).line() == "profile: no training step was recorded"
