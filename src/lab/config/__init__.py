"""Structured config schemas: each default is written here, once.

Each entry config (``conf/train.yaml``...) and each group option (``conf/<group>/<option>.yaml``) extends one of
these dataclasses (``defaults: [/<name>@_here_]``, a name of :data:`SCHEMAS`) and writes only the values that
differ from it; experiment, debug and hparams_search options write only what they change (``conf/hydra/``
extends Hydra's own schemas and those of src/hydra_plugins/). So Hydra rejects unknown keys and wrong types while
composing, and tests/unit/config/test_defaults_once.py fails on a YAML value that repeats a default. Value checks
(``lr > 0``...) live in ``__post_init__`` and run in :func:`validate`, before any work starts.

The schemas sit at the root of Hydra's ConfigStore under the names in :data:`SCHEMAS`, not in the config groups:
``--help`` and tab completion list the groups' options, and a schema is not an option.

This package must not import torch: it is imported by every entry script, and ``--help`` / ``--cfg job``
stay fast only if nothing heavy is loaded before Hydra prints and exits.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from lab.config.data import CsvConfig, DataConfig, DiabetesConfig, LoaderConfig, TextConfig
from lab.config.distributed import DDPConfig, DistConfig, FSDPConfig, NoDistConfig, ProcessGroupConfig
from lab.config.mistakes import undeclared_keys, unknown_key_message
from lab.config.models import CNNConfig, GPTConfig, MLPConfig, ModelConfig, TorchvisionConfig
from lab.config.optim import (
    AdamWConfig,
    ConstantSchedulerConfig,
    CosineSchedulerConfig,
    OneCycleSchedulerConfig,
    OptimizerConfig,
    PlateauSchedulerConfig,
    SchedulerConfig,
    SGDConfig,
    StepSchedulerConfig,
)
from lab.config.tasks import ClassificationTaskConfig, LanguageModelTaskConfig, RegressionTaskConfig, TaskConfig
from lab.config.tools import EvalConfig, ExportConfig, InferConfig
from lab.config.training import LoggerConfig, PrecisionConfig, TrainConfig, TrainerConfig
from lab.errors import ConfigError

__all__ = [
    "SCHEMAS",
    "AdamWConfig",
    "CNNConfig",
    "ClassificationTaskConfig",
    "ConfigError",
    "ConstantSchedulerConfig",
    "CosineSchedulerConfig",
    "CsvConfig",
    "DDPConfig",
    "DataConfig",
    "DiabetesConfig",
    "DistConfig",
    "EvalConfig",
    "ExportConfig",
    "FSDPConfig",
    "GPTConfig",
    "InferConfig",
    "LanguageModelTaskConfig",
    "LoaderConfig",
    "LoggerConfig",
    "MLPConfig",
    "ModelConfig",
    "NoDistConfig",
    "OneCycleSchedulerConfig",
    "OptimizerConfig",
    "PlateauSchedulerConfig",
    "PrecisionConfig",
    "ProcessGroupConfig",
    "RegressionTaskConfig",
    "SGDConfig",
    "SchedulerConfig",
    "StepSchedulerConfig",
    "TaskConfig",
    "TextConfig",
    "TorchvisionConfig",
    "TrainConfig",
    "TrainerConfig",
    "register",
    "validate",
]

# ConfigStore name -> schema. conf/<entry>.yaml and conf/<group>/<option>.yaml name theirs in their defaults list.
SCHEMAS: dict[str, type] = {
    "train_schema": TrainConfig,
    "eval_schema": EvalConfig,
    "export_schema": ExportConfig,
    "infer_schema": InferConfig,
    "trainer_schema": TrainerConfig,
    "task_classification_schema": ClassificationTaskConfig,
    "task_regression_schema": RegressionTaskConfig,
    "task_language_model_schema": LanguageModelTaskConfig,
    "data_image_schema": DataConfig,
    "data_diabetes_schema": DiabetesConfig,
    "data_csv_schema": CsvConfig,
    "data_text_schema": TextConfig,
    "model_cnn_schema": CNNConfig,
    "model_gpt_schema": GPTConfig,
    "model_mlp_schema": MLPConfig,
    "model_torchvision_schema": TorchvisionConfig,
    "optimizer_adamw_schema": AdamWConfig,
    "optimizer_sgd_schema": SGDConfig,
    "scheduler_cosine_schema": CosineSchedulerConfig,
    "scheduler_step_schema": StepSchedulerConfig,
    "scheduler_onecycle_schema": OneCycleSchedulerConfig,
    "scheduler_plateau_schema": PlateauSchedulerConfig,
    "scheduler_constant_schema": ConstantSchedulerConfig,
    "precision_schema": PrecisionConfig,
    "dist_none_schema": NoDistConfig,
    "dist_ddp_schema": DDPConfig,
    "dist_fsdp_schema": FSDPConfig,
    "logger_schema": LoggerConfig,
}


def register() -> None:
    """Store every schema at the root of Hydra's ConfigStore (no group: a schema is not an option to choose)."""
    cs = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        cs.store(name=name, node=schema)


def validate(cfg: DictConfig) -> None:
    """Run every schema's value checks (``__post_init__``); raise ConfigError naming the bad key.

    Keys a schema does not declare are refused first: Hydra's ``+key=value`` / ``++key=value`` add them to a typed
    node regardless of its schema, and ``OmegaConf.to_object`` would then drop them without a word."""
    undeclared = next(undeclared_keys(cfg), None)
    if undeclared is not None:
        raise ConfigError(unknown_key_message(*undeclared))
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
