"""Run a checkpoint or exported model on inputs and write predictions.csv and .json; return the number of records.

The backend follows `ckpt_path`: a training checkpoint runs the eager model rebuilt by lab.workflows.restore, an
exported file its runtime's runner, with the task and data_meta of the export_manifest.json next to it.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lab import runtime
from lab.config import options
from lab.data.transforms import keeps_size
from lab.errors import UserError
from lab.exporting import manifest
from lab.inference.backends import EagerBackend, artifact_backend, fits, shape_text
from lab.inference.inputs import Inputs
from lab.inference.predict import write_predictions
from lab.tasks.base import InferContext
from lab.tasks.common import build as build_task
from lab.workflows import restore
from lab.workflows.common import hydra_run_dir, linked_tracker

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> int:
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    model_path = Path(cfg.ckpt_path).expanduser()
    if not model_path.is_file():
        raise UserError(f"ckpt_path={cfg.ckpt_path} does not exist; give a checkpoint .pt or an exported .onnx/.pt2")
    device = runtime.select_device(cfg.device)
    opened = _open(model_path, device, cfg.infer.allow_modified_artifact)
    backend, task, meta, source, model_config, data_config, dims = opened
    resize = cfg.infer.resize if cfg.infer.resize is not None else not keeps_size(meta, dims)
    readers = options.instantiate("model", model_config, drop_unknown=True).input_readers(meta) if model_config else {}
    # an exported artifact's manifest keeps no data config: the core's codec from its meta
    codec = options.instantiate("data", data_config, drop_unknown=True).text_codec(meta) if data_config else None
    read = functools.partial(Inputs.read, readers=readers, dynamic_dims=dims)
    context = InferContext(cfg, meta, run_dir, read, resize=bool(resize), codec=codec)

    tracker, _ = linked_tracker(cfg, run_dir, "infer", source, model_config)
    with tracker.session():
        log.info("%s inference with the %s backend", task.name, backend.name)
        predictions = task.predict(backend, context)
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


def _open(path: Path, device: Any, allow_modified: bool = False) -> tuple[Any, Any, dict, dict, dict, dict, tuple]:
    """Open a checkpoint or exported artifact: (runner, task, data_meta, source run, model config, data config ({}
    for an artifact), dynamic input axes (an artifact's as its manifest says))."""
    if path.suffix in (".onnx", ".pt2") or path.name.endswith(".torchscript.pt"):
        found = manifest.read(path)
        _check_verified(path, found, allow_modified)
        meta = restore.upgrade_meta(found["data_meta"])
        task = build_task(OmegaConf.create(restore.task_config(found)), meta)
        backend = artifact_backend(path, device, manifest.output_layout(found))
        _check_input_shape(path, backend, meta)
        dims = tuple(found.get("dynamic_dims", task.dynamic_dims))
        return backend, task, meta, found.get("source_run", {}), found.get("model", {}), {}, dims
    restored = restore.rebuild(path)
    backend = EagerBackend(restored.model, device)
    task = restored.task
    config = restored.config
    return backend, task, restored.meta, restored.source(), config["model"], config["data"], tuple(task.dynamic_dims)


_OVERRIDE = "infer.allow_modified_artifact=true"


def _check_verified(path: Path, found: dict[str, Any], allow_modified: bool) -> None:
    """Refuse a file that is not the one the export checked: it must be in the manifest, with the same sha256.

    Otherwise a swapped or edited model would run with another model's preprocessing and class names, unnoticed."""
    entry = next((a for a in found["artifacts"].values() if a.get("file") == path.name), None)
    if entry is None:
        problem = f"{path.name} is not among the verified artifacts of {manifest.MANIFEST} next to it"
    elif entry.get("sha256") != manifest.sha256(path):
        problem = (
            f"{path} is not the file the export verified (sha256 differs from {manifest.MANIFEST}'s): "
            "it was replaced or modified after export"
        )
    else:
        return
    if not allow_modified:
        raise UserError(f"{problem}; export again, or pass {_OVERRIDE} to run it anyway")
    log.warning("%s; running it anyway (%s)", problem, _OVERRIDE)


def _check_input_shape(path: Path, backend: Any, meta: dict[str, Any]) -> None:
    """Refuse a manifest whose data_meta.input_shape the model file does not take, before the runtime fails."""
    declared = getattr(backend, "input_shape", None)
    expected = meta.get("input_shape")
    if declared is None or expected is None or fits(list(expected), declared[1:]):  # [0] is the batch axis
        return
    raise UserError(
        f"{manifest.MANIFEST} next to {path.name} gives data_meta.input_shape {list(expected)}, but {path.name} "
        f"takes inputs of shape {shape_text(declared)}: restore the manifest of this export, or export again"
    )
