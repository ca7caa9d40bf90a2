"""The out-of-memory report on the CPU: torch.cuda's memory functions answer as a GPU that ran out would, and a
toy model raises torch.OutOfMemoryError in a training step or in evaluation."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import in_process_trainer
from lab import cli
from lab.runtime import Precision
from lab.tasks.base import BaseTask
from lab.training import oom
from lab.training.evaluation import accumulate_metrics

GIB = 2**30
TORCH_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 1 GiB is free."
)
SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 2         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   1536 MiB |   3072 MiB |  40960 MiB |  39424 MiB |
|---------------------------------------------------------------------------|
| Active memory         |   1536 MiB |   3072 MiB |  40960 MiB |  39424 MiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  14336 MiB |  14336 MiB |  14336 MiB |      0 B   |
|---------------------------------------------------------------------------|
| Allocations           |      42    |      97    |   12000    |   11958    |
|===========================================================================|"""


@pytest.fixture
def full_gpu(monkeypatch):
    """Makes torch.cuda answer as a 16 GiB GPU after an OOM: 1.5 GiB allocated (peak 3), 14 GiB reserved
    (fragmented). Called as the model runs out of memory: training itself stays on the CPU."""
    answers = {
        "is_available": lambda: True,
        "current_device": lambda: 0,
        "mem_get_info": lambda device=None: (1 * GIB, 16 * GIB),
        "memory_allocated": lambda device=None: int(1.5 * GIB),
        "max_memory_allocated": lambda device=None: 3 * GIB,
        "memory_reserved": lambda device=None: 14 * GIB,
        "max_memory_reserved": lambda device=None: 14 * GIB,
        "memory_summary": lambda device=None, abbreviated=False: SUMMARY,
        "memory_snapshot": lambda: [
            {
                "device": 0,
                "blocks": [{"size": GIB, "state": "active_allocated"}, {"size": 8 * GIB, "state": "inactive"}],
            },
            {"device": 0, "blocks": [{"size": GIB // 2, "state": "active_allocated"}]},
        ],
    }
    return lambda: [monkeypatch.setattr(torch.cuda, name, answer) for name, answer in answers.items()]


class Hungry(nn.Module):
    """Runs out of memory on its `fail_at`-th forward pass in the given mode."""

    def __init__(self, fail_at: int, training: bool, out_of_memory) -> None:
        super().__init__()
        self.linear, self.fail_at, self.fail_training, self.calls = nn.Linear(3, 1), fail_at, training, 0
        self.out_of_memory = out_of_memory

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training == self.fail_training:
            self.calls += 1
            if self.calls == self.fail_at:
                self.out_of_memory()
                raise torch.OutOfMemoryError(TORCH_MESSAGE)
        return self.linear(x)


class SquaredError(BaseTask):
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((outputs.squeeze(-1) - targets) ** 2).sum()


LOADER = DataLoader(TensorDataset(torch.randn(32, 3), torch.randn(32)), batch_size=8)


def test_out_of_memory_in_a_training_step(compose, tmp_path: Path, full_gpu, caplog) -> None:
    cfg = compose(["logger=none", "trainer.progress_bar=off", "model=cnn", "data.batch_size=64"])
    trainer = in_process_trainer(
        cfg, Hungry(fail_at=2, training=True, out_of_memory=full_gpu), SquaredError(), LOADER, tmp_path
    )
    try:
        with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as ended, cli.user_errors(), oom.explained(cfg):
            trainer.fit()
    finally:
        trainer.tracker.finish()
    line = str(ended.value.code)
    assert line.startswith("error: CUDA out of memory in training step 2 (epoch 1): try data.batch_size=32 ")
    assert "trainer.grad_accum_steps=2" in line and "\n" not in line
    report = caplog.text
    assert "Tried to allocate 2.00 GiB" in report
    assert "1.50 GiB allocated now, peak 3.00 GiB; 14.00 GiB reserved by PyTorch" in report
    assert "1.00 GiB free of 16.00 GiB" in report
    assert "| Allocated memory      |   1536 MiB |   3072 MiB" in report and "CUDA OOMs: 1" in report
    assert "| Allocations " not in report  # only the usage rows of the summary
    assert "largest live allocations: 1.00 GiB, 512.0 MiB" in report  # the free 8 GiB block is not live
    for step in (
        "precision=bf16",
        "model.grad_checkpointing=true",
        "trainer.channels_last=true",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 12.50 GiB reserved but unused",
    ):
        assert step in report


def test_out_of_memory_while_evaluating_through_the_cli(compose, monkeypatch, full_gpu, caplog) -> None:
    """run_workflow explains an OOM of any workflow; in evaluation it suggests a smaller eval batch, no accumulation."""
    import lab.workflows.evaluate

    def evaluate(cfg) -> None:
        precision = Precision("fp32", autocast_dtype=None, grad_scaler=False)
        accumulate_metrics(
            Hungry(fail_at=1, training=False, out_of_memory=full_gpu),
            LOADER,
            None,
            device=torch.device("cpu"),
            precision=precision,
        )

    monkeypatch.setattr(lab.workflows.evaluate, "run", evaluate)
    cfg = compose(["logger=none", "model=mlp", "precision=bf16", "data.batch_size=64", "data.eval_batch_size=256"])
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as ended:
        cli.run_workflow(cfg, "evaluate")
    assert str(ended.value.code).startswith("error: CUDA out of memory while evaluating: try data.eval_batch_size=128")
    assert "grad_accum_steps" not in caplog.text and "precision=" not in caplog.text  # already bf16
    assert "channels_last" not in caplog.text and "grad_checkpointing" not in caplog.text  # an MLP has neither
