"""Model FLOPs utilization (MFU): the share of the devices' dense peak that training turns into model arithmetic.

A step's FLOPs are counted once, at the start, over one forward and backward of a real batch (matmuls,
convolutions and attention, what the peak figures measure; recomputation is not counted: MFU measures the model's
FLOPs, not the hardware's). Each log line divides them by the throughput the step window measured, so the step
pays nothing. A CPU or an unlisted GPU, without `trainer.peak_flops`, has no peak, so no MFU and no count.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

_T = 1e12
# Dense (no 2:4 sparsity) peak FLOP/s of one GPU, from NVIDIA's datasheets. bf16/fp16 and tf32 run on tensor
# cores (fp16 with fp32 accumulation, as autocast uses), fp32 on CUDA cores. Patterns are matched against
# torch.cuda.get_device_name() in order and the first match wins, so variants come before their family.
#   H100 SXM / H200 SXM: H100 and H200 datasheets (989 bf16/fp16, 495 tf32, 67 fp32 TFLOPS; half the sparse figures)
#   H100 PCIe: H100 datasheet (756 / 378 / 51); H200 NVL: H200 datasheet (836 / 418 / 60)
#   A100 SXM and PCIe: A100 datasheet (312 / 156 / 19.5)
#   L4: L4 datasheet (121 / 60 / 30.3); A10: A10 datasheet (125 / 62.5 / 31.2)
#   V100: V100 datasheet, fp16 tensor cores only (SXM2 125 / 15.7 fp32; PCIe 112 / 14)
#   RTX 4090: Ada Lovelace whitepaper (165.2 fp16/bf16 with fp32 accumulate, 82.6 tf32, 82.6 fp32)
#   RTX 3090: Ampere GA102 whitepaper (71 fp16/bf16 with fp32 accumulate, 35.6 tf32, 35.6 fp32)
PEAK_FLOPS: list[tuple[str, dict[str, float]]] = [
    (r"H100.*(PCIe|PCI)", {"bf16": 756 * _T, "fp16": 756 * _T, "tf32": 378 * _T, "fp32": 51.2 * _T}),
    (r"H200.*NVL", {"bf16": 835.5 * _T, "fp16": 835.5 * _T, "tf32": 417.5 * _T, "fp32": 60 * _T}),
    (r"H100|H200", {"bf16": 989.4 * _T, "fp16": 989.4 * _T, "tf32": 494.7 * _T, "fp32": 66.9 * _T}),
    (r"A100", {"bf16": 312 * _T, "fp16": 312 * _T, "tf32": 156 * _T, "fp32": 19.5 * _T}),
    (r"\bL4\b", {"bf16": 121 * _T, "fp16": 121 * _T, "tf32": 60 * _T, "fp32": 30.3 * _T}),
    (r"\bA10\b", {"bf16": 125 * _T, "fp16": 125 * _T, "tf32": 62.5 * _T, "fp32": 31.2 * _T}),
    (r"V100.*PCIE", {"fp16": 112 * _T, "fp32": 14 * _T}),
    (r"V100", {"fp16": 125 * _T, "fp32": 15.7 * _T}),
    (r"RTX 4090", {"bf16": 165.2 * _T, "fp16": 165.2 * _T, "tf32": 82.6 * _T, "fp32": 82.6 * _T}),
    (r"RTX 3090", {"bf16": 71 * _T, "fp16": 71 * _T, "tf32": 35.6 * _T, "fp32": 35.6 * _T}),
]
_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def table_peak(device_name: str, dtype: str) -> float | None:
    """Return the table's peak for a GPU name and dtype, or None. tf32 falls back to fp32 on GPUs without it."""
    for pattern, peaks in PEAK_FLOPS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return peaks.get(dtype, peaks["fp32"] if dtype == "tf32" else None)
    return None


def compute_dtype(autocast_dtype: torch.dtype | None, tf32: bool) -> str:
    """Return the dtype matmuls run in: the autocast dtype, else tf32 if `trainer.tf32` allows it, else fp32."""
    return _DTYPE_NAMES.get(autocast_dtype, "fp16") if autocast_dtype is not None else ("tf32" if tf32 else "fp32")


def peak_flops(
    override: float | None, device: torch.device, autocast_dtype: torch.dtype | None, tf32: bool
) -> float | None:
    """Return one device's peak FLOP/s: `override` (`trainer.peak_flops`), else the table's, else None."""
    if override is not None:
        return override
    if device.type != "cuda":
        return None
    name, dtype = torch.cuda.get_device_name(device), compute_dtype(autocast_dtype, tf32)
    peak = table_peak(name, dtype)
    if peak is None:
        log.info("no peak FLOP/s known for %s %s: set trainer.peak_flops to log train/mfu", name, dtype)
    return peak


def count_flops(model: nn.Module, task: Any, inputs: Any, targets: Any, device: torch.device, precision: Any) -> int:
    """Count the FLOPs of one forward and backward, run as the training step runs them (autocast, task loss).
    In eval mode, so BatchNorm statistics do not move and dropout draws no random numbers: the run then goes on
    exactly as without the count. Gradients are dropped afterwards."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter:
            with precision.autocast(device):
                outputs = model(inputs)
            loss = task.loss(outputs, targets)
            if loss.requires_grad:
                loss.backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return int(counter.get_total_flops())


class Utilization:
    """Turn one counted batch's FLOPs and the devices' peak into train/mfu and train/flops_per_step. The workflow
    counts before the model is wrapped (`lab.training.start.log_start`), because under DDP or FSDP a forward on
    rank 0 alone would be a collective."""

    def __init__(self, batch_flops: int, batch_size: int, peak: float) -> None:
        self.flops_per_sample, self.batch_size, self.peak = batch_flops / batch_size, batch_size, peak

    def mfu(self, samples_per_s: float, world_size: int) -> float:
        return samples_per_s * self.flops_per_sample / (self.peak * world_size)

    def flops_per_step(self, grad_accum_steps: int, world_size: int) -> float:
        return self.flops_per_sample * self.batch_size * grad_accum_steps * world_size
