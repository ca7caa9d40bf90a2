"""Share pieces among the workflows: the Hydra run dir, and the tracker that links eval, export and infer to
training. Rebuilding from a checkpoint lives in lab.workflows.restore."""

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

    Its config is this job's resolved config plus the model config and `source_run` (checkpoint path, training run
    dir, wandb id and path, training commit), which appear as columns in the wandb runs table. `config` adds more
    top-level entries, such as `data_effective`: the checkpoint's data config with this job's overrides applied."""
    prov = provenance.collect()
    tracker = tracking.from_config(cfg, run_dir, job_type, prov)
    tracker.config.update({"model": model, "source_run": source, **config})
    return tracker, prov
