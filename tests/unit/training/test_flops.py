"""MFU: FLOPs of a step counted once (hand-computed for an MLP), the count leaves the run untouched, the peak table,
and train/mfu / train/flops_per_step in a real Trainer run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import compose_config, in_process_trainer
from lab.config import validate
from lab.distributed.parallel import Parallel
from lab.errors import ConfigError
from lab.runtime import Precision
from lab.tasks.classification import Classification
from lab.tracking import Tracker
from lab.training import flops
from lab.training.start import log_start

CPU = torch.device("cpu")
FP32 = Precision("fp32", autocast_dtype=None, grad_scaler=False)
# Linear(8, 16) -> ReLU -> Linear(16, 3), per sample: forward 2*(8*16 + 16*3); backward: the second layer's weight
# and input gradients 2*16*3 each, the first layer's weight gradient 2*8*16 (the input needs no gradient)
MLP_FLOPS_PER_SAMPLE = 2 * (8 * 16 + 16 * 3) + 2 * 16 * 3 * 2 + 2 * 8 * 16


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _loader(n: int = 64, batch_size: int = 8) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(n, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator))
    return DataLoader(data, batch_size=batch_size, shuffle=False, drop_last=True)


def test_count_is_forward_plus_backward_and_leaves_the_model_as_it_was() -> None:
    assert flops.count_flops(
        _mlp(), Classification(3), torch.randn(5, 8), torch.zeros(5, dtype=torch.long), CPU, FP32
    ) == (5 * MLP_FLOPS_PER_SAMPLE)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 3)).train()
    inputs, targets = torch.randn(6, 8), torch.zeros(6, dtype=torch.long)
    before, rng = {k: v.clone() for k, v in model.state_dict().items()}, torch.get_rng_state()
    assert flops.count_flops(model, Classification(3), inputs, targets, CPU, FP32) > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BatchNorm statistics unmoved
    assert torch.equal(rng, torch.get_rng_state())  # dropout drew nothing: the run's random stream is unchanged
    assert model.training and all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "dtype", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4e12),
        ("NVIDIA H200", "tf32", 494.7e12),
        ("NVIDIA H100 PCIe", "fp16", 756e12),
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5e12),
        ("NVIDIA A10", "bf16", 125e12),  # not the A100
        ("NVIDIA L4", "tf32", 60e12),
        ("NVIDIA L40S", "bf16", None),  # not the L4, and not in the table
        ("Tesla V100-SXM2-16GB", "tf32", 15.7e12),  # no tf32 on Volta: its fp32
        ("Tesla V100-PCIE-32GB", "bf16", None),  # no bf16 tensor cores
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2e12),
        ("NVIDIA GeForce RTX 3090", "fp16", 71e12),
    ],
)
def test_peak_table_matches_gpu_names_and_dtypes(name, dtype, peak) -> None:
    assert flops.table_peak(name, dtype) == (None if peak is None else pytest.approx(peak))


def test_peak_comes_from_the_override_and_the_compute_dtype_from_the_precision() -> None:
    assert flops.peak_flops(2e12, CPU, None, True) == 2e12
    assert flops.peak_flops(None, CPU, torch.bfloat16, True) is None  # a CPU has no table entry
    assert flops.compute_dtype(torch.bfloat16, True) == "bf16" and flops.compute_dtype(torch.float16, False) == "fp16"
    assert flops.compute_dtype(None, True) == "tf32" and flops.compute_dtype(None, False) == "fp32"
    with pytest.raises(ConfigError, match=r"trainer\.peak_flops must be > 0"):
        validate(compose_config(["trainer.peak_flops=0"]))


def test_trainer_logs_mfu_from_its_throughput_and_flops_per_step_in_the_summary(tmp_path) -> None:
    cfg = compose_config(
        ["trainer.peak_flops=1e9", "trainer.max_epochs=1", "trainer.grad_accum_steps=2", "trainer.log_every_n_steps=2"]
    )
    model, task, loader = _mlp(), Classification(3), _loader()
    tracker = Tracker(tmp_path / "report").start()
    meter = log_start(model, task, loader, tmp_path, CPU, FP32, tracker, Parallel(), peak_flops=1e9)
    tracker.finish("completed")
    assert meter.flops_per_sample == MLP_FLOPS_PER_SAMPLE
    assert log_start(model, task, loader, tmp_path, CPU, FP32, tracker, Parallel()) is None  # no peak, no count

    trainer = in_process_trainer(cfg, model, task, loader, tmp_path / "run", utilization=meter)
    summary = trainer.fit()
    trainer.tracker.finish("completed")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "train/throughput" in r]
    assert len(logged) == 2  # 4 optimizer steps of 2 micro-batches, a line every 2 steps
    for row in logged:
        assert row["train/mfu"] == pytest.approx(row["train/throughput"] * MLP_FLOPS_PER_SAMPLE / 1e9)
    assert summary["train/flops_per_step"] == MLP_FLOPS_PER_SAMPLE * 8 * 2  # batch 8, 2 micro-batches, 1 rank


def test_a_meta_device_model_is_summarised_and_counted_without_weights(tmp_path, caplog) -> None:
    """dist=fsdp's meta-device init: the start report runs on the model before it has weights, on meta copies of
    the first batch, and says what the model with weights would (the same table, parameter counts and FLOPs)."""
    task, loader = Classification(3), _loader()
    tracker = Tracker(tmp_path / "report").start()
    log_start(_mlp(), task, loader, tmp_path, CPU, FP32, tracker, Parallel(), peak_flops=1e9)
    with_weights = (tmp_path / "model_summary.txt").read_text()
    with torch.device("meta"):
        model = _mlp()
    with caplog.at_level("INFO", logger="lab.training.start"):
        meter = log_start(model, task, loader, tmp_path, CPU, FP32, tracker, Parallel(), peak_flops=1e9)
    tracker.finish("completed")
    assert meter is not None and meter.flops_per_sample == MLP_FLOPS_PER_SAMPLE
    assert (tmp_path / "model_summary.txt").read_text() == with_weights
    assert "Total params: 195" in with_weights  # 8 * 16 + 16 + 16 * 3 + 3
    assert "parameters: 195 trainable, 0 frozen" in caplog.messages
    assert all(p.is_meta and p.grad is None for p in model.parameters())


def test_a_meta_device_gpt_counts_the_attention_kernel_the_device_runs(tmp_path) -> None:
    """On the meta device attention would run its math path (counted otherwise than the kernel the device picks):
    the count runs on a weightless stand-in on the device, and equals the whole model's."""
    from lab.models.common import build as build_model
    from lab.tasks.language_model import LanguageModel

    model_cfg, meta = {"name": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 16}, {"vocab_size": 20, "block_size": 8}
    tokens = torch.randint(0, 20, (4, 9), generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=4)
    tracker, task = Tracker(tmp_path / "report").start(), LanguageModel(meta)
    whole = log_start(build_model(model_cfg, meta), task, loader, tmp_path, CPU, FP32, tracker, Parallel(), 1e9)
    with torch.device("meta"):
        model = build_model(model_cfg, meta)
    on_meta = log_start(model, task, loader, tmp_path, CPU, FP32, tracker, Parallel(), 1e9)
    tracker.finish("completed")
    assert whole is not None and on_meta is not None
    assert on_meta.flops_per_sample == whole.flops_per_sample
    assert all(p.is_meta for p in model.parameters())


def test_a_loss_that_cannot_run_on_the_meta_device_skips_the_count_saying_so(tmp_path, caplog) -> None:
    class ReadsLabels(Classification):
        def loss(self, outputs, targets):
            assert int(targets.max()) < 3  # reads a value: no meta tensor has one
            return super().loss(outputs, targets)

    with torch.device("meta"):
        model = _mlp()
    tracker = Tracker(tmp_path / "report").start()
    with caplog.at_level("INFO", logger="lab.training.start"):
        assert log_start(model, ReadsLabels(3), _loader(), tmp_path, CPU, FP32, tracker, Parallel(), 1e9) is None
    tracker.finish("completed")
    assert any(
        m.startswith("no FLOP count (so no train/mfu): the step cannot run without the model's weights")
        for m in caplog.messages
    )
