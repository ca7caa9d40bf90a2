"""The `int8` extension: INT8 ONNX models next to an export's model.onnx, each scored against fp32 (the task's val
metric, agreement, latency at batch 1 and 32), and the one to ship recommended in export_manifest.json (its page:
README.md here).

An export step (lab.config.tools.ExportStepConfig) with its settings in `export.int8` (options.py): `quantize`
writes the variants with onnxruntime's quantization tools, `int8_report` measures them and recommends one;
`bench_int8` runs the whole of it on two convnets.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ("export",)  # onnxruntime quantizes and runs the models
