"""The page's GPU benchmark, `python -m lab.extensions.pretrained.bench_gpu_throughput`: it needs a GPU, so its
`--tiny` CPU sizes are run here (its compiled variant measured, its MFU and speed-up columns computed)."""

from __future__ import annotations

import json

import pytest
import torch

from lab.extensions.pretrained import bench_gpu_throughput as bench
from lab.runtime import Precision
from lab.tasks.classification import Classification
from lab.training import flops

CPU = torch.device("cpu")
FP32 = Precision("fp32", autocast_dtype=None, grad_scaler=False)


def test_gpu_throughput_bench_measures_its_compiled_variant_on_the_cpu() -> None:
    case = bench.TINY_CASES[0]
    images_per_s, image_flops = bench.measure(case, "bf16+cl+compile", CPU, warmup=1, steps=1, compile_backend="eager")
    inputs, targets = torch.randn(case.batch_size, 3, 8, 8), torch.zeros(case.batch_size, dtype=torch.long)
    plain = flops.count_flops(bench.build_model(case, CPU), Classification(10), inputs, targets, CPU, FP32)
    assert images_per_s > 0 and image_flops == plain // case.batch_size  # autocast changes no FLOP count


def test_gpu_throughput_bench_reports_mfu_and_the_ratio_to_fp32(monkeypatch, tmp_path) -> None:
    speeds = {"fp32": 100.0, "bf16": 250.0, "bf16+cl+compile": 400.0}
    monkeypatch.setattr(bench, "measure", lambda case, variant, *args, **kwargs: (speeds[variant], 2_000_000))
    rows = bench.main(["--tiny", "--peak-flops", "1e9", "--json", str(tmp_path / "rows.json")])
    assert len(rows) == 6 and json.loads((tmp_path / "rows.json").read_text()) == rows
    for row in rows:
        assert row["mfu"] == pytest.approx(speeds[row["variant"]] * 2e6 / 1e9)
        assert row["speedup"] == pytest.approx(speeds[row["variant"]] / 100.0)
