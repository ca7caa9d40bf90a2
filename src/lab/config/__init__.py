"""Every config schema and option a run can choose (`lab.config.options`), each default written here, once.

`register` stores each option in Hydra's ConfigStore as `<group>/<name>` and the entry schemas (`SCHEMAS`) at the
root; `validate` runs every value check once, before any work (docs/architecture.md, "Plug-in seams"). A fork adds
options as modules in this package. This package must not import torch: every entry script imports it, and `--help`
and `--cfg job` stay fast only if nothing heavy loads before Hydra prints and exits."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lab import upstream
from lab.config import options, tools, trackers
from lab.config.callbacks import CallbackConfig
from lab.config.data import DataConfig, ImageDataConfig
from lab.config.distributed import DistConfig, ProcessGroupConfig
from lab.config.models import ModelConfig
from lab.config.optim import OptimizerConfig, SchedulerConfig
from lab.config.options import Option
from lab.config.tasks import TaskConfig
from lab.config.tools import EvalConfig, EvalStepConfig, ExportConfig, ExportStepConfig, InferConfig
from lab.config.trackers import LoggerConfig, TrackerConfig
from lab.config.training import PrecisionConfig, TrainConfig, TrainerConfig, TrainNodeConfig, train_nodes, train_schema
from lab.errors import ConfigError

__all__ = [
    "SCHEMAS",
    "CallbackConfig",
    "ConfigError",
    "DataConfig",
    "DistConfig",
    "EvalConfig",
    "EvalStepConfig",
    "ExportConfig",
    "ExportStepConfig",
    "ImageDataConfig",
    "InferConfig",
    "LoggerConfig",
    "ModelConfig",
    "OptimizerConfig",
    "Option",
    "PrecisionConfig",
    "ProcessGroupConfig",
    "SchedulerConfig",
    "TaskConfig",
    "TrackerConfig",
    "TrainConfig",
    "TrainNodeConfig",
    "TrainerConfig",
    "options",
    "register",
    "train_nodes",
    "validate",
]

# ConfigStore name -> schema of an entry config; conf/<entry>.yaml names its own in its defaults list. The logger
# group's options extend nothing: the entry schemas type `logger`, and `logger=[wandb,csv]` merges them in turn.
SCHEMAS: dict[str, type] = {
    "train_schema": TrainConfig,
    "eval_schema": EvalConfig,
    "export_schema": ExportConfig,
    "infer_schema": InferConfig,
}


_STORED: set[type] = set()  # option classes register() has stored


def register() -> None:
    """Import every module of this package and every `options.py` of lab's packages and extensions, then store the
    entry schemas and every option not yet stored. It runs on this package's import and again when Hydra builds its
    search path (hydra_plugins/lab_sweepers/extensions.py): an options module imported first imports this package
    halfway through its own body, before its own options exist."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    # Each package's options module, the core's (lab/<package>/options.py) then the extensions'. Found, not named:
    # this package sits below every component, so it imports none of them by name.
    package = Path(__file__).resolve().parents[1]
    for path in [*sorted(package.glob("*/options.py")), *sorted(package.glob("extensions/*/options.py"))]:
        importlib.import_module(
            ".".join((__name__.rpartition(".")[0], *path.relative_to(package).with_suffix("").parts))
        )
    new = [(group, name, option) for group in options.groups() for name, option in options.options(group).items()]
    new = [(group, name, option) for group, name, option in new if option not in _STORED]
    if not _STORED:
        upstream.hydra_store_deferred("default", TrainerConfig, group="trainer")  # the schema's defaults: no YAML
        upstream.hydra_store_deferred("none", {}, group="logger")  # every tracker off, as the schema's default has them
    # On every call: some schemas hold a node per option (the logger's trackers, the export's steps), and the options
    # may have changed since the last call (an extension imported late, a test's fork option removed).
    SCHEMAS["train_schema"] = train_schema()  # with the extensions' top-level nodes
    # Made now, not when first composed (ConfigStore entries are made then): a config pickled for a launcher's
    # workers names these classes, and a worker has only what importing this package makes.
    trackers.logger_schema(), tools.eval_options(), tools.export_options()
    for root, root_schema in SCHEMAS.items():
        upstream.hydra_store_deferred(root, root_schema)
    for group, name, option in new:
        stored = option.stored_as(name)
        if stored is not None:
            upstream.hydra_store_deferred(name, stored[1], group=stored[0], package=options.package(group, name))
        _STORED.add(option)


def _undeclared_keys(node: DictConfig, path: str = "") -> Iterator[tuple[str, str, list[str], type | None]]:
    """Yield (node path, key, declared keys, schema) for each key a typed node holds that its schema lacks."""
    schema = OmegaConf.get_type(node)
    fields = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else None
    for key in node:
        if fields is not None and key not in fields:
            yield path, str(key), fields, schema
        # OmegaConf types a DictConfig's keys wider (bytes, Enum...) than is_interpolation takes (str | int)
        elif not (OmegaConf.is_missing(node, key) or OmegaConf.is_interpolation(node, key)):  # type: ignore[arg-type]
            child = node[key]
            if isinstance(child, DictConfig):
                yield from _undeclared_keys(child, f"{path}{key!s}.")


def validate(cfg: DictConfig) -> None:
    """Run every schema's value checks (`__post_init__`) and raise ConfigError naming the bad key. Undeclared keys
    are refused first: Hydra's `+key=value` adds them to a typed node regardless of its schema, and
    `OmegaConf.to_object` would drop them silently."""
    undeclared = next(_undeclared_keys(cfg), None)
    if undeclared is not None:
        from lab.config.mistakes import unknown_key_message  # a config without mistakes needs none of that module

        raise ConfigError(unknown_key_message(*undeclared))
    try:
        OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception as err:  # interpolation errors, missing values: OmegaConf's message explains them well
        raise ConfigError(str(err).splitlines()[0]) from err


def _direction(mode: str) -> str:
    """Resolve ${lab.direction:${task.mode}}: a task's max/min as the sweepers' maximize/minimize."""
    if mode not in ("max", "min"):
        raise ConfigError(f"task.mode={mode!r} is not valid; choose one of max, min")
    return "maximize" if mode == "max" else "minimize"


register()
upstream.hydra_config_repository_copied_shallowly()  # its deep copies took 6 of 7 s of --help and each composition
if not OmegaConf.has_resolver("lab.direction"):
    OmegaConf.register_new_resolver("lab.direction", _direction)
