"""`export.int8`: settings of the INT8 export step. No torch here; ``run`` imports the quantization code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.tools import ExportOptions, ExportStepConfig


@dataclass
class Int8Config(ExportStepConfig):
    # null | dynamic | static | both: write model.int8.onnx (dynamic) and/or model.int8-static.onnx (calibrated),
    # score each against fp32, and recommend in the manifest the fastest that stays within `tolerance`
    quantize: str | None = None
    calibration_samples: int = 256  # static: training samples whose activation ranges set the int8 scales
    # recommend an INT8 model only if its val metric is at most this fraction worse than fp32's
    tolerance: float = 0.01
    latency_runs: int = 50  # timed runs per batch size for the latency figures

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.quantize is not None:
            _one_of("export.int8.quantize", self.quantize, ("dynamic", "static", "both"))
        _require(
            self.calibration_samples >= 1,
            f"export.int8.calibration_samples must be >= 1, got {self.calibration_samples}",
        )
        _require(self.tolerance >= 0, f"export.int8.tolerance must be >= 0, got {self.tolerance}")
        _require(self.latency_runs >= 1, f"export.int8.latency_runs must be >= 1, got {self.latency_runs}")

    def conflict(self, export: ExportOptions) -> str | None:
        if self.quantize is not None and "onnx" not in export.formats:
            return f"export.int8.quantize={self.quantize} quantizes the ONNX model: add onnx to export.formats"
        return None

    def refuse_model(self, outputs: Any, layout: Any) -> str | None:
        if self.quantize and not layout.single:  # the INT8 report scores a single output tensor
            from lab.tasks.outputs import kind

            return (
                f"export.int8.quantize takes one output tensor; this model returns {kind(outputs)}: "
                "drop export.int8.quantize"
            )
        return None

    def run(self, export: Any) -> None:
        from lab.extensions.int8 import int8_report

        int8_report.run(export, self.quantize, self.calibration_samples, self.latency_runs, self.tolerance)
