"""Structured config schema, registered in Hydra's ConfigStore.

Each YAML file in ``conf/<group>/`` extends one of these dataclasses (``defaults: [<schema>]``), so Hydra
rejects unknown keys and wrong types while composing. Value checks (``lr > 0``...) live in
``__post_init__`` and run in :func:`validate`, before any work starts.

This package must not import torch: it is imported by every entry script, and ``--help`` / ``--cfg job``
stay fast only if nothing heavy is loaded before Hydra prints and exits.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from lab.config.data import CsvConfig, DataConfig, DiabetesConfig, LoaderConfig, TextConfig
from lab.config.models import CNNConfig, GPTConfig, MLPConfig, ModelConfig, TorchvisionConfig
from lab.config.tasks import ClassificationTaskConfig, LanguageModelTaskConfig, RegressionTaskConfig, TaskConfig
from lab.config.tools import EvalConfig, ExportConfig, InferConfig
from lab.config.training import (
    AdamWConfig,
    DistConfig,
    LoggerConfig,
    PrecisionConfig,
    SchedulerConfig,
    SGDConfig,
    TrainConfig,
    TrainerConfig,
)
from lab.errors import ConfigError

__all__ = [
    "CNNConfig",
    "ClassificationTaskConfig",
    "ConfigError",
    "CsvConfig",
    "DataConfig",
    "DiabetesConfig",
    "EvalConfig",
    "ExportConfig",
    "GPTConfig",
    "InferConfig",
    "LanguageModelTaskConfig",
    "LoaderConfig",
    "LoggerConfig",
    "MLPConfig",
    "ModelConfig",
    "RegressionTaskConfig",
    "TaskConfig",
    "TextConfig",
    "TorchvisionConfig",
    "TrainConfig",
    "register",
    "validate",
]


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="eval_schema", node=EvalConfig)
    cs.store(name="export_schema", node=ExportConfig)
    cs.store(name="infer_schema", node=InferConfig)
    cs.store(group="trainer", name="trainer_schema", node=TrainerConfig)
    cs.store(group="task", name="classification_schema", node=ClassificationTaskConfig)
    cs.store(group="task", name="regression_schema", node=RegressionTaskConfig)
    cs.store(group="task", name="language_model_schema", node=LanguageModelTaskConfig)
    cs.store(group="data", name="data_schema", node=DataConfig)
    cs.store(group="data", name="diabetes_schema", node=DiabetesConfig)
    cs.store(group="data", name="csv_schema", node=CsvConfig)
    cs.store(group="data", name="text_schema", node=TextConfig)
    cs.store(group="model", name="gpt_schema", node=GPTConfig)
    cs.store(group="model", name="mlp_schema", node=MLPConfig)
    cs.store(group="model", name="cnn_schema", node=CNNConfig)
    cs.store(group="model", name="torchvision_schema", node=TorchvisionConfig)
    cs.store(group="optimizer", name="adamw_schema", node=AdamWConfig)
    cs.store(group="optimizer", name="sgd_schema", node=SGDConfig)
    cs.store(group="scheduler", name="scheduler_schema", node=SchedulerConfig)
    cs.store(group="precision", name="precision_schema", node=PrecisionConfig)
    cs.store(group="dist", name="dist_schema", node=DistConfig)
    cs.store(group="logger", name="logger_schema", node=LoggerConfig)


def validate(cfg: DictConfig) -> None:
    """Run every schema's value checks (``__post_init__``); raise ConfigError naming the bad key."""
    try:
        OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception as err:  # interpolation errors, missing values: Hydra/OmegaConf explain them well
        raise ConfigError(str(err).splitlines()[0]) from err


def _direction(mode: str) -> str:
    """${lab.direction:${task.mode}}: a task's max/min as the sweepers' maximize/minimize."""
    if mode not in ("max", "min"):
        raise ConfigError(f"task.mode={mode!r} is not valid; choose one of max, min")
    return "maximize" if mode == "max" else "minimize"


register()
if not OmegaConf.has_resolver("lab.direction"):
    OmegaConf.register_new_resolver("lab.direction", _direction)
