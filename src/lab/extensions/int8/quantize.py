"""INT8 ONNX models from model.onnx with onnxruntime's quantization tools.

dynamic: weights stored as int8, activations quantized on the fly per batch; no data needed, but convolutions
become ConvInteger, which onnxruntime runs far slower than fp32 on CPU.
static: QDQ format, activation ranges calibrated once on training samples, weights per channel. onnxruntime fuses
each DequantizeLinear -> op -> QuantizeLinear group into an integer kernel (QLinearConv, QLinearMatMul), the fast
path on CPUs with int8 dot products (VNNI) and the format TensorRT and other runtimes read too.
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
    """model.onnx after quant_pre_process: shape inference and onnxruntime's graph optimizations (BatchNorm
    folded into Conv...), which the quantizers need to see the final Conv/MatMul nodes they rewrite. The
    quantizers log per tensor through the root logger: quiet while they run."""
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
    """Feeds `batches` (model inputs as the loader yields them) to the calibrator, one session run each."""
    from onnxruntime.quantization import CalibrationDataReader

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{INPUT_NAME: np.ascontiguousarray(b.numpy())} for b in batches])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    return Batches()


def quantize_static_int8(onnx_path: Path, out_path: Path, calibration: Sequence[torch.Tensor]) -> Path:
    """QDQ with per-channel int8 weights and uint8 activations (u8 x s8 is what x86 VNNI multiplies natively),
    activation ranges from min/max over the calibration batches."""
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
