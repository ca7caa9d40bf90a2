"""Name -> builder table behind :func:`lab.models.build`; forks add a model by registering a builder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from lab.config import ConfigError

# A builder receives the model config (DictConfig or dataclass, read by attribute) and the data module's meta.
Builder = Callable[[Any, Mapping[str, Any]], nn.Module]

_BUILDERS: dict[str, Builder] = {}


def register(name: str) -> Callable[[Builder], Builder]:
    """Decorator: make ``builder`` reachable as ``model.name=<name>``."""

    def decorator(builder: Builder) -> Builder:
        previous = _BUILDERS.get(name)
        # Re-importing the same module (reloads, notebooks) is harmless; two different builders claiming
        # one name is a fork bug that would otherwise silently pick whichever module imported last.
        if previous is not None and _qualified(previous) != _qualified(builder):
            raise ValueError(f"model {name!r} is already registered by {_qualified(previous)}")
        _BUILDERS[name] = builder
        return builder

    return decorator


def available() -> list[str]:
    """Registered model names, sorted."""
    return sorted(_BUILDERS)


def build(cfg: Any, meta: Mapping[str, Any]) -> nn.Module:
    """Build the model named ``cfg.name`` for the data described by ``meta``."""
    name = cfg.name
    if name not in _BUILDERS:
        raise ConfigError(f"model.name={name!r} is not a registered model; available: {', '.join(available())}")
    return _BUILDERS[name](cfg, meta)


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"
