"""Dynamic INT8 quantization of an ONNX model with onnxruntime's tools, and what it costs and buys:
accuracy on the validation split and latency at batch 1 and 32, both against the fp32 ONNX model."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from lab.exporting.parity import Runner
from lab.exporting.writers import quiet_logs

LATENCY_BATCHES = (1, 32)
_WARMUP = 3


def quantize_int8(onnx_path: Path, out_path: Path) -> Path:
    """Weights stored as int8, activations quantized on the fly per batch (no calibration data needed).

    quant_pre_process first runs shape inference and onnxruntime's graph optimizations (BatchNorm folding...),
    which the quantizer needs to see the final Conv/MatMul nodes it rewrites."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # the quantizer logs per tensor through the root logger
    with tempfile.TemporaryDirectory() as tmp, quiet_logs(), quiet_logs("onnxruntime"):
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(onnx_path), str(prepared))
        quantize_dynamic(prepared, out_path, weight_type=QuantType.QInt8)
    return out_path


def accuracy(backend: Runner, loader: DataLoader) -> tuple[float, torch.Tensor]:
    """Top-1 accuracy over the whole loader, and the predictions (to compare two models sample by sample)."""
    correct, predictions = 0, []
    for inputs, targets in loader:
        predicted = backend(inputs).argmax(1)
        correct += int((predicted == targets).sum())
        predictions.append(predicted)
    total = sum(len(p) for p in predictions)
    return correct / max(total, 1), torch.cat(predictions)


def latency_ms(backend: Runner, example: torch.Tensor, batch_size: int, runs: int) -> float:
    """Median wall time of one call at `batch_size` (the example repeated), after a few warm-up calls."""
    reps = -(-batch_size // len(example))
    inputs = example.repeat(reps, *([1] * (example.ndim - 1)))[:batch_size].contiguous()
    for _ in range(_WARMUP):
        backend(inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        backend(inputs)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def compare_int8(
    fp32: Runner, int8: Runner, loader: DataLoader, example: torch.Tensor, runs: int
) -> dict[str, float | dict]:
    """The figures the manifest and the wandb run report for an int8 model."""
    acc_fp32, pred_fp32 = accuracy(fp32, loader)
    acc_int8, pred_int8 = accuracy(int8, loader)
    latency = {}
    for batch in LATENCY_BATCHES:
        ms_fp32 = latency_ms(fp32, example, batch, runs)
        ms_int8 = latency_ms(int8, example, batch, runs)
        latency[f"batch{batch}"] = {"fp32_ms": ms_fp32, "int8_ms": ms_int8, "speedup": ms_fp32 / ms_int8}
    return {
        "val_acc_fp32": acc_fp32,
        "val_acc_int8": acc_int8,
        "val_acc_delta": acc_int8 - acc_fp32,
        "top1_agreement": float((pred_fp32 == pred_int8).float().mean()),
        "val_samples": len(pred_fp32),
        "latency": latency,
    }
