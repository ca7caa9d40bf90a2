"""export_manifest.json: everything a deployment needs next to the model files, and how they were checked."""

from __future__ import annotations

import datetime
import hashlib
from importlib import metadata
from pathlib import Path
from typing import Any

from lab.exporting.writers import INPUT_NAME, OUTPUT_NAME
from lab.inference.backends import MANIFEST
from lab.tracking import write_json

FORMAT_VERSION = 1


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def preprocessing(meta: dict[str, Any]) -> dict[str, Any]:
    """How to turn an image into the input tensor, in words a non-Python runtime can follow."""
    c, size = meta["in_channels"], meta["image_size"]
    return {
        "function": "lab.data.eval_transform(data_meta)",
        "color_mode": "L (grayscale)" if c == 1 else "RGB",
        "resize": f"{size}x{size}, bilinear (only when the image has another size)",
        "scale": "8-bit pixels / 255 -> [0, 1]",
        "mean": meta["mean"],
        "std": meta["std"],
        "normalize": "(x - mean[c]) / std[c] per channel",
    }


def build(
    *,
    meta: dict[str, Any],
    model_config: dict[str, Any],
    source_run: dict[str, Any],
    provenance: dict[str, Any],
    artifacts: dict[str, dict[str, Any]],
    opset: int | None,
    tolerance: float,
    quantization: dict[str, Any] | None,
) -> dict[str, Any]:
    c, size, k = meta["in_channels"], meta["image_size"], meta["num_classes"]
    return {
        "format_version": FORMAT_VERSION,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": provenance.get("git_commit"),
        "git_dirty": provenance.get("git_dirty"),
        "versions": {p: _version(p) for p in ("torch", "onnx", "onnxruntime", "onnxscript")},
        "source_run": source_run,
        "model": model_config,
        "input": {"name": INPUT_NAME, "shape": ["batch", c, size, size], "dtype": "float32", "layout": "NCHW"},
        "output": {"name": OUTPUT_NAME, "shape": ["batch", k], "dtype": "float32", "note": "logits; softmax them"},
        "dynamic_axes": {"batch": "dim 0 of input and output, any size >= 1"},
        "preprocessing": preprocessing(meta),
        "class_names": meta["class_names"],
        "data_meta": meta,
        "opset": opset,
        "tolerance": tolerance,
        "artifacts": artifacts,
        "quantization": quantization,
    }


def write(folder: Path, manifest: dict[str, Any]) -> Path:
    path = folder / MANIFEST
    write_json(path, manifest)
    return path
