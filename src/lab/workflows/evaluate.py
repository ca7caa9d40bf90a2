"""Evaluate a checkpoint on one split, writing eval.json and the task's artifacts (confusion matrix, plots, samples).

It uses the code and switches training validates with, so scoring best.pt on `val` reproduces the validation
metrics training logged for it. Then each eval step (`eval.<name>`) runs. Returns `<split>/<the task's monitor>`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from omegaconf import DictConfig, OmegaConf

from lab import runtime
from lab.config import options
from lab.config.tools import EvalOptions
from lab.data.common import dataset_len
from lab.data.loaders import make_loader
from lab.errors import UserError
from lab.files import write_json
from lab.tasks.base import EvalContext
from lab.training.evaluation import accumulate_metrics
from lab.workflows import restore
from lab.workflows.common import hydra_run_dir, linked_tracker

log = logging.getLogger(__name__)


@dataclass
class Evaluation:
    """What an eval step gets, and what it adds."""

    run_dir: Path  # holds eval.json; a step writes its own files beside it
    restored: restore.Restored  # the checkpoint: its training config, data_meta and eval-mode model
    model: torch.nn.Module  # the restored model, on `device`
    device: torch.device
    sections: dict[str, Any] = field(default_factory=dict)  # eval.json entries a step adds
    figures: dict[str, float] = field(default_factory=dict)  # numbers a step adds, logged and summarised
    files: list[Path] = field(default_factory=list)  # files a step wrote, saved to the trackers


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float:
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    restored = restore.rebuild(cfg.ckpt_path)  # fail on a bad path before any work
    split = cfg.eval.split
    data_cfg = restore.data_config(restored, cfg.data)
    datamodule = restore.rebuild_data(restored, cfg.data)
    dataset = datamodule.test if split == "test" else datamodule.val
    if dataset is None:
        raise UserError(f"data.name={data_cfg.name} has no test split here (no <root>/test/); use eval.split=val")

    device = runtime.select_device(cfg.device)
    trained = OmegaConf.create(restored.config)
    runtime.configure_backends(trained.trainer, device)  # TF32 and cuDNN as in training, for the same numbers
    precision = runtime.resolve_precision(trained.precision, device)
    channels_last = bool(trained.trainer.channels_last)
    shards_weights = options.instantiate("dist", trained.dist, drop_unknown=True).shards_weights
    model = runtime.apply_channels_last(restored.model.to(device), channels_last, shards_weights)
    pin = data_cfg.pin_memory if data_cfg.pin_memory is not None else device.type == "cuda"
    loader = make_loader(dataset, data_cfg, train=False, generator=None, pin_memory=pin)

    steps = cast(EvalOptions, OmegaConf.to_object(cfg.eval)).steps()
    refusal = next((why for why in (step.refuse(restored) for step in steps) if why is not None), None)
    if refusal is not None:
        raise UserError(refusal)
    data_config = OmegaConf.to_container(data_cfg, resolve=True)
    tracker, _ = linked_tracker(
        cfg, run_dir, "eval", restored.source(), restored.config["model"], data_effective=data_config
    )
    task = restored.task
    with tracker.session():
        log.info("evaluating %s on the %s split (%d samples), %s", restored.path, split, dataset_len(dataset), device)
        metrics = task.metrics(device, full=True)
        accumulate_metrics(model, loader, metrics, device=device, precision=precision, channels_last=channels_last)
        scores = metrics.compute()
        evaluation = Evaluation(run_dir, restored, model, device)
        for step in steps:
            step.run(evaluation)
        title = f"{restored.path.name} - {split} split, {dataset_len(dataset)} samples"
        codec = options.instantiate("data", restored.config["data"], drop_unknown=True).text_codec(restored.meta)
        context = EvalContext(run_dir, title, model, device, restored.meta, codec)
        extra, files = task.write_eval_artifacts(metrics, context)
        eval_json = {
            "task": task.name,
            "split": split,
            "num_samples": dataset_len(dataset),
            "metrics": scores,  # under the task's own names
            **extra,
            **evaluation.sections,
            "checkpoint": restored.source(),
        }
        scalars = {f"{split}/{key}": value for key, value in scores.items()}
        tracker.log({**scalars, **evaluation.figures}, step=restored.global_step, epoch=restored.progress.get("epoch"))
        summary = {**scalars, "split": split, "num_samples": dataset_len(dataset), **_flat(split, extra)}
        tracker.summary(summary | evaluation.figures)
        write_json(run_dir / "eval.json", eval_json)
        files += evaluation.files
        for path in [run_dir / "eval.json", *files]:
            tracker.save_file(path)
        log.info("%s", "  ".join(f"{k} {v:.4f}" for k, v in scalars.items()))
    log.info("wrote %s", ", ".join(str(p) for p in [run_dir / "eval.json", *files]))
    return scalars[f"{split}/{task.monitor}"]


def _flat(split: str, extra: dict) -> dict[str, float | None]:
    """Flatten the task's grouped eval.json entries (say, per-class accuracy) to keys `<split>/<entry>/<name>`."""
    return {
        f"{split}/{key}/{name}": value
        for key, group in extra.items()
        if isinstance(group, dict)
        for name, value in group.items()
        if isinstance(value, int | float) or value is None
    }
