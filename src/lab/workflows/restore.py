"""Rebuild a trained model and its data from a checkpoint alone, for eval, export and infer.

The checkpoint's own `config` and `data_meta` decide the architecture and preprocessing, so a model is never paired
with another run's settings. The model is the plain module from `lab.models.common.build` in eval mode, so no DDP,
torch.compile or channels_last wrapper reaches an evaluation or an export.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from torch import nn

from lab.checkpointing import sharded, state_dicts, storage
from lab.config import options
from lab.data.common import DataModule
from lab.data.datasets import build as build_data
from lab.errors import ConfigError, UserError
from lab.models.common import build as build_model
from lab.tasks.common import build as build_task
from lab.tasks.options import ClassificationConfig


@dataclass
class Restored:
    path: Path
    model: nn.Module  # in eval mode, on the CPU, fp32
    meta: dict[str, Any]  # data_meta: shapes, normalization, class names, target statistics, vocabulary
    config: dict[str, Any]  # the training run's resolved config
    task: Any  # the training run's task (lab.tasks.base.Task)
    provenance: dict[str, Any]  # git commit, versions, the training run's dir and wandb id
    progress: dict[str, Any]  # epoch, global_step, best_metric when the checkpoint was written

    @property
    def global_step(self) -> int:
        return int(self.progress.get("global_step", 0))

    def source(self) -> dict[str, Any]:
        """Return how runs made from this checkpoint point back at the training run (wandb config, manifests)."""
        keys = ("run_dir", "wandb_id", "wandb_path", "git_commit", "git_dirty")
        return {
            "ckpt_path": str(self.path),
            **{key: self.provenance.get(key) for key in keys},
            "epoch": self.progress.get("epoch"),
            "global_step": self.progress.get("global_step"),
        }


def rebuild(path: str | Path) -> Restored:
    """Rebuild the plain eval-mode model with its weights. A UserError names what is missing or wrong."""
    path = Path(path).expanduser()
    ckpt = storage.read(path)
    config, meta = ckpt.get("config"), ckpt.get("data_meta")
    if not isinstance(config, dict) or "model" not in config or "data" not in config:
        raise UserError(f"{path} holds no training config (config.model / config.data); was it written by train.py?")
    if not isinstance(meta, dict) or not meta:
        raise UserError(f"{path} has no data_meta: cannot rebuild the model and the preprocessing it expects")
    meta = upgrade_meta(meta)
    # the architecture, with what the option's checkpoints do not hold (for_checkpoint); a moved init_from is not read
    option = options.instantiate("model", config["model"], drop_unknown=True).for_checkpoint()
    model = build_model(option, meta)
    state_dicts.load_model_state(model, option.restore_state(model, {**ckpt, "model": sharded.model_weights(ckpt)}))
    model.eval()
    options.instantiate("model", config["model"], drop_unknown=True).read_with_run(path, config, meta)
    return Restored(
        path=path,
        model=model,
        meta=meta,
        config=config,
        task=build_task(options.instantiate("task", task_config(config), drop_unknown=True), meta),
        provenance=dict(ckpt.get("provenance") or {}),
        progress=dict(ckpt.get("progress") or {}),
    )


def data_config(restored: Restored, overrides: Mapping[str, Any] | DictConfig | None) -> DictConfig:
    """Return the checkpoint's data config with the non-null CLI overrides on top, checked as training checks it."""
    changes = {k: v for k, v in dict(overrides or {}).items() if v is not None}
    option = options.instantiate("data", restored.config["data"], drop_unknown=True)
    # Take what training took from a pretrained model where its config said null, as data_meta recorded it. The
    # data's own statistics are recomputed and compared instead, so other data under data.root is refused.
    pretrained = options.instantiate("model", restored.config["model"], drop_unknown=True).preprocessing() or {}
    for key in pretrained:
        if getattr(option, key, 0) is None and key in restored.meta:
            changes.setdefault(key, restored.meta[key])
    try:
        return OmegaConf.structured(options.instantiate("data", {**dataclasses.asdict(option), **changes}))
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError(f"the checkpoint's data config does not fit this version's schema: {err}") from err


def rebuild_data(restored: Restored, overrides: Mapping[str, Any] | DictConfig | None = None) -> DataModule:
    """Rebuild the training run's dataset, refusing data whose classes, shape, normalization or vocabulary differ."""
    cfg = data_config(restored, overrides)
    datamodule = build_data(cfg)
    rebuilt_meta = upgrade_meta(datamodule.meta)
    for key, saved in restored.meta.items():
        rebuilt = rebuilt_meta.get(key)
        if not _same(saved, rebuilt):
            raise UserError(
                f"the data under data.root={cfg.root} gives {key}={rebuilt} but the checkpoint was trained with "
                f"{key}={saved}; point data.root at the dataset the model was trained on"
            )
    return datamodule


def task_config(config: dict[str, Any]) -> dict[str, Any]:
    """Return the run's task config. Checkpoints from before tasks existed were classification runs."""
    return config.get("task") or dataclasses.asdict(ClassificationConfig())


def upgrade_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """Derive input_shape and num_outputs for the data_meta of checkpoints from before those keys."""
    meta = dict(meta)
    if "input_shape" not in meta and "in_channels" in meta:
        meta["input_shape"] = [int(meta["in_channels"]), int(meta["image_size"]), int(meta["image_size"])]
    if "num_outputs" not in meta and "num_classes" in meta:
        meta["num_outputs"] = int(meta["num_classes"])
    return meta


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        # statistics recomputed from the same pixels agree to float rounding, not always bit for bit
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    return a == b
