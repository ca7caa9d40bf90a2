"""Config mistakes in one or two lines: what is wrong, the nearest thing that is right, and what is allowed.

Hydra reports a bad override in 5 to 12 lines: its own message, OmegaConf's, the config search path and a hint.
`describe` turns the exceptions behind them into a short message. lab.cli prints that instead, unless
HYDRA_FULL_ERROR=1 asks for Hydra's full report.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from lab.config import options
from lab.errors import ConfigError

_SEARCH_PATH = "Config search path"  # Hydra lists it last in a message; nothing after it is about the mistake
_NOISE = ("See https://hydra.cc", "Set the environment variable HYDRA_FULL_ERROR")  # lines that only point elsewhere


def _nearest(word: str, candidates: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_key_message(path: str, key: str, keys: Iterable[Any], option: type | None = None) -> str:
    """Say `trainer.max_epoch is not a key of trainer; did you mean trainer.max_epochs?`, then list the keys of the
    node at `path` ("trainer." or ""). The `option` class typing the node, if any, is named, with the options that do
    have the key (`data=digits data.num_samples=5`)."""
    names = [str(k) for k in keys]
    close = _nearest(key, names) or _in_a_child(option, key)
    node = path[:-1] or "the config"
    hint = f"; did you mean {path}{close}?" if close else ""
    name = options.option_name(option) if option is not None else None
    # an option chosen by `<group>=<name>` (not a tracker's settings)
    if option is not None and name is not None and issubclass(option, options.Option) and option.key:
        group = option.config_group
        node = f"{node}={name}"
        owners = [other for other, cls in options.options(group).items() if key in cls.__dataclass_fields__]
        if owners:
            hint += f" ({', '.join(f'{group}={o}' for o in owners)} {'have' if len(owners) > 1 else 'has'} it)"
    return f"{path}{key} is not a key of {node}{hint}\n  keys of {node}: {', '.join(names)}"


def _in_a_child(schema: type | None, key: str) -> str | None:
    """Find `key` in a child node of `schema` (`wandb.mode` for `logger.mode`); a child's schema is its default."""
    if schema is None or not dataclasses.is_dataclass(schema):
        return None
    for field in dataclasses.fields(schema):
        child = field.default_factory
        if isinstance(child, type) and dataclasses.is_dataclass(child) and key in child.__dataclass_fields__:
            return f"{field.name}.{key}"
    return None


def unknown_option_message(group: str, option: str, options: Iterable[str]) -> str:
    """Say `model=cnnn is not an option of model; did you mean model=cnn?`, then list the options."""
    names = sorted(options)
    close = _nearest(option, names)
    hint = f"; did you mean {group}={close}?" if close else ""
    return f"{group}={option} is not an option of {group}{hint}\n  options of {group}: {', '.join(names)}"


def _first_lines(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if line.startswith(_SEARCH_PATH):
            break
        if line.strip() and not line.startswith(_NOISE):
            lines.append(line.strip())
    return lines


def describe(err: BaseException) -> str | None:
    """Describe a mistake Hydra or OmegaConf found in one or two lines, or return None so a bug is never rewritten."""
    refusal: BaseException | None = err
    while refusal is not None and not isinstance(refusal, ConfigError):  # a plugin's own refusal, maybe wrapped
        refusal = refusal.__cause__ or refusal.__context__
    if refusal is not None:
        return str(refusal)
    if not isinstance(err, (HydraException, OmegaConfBaseException)):
        return None
    cause = err if isinstance(err, (ConfigAttributeError, ConfigKeyError)) else err.__cause__
    if isinstance(err, MissingConfigException) and err.options is not None and err.missing_cfg_file:
        group, _, option = err.missing_cfg_file.rpartition("/")
        return unknown_option_message(group, option, err.options)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and isinstance(cause.parent_node, DictConfig):
        key = str(cause.key)
        full_key = str(cause.full_key)
        path = full_key[: len(full_key) - len(key)] if full_key.endswith(key) else ""
        keys = [str(k) for k in cause.parent_node if k != "hydra"]
        if not path and GlobalHydra.instance().is_initialized():  # the app's groups too, `experiment`: no key
            keys += [g for g in GlobalHydra.instance().config_loader().list_groups("") if g not in (*keys, "hydra")]
        return unknown_key_message(path, key, keys, OmegaConf.get_type(cause.parent_node))
    lines = _first_lines(str(err))
    reason = _first_lines(str(cause))[:1] if isinstance(cause, OmegaConfBaseException) else []
    if isinstance(cause, ValidationError) and lines and reason:  # a wrong type: `data.batch_size=abc: Value 'abc'...`
        return f"{lines[0].removeprefix('Error merging override ')}: {reason[0]}"
    if reason:
        lines = lines[:1] + reason
    return "\n  ".join(lines[:2]) or None
