"""Make INT8 ONNX models from model.onnx with onnxruntime's quantization tools.

dynamic: int8 weights, activations quantized on the fly per batch. It needs no data, but convolutions become
ConvInteger, which onnxruntime runs far slower than fp32 on CPU.
static: QDQ format, per-channel weights, activation ranges calibrated once on training samples. onnxruntime fuses
each DequantizeLinear -> op -> QuantizeLinear group into an integer kernel, the fast path on CPUs with int8 dot
products (VNNI). TensorRT and other runtimes read this format too.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lab.exporting.writers import INPUT_NAME, quiet_logs

# variant -> (manifest artifact key, file name in the export run dir)
VARIANTS = {"dynamic": ("onnx_int8", "model.int8.onnx"), "static": ("onnx_int8_static", "model.int8-static.onnx")}
# export.int8.quantize -> the variants it writes
MODES = {"dynamic": ("dynamic",), "static": ("static",), "both": ("dynamic", "static")}


@contextlib.contextmanager
def _prepared(onnx_path: Path) -> Iterator[Path]:
    """Yield model.onnx after quant_pre_process, with shapes inferred and graph optimizations applied.

    The quantizers need the final Conv/MatMul nodes, e.g. with BatchNorm folded in. They also log per tensor
    through the root logger, so logs are quiet while they run."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory() as tmp, quiet_logs(), quiet_logs("onnxruntime"):
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(onnx_path), str(prepared))
        yield prepared


def quantize_dynamic_int8(onnx_path: Path, out_path: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _prepared(onnx_path) as prepared:
        quantize_dynamic(prepared, out_path, weight_type=QuantType.QInt8)
    return out_path


def calibration_reader(batches: Sequence[torch.Tensor]) -> Any:  # onnxruntime.quantization.CalibrationDataReader
    """Feed `batches` of model inputs to the calibrator, one session run each."""
    from onnxruntime.quantization import CalibrationDataReader

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{INPUT_NAME: np.ascontiguousarray(b.numpy())} for b in batches])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    return Batches()


def quantize_static_int8(onnx_path: Path, out_path: Path, calibration: Sequence[torch.Tensor]) -> Path:
    """Quantize to QDQ with per-channel int8 weights and uint8 activations, ranges from the calibration min/max.

    x86 VNNI multiplies u8 x s8 natively."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    with _prepared(onnx_path) as prepared:
        quantize_static(
            prepared,
            out_path,
            calibration_reader(calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            weight_type=QuantType.QInt8,
            activation_type=QuantType.QUInt8,
        )
    return out_path


def quantize(variant: str, onnx_path: Path, folder: Path, calibration: Sequence[torch.Tensor]) -> Path:
    """Write the `variant` INT8 model of `onnx_path` into `folder`; its file name is VARIANTS[variant][1]."""
    out_path = folder / VARIANTS[variant][1]
    if variant == "static":
        return quantize_static_int8(onnx_path, out_path, calibration)
    return quantize_dynamic_int8(onnx_path, out_path)
