"""Orchestration of one inference run: model (checkpoint or exported file) + inputs -> predictions.csv / .json.

The backend follows `ckpt_path`: a training checkpoint runs the eager model rebuilt by lab.restore; model.onnx
runs onnxruntime, model.pt2 torch.export and model.torchscript.pt torch.jit, each with the preprocessing and class
names of the export_manifest.json next to it. Returns the number of inputs predicted.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lab import restore, runtime
from lab.errors import UserError
from lab.exporting.manifest import sha256
from lab.inference import EagerBackend, Samples, artifact_backend, discover, predict, read_manifest, write_predictions
from lab.workflows.common import hydra_run_dir, linked_tracker

log = logging.getLogger(__name__)


def _is_artifact(path: Path) -> bool:
    return path.suffix in (".onnx", ".pt2") or path.name.endswith(".torchscript.pt")


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> int:
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    model_path = Path(cfg.ckpt_path).expanduser()
    if not model_path.is_file():
        raise UserError(f"ckpt_path={cfg.ckpt_path} does not exist; give a checkpoint .pt or an exported .onnx/.pt2")
    files = discover(cfg.input)  # a typo in input= fails before any model is loaded
    device = runtime.select_device(cfg.device)
    backend, meta, source, model_config = _open(model_path, device)

    tracker, _ = linked_tracker(cfg, run_dir, "infer", source, model_config)
    with tracker.session():
        samples = Samples(files, meta)
        log.info("predicting %d file(s) from %s with the %s backend", len(files), cfg.input, backend.name)
        predictions = predict(backend, samples, cfg.infer.batch_size, cfg.infer.top_k)
        if not predictions:
            raise UserError(f"input={cfg.input}: none of the {len(files)} file(s) could be read as an image")
        header = {"model": str(model_path), "backend": backend.name, "input": cfg.input, "top_k": cfg.infer.top_k}
        paths = write_predictions(predictions, meta["class_names"], run_dir, samples.skipped, header)
        for path in paths:
            tracker.save_file(path)
        tracker.summary(
            {"infer/predicted": len(predictions), "infer/skipped": len(samples.skipped), "backend": backend.name}
        )
        log.info("%d predicted, %d skipped (unreadable); wrote %s", len(predictions), len(samples.skipped), paths[0])
    return len(predictions)


def _open(path: Path, device: Any) -> tuple[Any, dict, dict, dict]:
    """(runner, data_meta, source run, model config) for a checkpoint or an exported artifact."""
    if _is_artifact(path):
        found = read_manifest(path)
        entry = next((a for a in found["artifacts"].values() if a.get("file") == path.name), None)
        if entry is not None and entry.get("sha256") != sha256(path):
            log.warning("%s differs from the file the manifest's parity check verified (sha256 mismatch)", path)
        return artifact_backend(path, device), found["data_meta"], found.get("source_run", {}), found.get("model", {})
    restored = restore.load(path)
    return EagerBackend(restored.model, device), restored.meta, restored.source(), restored.config["model"]
