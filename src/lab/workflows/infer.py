"""Orchestration of one inference run: model (checkpoint or exported file) + inputs -> predictions.csv / .json.

The backend follows `ckpt_path`: a training checkpoint runs the eager model rebuilt by lab.restore; model.onnx
runs onnxruntime, model.pt2 torch.export and model.torchscript.pt torch.jit, each with the task and data_meta of
the export_manifest.json next to it. The task reads the inputs (images, table rows, a prompt) and turns outputs
into records. Returns the number of records.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lab import runtime, tasks
from lab.checkpointing import restore
from lab.errors import UserError
from lab.exporting import manifest
from lab.inference import EagerBackend, artifact_backend, write_predictions
from lab.workflows.common import hydra_run_dir, linked_tracker

log = logging.getLogger(__name__)


def _is_artifact(path: Path) -> bool:
    return path.suffix in (".onnx", ".pt2") or path.name.endswith(".torchscript.pt")


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> int:
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    model_path = Path(cfg.ckpt_path).expanduser()
    if not model_path.is_file():
        raise UserError(f"ckpt_path={cfg.ckpt_path} does not exist; give a checkpoint .pt or an exported .onnx/.pt2")
    device = runtime.select_device(cfg.device)
    backend, task, meta, source, model_config = _open(model_path, device)

    tracker, _ = linked_tracker(cfg, run_dir, "infer", source, model_config)
    with tracker.session():
        log.info("%s inference with the %s backend", task.name, backend.name)
        predictions = task.predict(backend, cfg, meta)
        if not predictions.records:
            raise UserError(f"input={cfg.input}: none of the inputs could be read ({len(predictions.skipped)} skipped)")
        header = {"model": str(model_path), "backend": backend.name, "task": task.name, "input": cfg.input}
        paths = write_predictions(predictions.records, run_dir, predictions.skipped, header)
        for path in paths:
            tracker.save_file(path)
        counts = {"infer/predicted": len(predictions.records), "infer/skipped": len(predictions.skipped)}
        tracker.summary({**counts, "backend": backend.name})
        log.info("%d predicted, %d skipped (unreadable); wrote %s", *counts.values(), paths[0])
    return len(predictions.records)


def _open(path: Path, device: Any) -> tuple[Any, Any, dict, dict, dict]:
    """(runner, task, data_meta, source run, model config) for a checkpoint or an exported artifact."""
    if _is_artifact(path):
        found = manifest.read(path)
        entry = next((a for a in found["artifacts"].values() if a.get("file") == path.name), None)
        if entry is not None and entry.get("sha256") != manifest.sha256(path):
            log.warning("%s differs from the file the manifest's parity check verified (sha256 mismatch)", path)
        meta = restore.upgrade_meta(found["data_meta"])
        task = tasks.build(OmegaConf.create(restore.task_config(found)), meta)
        return artifact_backend(path, device), task, meta, found.get("source_run", {}), found.get("model", {})
    restored = restore.rebuild(path)
    backend = EagerBackend(restored.model, device)
    return backend, restored.task, restored.meta, restored.source(), restored.config["model"]
