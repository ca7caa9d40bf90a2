"""Pieces the workflows share: the Hydra run dir, and (eval, export, infer) the wandb run linked to training. The
model, task and data those three rebuild from a checkpoint: lab.workflows.restore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lab import tracking
from lab.tracking import provenance


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def linked_tracker(
    cfg: DictConfig, run_dir: Path, job_type: str, source: dict[str, Any], model: dict[str, Any], **config: Any
) -> tuple[tracking.Tracker, dict]:
    """A Tracker to run as `with tracker.session():`, and the provenance it records. Its config is this job's
    resolved config (as in .hydra/config.yaml) plus the model config it ran and `source_run` (checkpoint path,
    training run dir, wandb id/path, training commit): the link back to the training run, as columns of the
    wandb runs table. `config` adds further top-level entries (e.g. `data_effective`: the checkpoint's data config
    with this job's overrides applied; the job's own `data` node keeps only those overrides)."""
    prov = provenance.collect()
    tracker = tracking.from_config(cfg, run_dir, job_type, prov)
    tracker.config.update({"model": model, "source_run": source, **config})
    return tracker, prov
