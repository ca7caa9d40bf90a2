"""The `int8` extension: INT8 ONNX models next to an export's model.onnx, scored against fp32. See README.md here.

It is an export step with its settings in `export.int8` (options.py). `quantize` writes the variants, and
`int8_report` measures their val metric, agreement and latency and recommends one in export_manifest.json.
`bench_int8` runs it all on two convnets.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ("export",)  # onnxruntime quantizes and runs the models
