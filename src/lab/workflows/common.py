"""The workflows' shared pieces: the Hydra run dir, and the tracker that links eval, export and infer to training."""

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
    """Build a Tracker linked to the training run, and return it with the provenance it records.
    Its config adds the model config, `source_run` (columns of the wandb runs table) and `config`'s entries."""
    prov = provenance.collect()
    tracker = tracking.from_config(cfg, run_dir, job_type, prov)
    tracker.config.update({"model": model, "source_run": source, **config})
    return tracker, prov
