"""Name -> builder tables for the kinds a fork extends: models, datasets, tasks.

A builder registers itself with ``@REGISTRY.register("name", config=Schema)`` in any module of its kind's package
(``lab/models/``, ``lab/data/``, ``lab/tasks/``). Every module of that package is imported on the first lookup, so
a new file is found without editing an ``__init__``. ``config`` is the dataclass that checks the group's YAML node
strictly (unknown keys and wrong types are errors, ``__post_init__`` checks values), for options whose YAML does not
already extend a schema of ``lab.config``.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lab.errors import ConfigError


@dataclass(frozen=True)
class Entry:
    builder: Callable[..., Any]
    config: type | None  # the schema of this option's config node, or None (the YAML extends one already)


class Registry:
    def __init__(self, kind: str, package: str, noun: str | None = None) -> None:
        self.kind, self.package = kind, package  # kind: the config group ("model", "data", "task")
        self.noun = noun or kind  # what one option is called in messages ("dataset")
        self._entries: dict[str, Entry] = {}
        self._discovered = False

    def register(self, name: str, config: type | None = None) -> Callable[[Callable], Callable]:
        def decorator(builder: Callable) -> Callable:
            previous = self._entries.get(name)
            # Re-importing the same module (reloads, notebooks) is harmless; two different builders claiming one
            # name is a fork bug that would otherwise silently pick whichever module imported last.
            if previous is not None and _qualified(previous.builder) != _qualified(builder):
                raise ValueError(f"{self.kind} {name!r} is already registered by {_qualified(previous.builder)}")
            self._entries[name] = Entry(builder, config)
            return builder

        return decorator

    def available(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            self._discover()
        if name not in self._entries:
            close = difflib.get_close_matches(name, self._entries, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                f"{self.kind}.name={name!r} is not a registered {self.noun}; {hint}available: "
                f"{', '.join(self.available())} (a new one is a module in {self.package.replace('.', '/')}/ "
                f"with @register({name!r}))"
            )
        return self._entries[name]

    def checked(self, cfg: Any) -> Any:
        """``cfg`` checked against its option's schema (when it has one); ConfigError names the bad key."""
        schema = self.entry(cfg.name).config
        if schema is None or not isinstance(cfg, DictConfig):
            return cfg
        try:
            # resolved first: an interpolation (${task.target_type}) points outside this node
            merged = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.to_container(cfg, resolve=True))
            OmegaConf.to_object(merged)  # runs __post_init__
        except ConfigError:
            raise
        except OmegaConfBaseException as err:
            raise ConfigError(f"{self.kind}: {str(err).splitlines()[0]} (the {cfg.name} {self.noun} config)") from err
        return merged

    def build(self, cfg: Any, *args: Any) -> Any:
        return self.entry(cfg.name).builder(self.checked(cfg), *args)

    def _discover(self) -> None:
        if self._discovered:
            return
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{self.package}.{module.name}")
        self._discovered = True


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"
