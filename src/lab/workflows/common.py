"""Pieces the checkpoint-consuming workflows (eval, export, infer) share: run dir and the linked wandb run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lab import provenance, tracking


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def start_tracker(
    cfg: DictConfig, run_dir: Path, job_type: str, source: dict[str, Any], model: dict[str, Any], **config: Any
) -> tuple[tracking.Tracker, dict]:
    """A started Tracker (and the provenance it recorded). Its config is this job's resolved config plus the
    model config it ran and `source_run` (checkpoint path, training run dir, wandb id/path, training commit):
    the link back to the training run, as columns of the wandb runs table. `config` adds top-level entries
    (e.g. the effective data config, which replaces the job's own overrides-only `data` node)."""
    prov = provenance.collect()
    tracker = tracking.from_config(cfg, run_dir, job_type, prov)
    tracker.config.update({"model": model, "source_run": source, **config})
    return tracker.start(), prov
