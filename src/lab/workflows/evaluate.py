"""Orchestration of one evaluation: checkpoint -> its own model and data -> one split -> eval.json + figure.

The numbers come from the same code training validates with (`engine.evaluate` + the task's metrics), on the
checkpoint's data config, precision and channels_last setting, so scoring best.pt on `val` reproduces the
`val/acc` training logged for it. Returns `<split>/acc`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lab import data, plots, restore, runtime
from lab.errors import UserError
from lab.evaluation import evaluate
from lab.tasks import Classification
from lab.tracking import write_json
from lab.workflows.common import hydra_run_dir, linked_tracker

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float:
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    restored = restore.load(cfg.ckpt_path)  # fail on a bad path before any work
    split = cfg.eval.split
    data_cfg = restore.data_config(restored, cfg.data)
    datamodule = restore.build_data(restored, cfg.data)
    dataset = datamodule.test if split == "test" else datamodule.val
    if dataset is None:
        raise UserError(f"data.name={data_cfg.name} has no test split here (no <root>/test/); use eval.split=val")

    device = runtime.select_device(cfg.device)
    trained = OmegaConf.create(restored.config)
    runtime.configure_backends(trained.trainer, device)  # TF32 / cuDNN as in training: the same numbers on GPU
    precision = runtime.resolve_precision(trained.precision, device)
    channels_last = bool(trained.trainer.channels_last)
    model = runtime.apply_channels_last(restored.model.to(device), channels_last, trained.dist.strategy)
    pin = data_cfg.pin_memory if data_cfg.pin_memory is not None else device.type == "cuda"
    loader = data.make_loader(dataset, data_cfg, train=False, generator=None, pin_memory=pin)

    data_config = OmegaConf.to_container(data_cfg, resolve=True)
    tracker, _ = linked_tracker(
        cfg, run_dir, "eval", restored.source(), restored.config["model"], data_effective=data_config
    )
    with tracker.session():
        log.info("evaluating %s on the %s split (%d samples), %s", restored.path, split, len(dataset), device)
        metrics = Classification(restored.meta["num_classes"]).metrics(device, confusion=True)
        evaluate(model, loader, metrics, device=device, precision=precision, channels_last=channels_last)
        report = _report(metrics, restored, split, len(dataset))
        scalars = {f"{split}/{key}": value for key, value in report["metrics"].items()}
        tracker.log(scalars, step=restored.global_step, epoch=restored.progress.get("epoch"))
        per_class = {f"{split}/acc_per_class/{name}": acc for name, acc in report["per_class_acc"].items()}
        tracker.summary({**scalars, **per_class, "split": split, "num_samples": len(dataset)})
        write_json(run_dir / "eval.json", report)
        title = f"{restored.path.name} - {split} split, {len(dataset)} samples, acc {report['metrics']['acc']:.4f}"
        plots.confusion_matrix_png(
            report["confusion_matrix"], restored.meta["class_names"], run_dir / "confusion_matrix.png", title
        )
        for name in ("eval.json", "confusion_matrix.png"):
            tracker.save_file(run_dir / name)
        log.info("%s", "  ".join(f"{k} {v:.4f}" for k, v in scalars.items()))
    log.info("wrote %s and %s", run_dir / "eval.json", run_dir / "confusion_matrix.png")
    return scalars[f"{split}/acc"]


def _report(metrics: Any, restored: restore.Restored, split: str, num_samples: int) -> dict[str, Any]:
    names = restored.meta["class_names"]
    per_class = metrics.per_class_accuracy()
    return {
        "split": split,
        "num_samples": num_samples,
        "metrics": metrics.compute(),  # loss, acc (top-1), acc_top5
        "per_class_acc": dict(zip(names, per_class)),
        "class_names": names,
        "confusion_matrix": metrics.confusion_matrix(),  # [true][predicted]
        "checkpoint": restored.source(),
    }
