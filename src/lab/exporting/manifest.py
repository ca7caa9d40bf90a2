"""Write export_manifest.json: all a deployment needs next to the model files, and how they were checked."""

from __future__ import annotations

import datetime
import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from lab.data.transforms import keeps_size
from lab.errors import UserError
from lab.exporting.writers import INPUT_NAME, OUTPUT_NAME, axis_name
from lab.tasks import outputs as model_outputs

FORMAT_VERSION = 1
MANIFEST = "export_manifest.json"  # lies next to the model files in the export run dir


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


def preprocessing(meta: dict[str, Any], dynamic_dims: Any) -> dict[str, Any]:
    """Describe how raw inputs become the input tensor, for a non-Python runtime; data_meta has the numbers."""
    if "image_size" in meta:
        return {
            "function": "lab.data.transforms.eval_transform(data_meta)",
            "color_mode": "L (grayscale)" if meta["in_channels"] == 1 else "RGB",
            "resize": _resize(meta, dynamic_dims),
            "scale": "8-bit pixels / 255 -> [0, 1]",
            "mean": meta["mean"],
            "std": meta["std"],
            "normalize": "(x - mean[c]) / std[c] per channel",
        }
    if "feature_mean" in meta:
        return {
            "features": meta["feature_names"],
            "normalize": "(x - feature_mean[i]) / feature_std[i] per feature (data_meta)",
            **({"target": "outputs * target_std + target_mean"} if "target_mean" in meta else {}),
        }
    if "vocab_size" in meta and meta.get("level") == "bpe":
        size = meta["vocab_size"]
        return {"tokens": f"byte-level BPE ids ({size} symbols): the tokenizers JSON in data_meta.tokenizer"}
    if "vocab_size" in meta:
        return {"tokens": f"{meta['level']}-level ids, vocabulary in data_meta ({meta['vocab_size']} symbols)"}
    return {"note": "see data_meta"}


def _tensor_spec(name: str, tensor: torch.Tensor, dynamic_dims: tuple[int, ...], names_ndim: int) -> dict[str, Any]:
    """Return a tensor's spec, naming each dynamic axis as the input's axis of that index (`names_ndim` dims)."""
    shape = [axis_name(d, names_ndim) if d in dynamic_dims else int(n) for d, n in enumerate(tensor.shape)]
    spec = {"name": name, "shape": shape, "dtype": str(tensor.dtype).removeprefix("torch.")}
    return {**spec, "layout": "NCHW"} if name == INPUT_NAME and tensor.ndim == 4 else spec


def _resize(meta: dict[str, Any], dynamic_dims: Any) -> str:
    """What `lab.data.transforms.EvalTransform` does to an image's size, in words."""
    if keeps_size(meta, dynamic_dims):
        return "none: the model takes any height and width (infer keeps each image's size)"
    size, crop, how = meta["image_size"], meta.get("crop_pct"), meta.get("interpolation", "bilinear")
    if crop is None:
        return f"{size}x{size}, {how} (only when the image has another size)"
    return f"shorter side to {int(size / crop)} px ({how}), then the centre {size}x{size} crop (crop_pct {crop})"


def build(
    *,
    meta: dict[str, Any],
    task_config: dict[str, Any],
    example: torch.Tensor,
    output: Any,
    dynamic_dims: tuple[int, ...],
    model_config: dict[str, Any],
    source_run: dict[str, Any],
    provenance: dict[str, Any],
    artifacts: dict[str, dict[str, Any]],
    failed: dict[str, dict[str, Any]],
    opset: int | None,
    tolerance: float,
    sections: dict[str, Any],
    layout: model_outputs.Layout,
) -> dict[str, Any]:
    """Build the manifest from eager's `output` on the first parity batch, named by `layout`, and steps' `sections`."""
    return {
        "format_version": FORMAT_VERSION,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": provenance.get("git_commit"),
        "git_dirty": provenance.get("git_dirty"),
        "versions": {p: _version(p) for p in ("torch", "onnx", "onnxruntime", "onnxscript")},
        "source_run": source_run,
        "task": task_config,
        "model": model_config,
        "input": _tensor_spec(INPUT_NAME, example, dynamic_dims, example.ndim),
        **_output_specs(output, layout, dynamic_dims, example.ndim),
        "dynamic_dims": list(dynamic_dims),  # input axes of any size; infer keeps image sizes if H and W are
        "dynamic_axes": {
            axis_name(d, example.ndim): f"dim {d} of the input (and of the output where it has it), any size"
            for d in dynamic_dims
        },
        "preprocessing": preprocessing(meta, dynamic_dims),
        "class_names": meta.get("class_names"),
        "data_meta": meta,
        "opset": opset,
        "tolerance": tolerance,
        "artifacts": artifacts,  # only files that passed their check, each with its sha256
        "failed": failed,  # figures of formats that failed the parity check; no file was written
        **sections,
    }


def _output_specs(output: Any, layout: model_outputs.Layout, dims: tuple[int, ...], ndim: int) -> dict[str, Any]:
    """Return one tensor's spec as "output", or several as "outputs" (ONNX order) with their "output_structure"."""
    if layout.single:
        return {"output": _tensor_spec(OUTPUT_NAME, output, dims, ndim)}
    tensors = model_outputs.tensors(output)
    return {
        "outputs": [_tensor_spec(name, tensor, dims, ndim) for name, tensor in zip(layout.names, tensors)],
        "output_structure": layout.structure,
    }


def output_layout(manifest: dict[str, Any]) -> model_outputs.Layout | None:
    """Return what the exported model returns, from its manifest, or None for one tensor."""
    if "outputs" not in manifest:
        return None
    return model_outputs.Layout(manifest["output_structure"], tuple(spec["name"] for spec in manifest["outputs"]))


def read(artifact: str | Path) -> dict[str, Any]:
    """Read the manifest next to an exported artifact, which gives inference the task, data_meta and preprocessing."""
    path = Path(artifact).with_name(MANIFEST)
    if not path.is_file():
        raise UserError(
            f"{artifact} needs {MANIFEST} next to it (preprocessing and class names); "
            "keep the export run dir together, or export again with scripts/export.py"
        )
    try:
        manifest = json.loads(path.read_text())
        manifest["data_meta"]["input_shape"]
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path} is not a valid export manifest ({type(err).__name__}: {err})") from err
    return manifest
