"""A package's public names imported on first use (PEP 562).

Each component package keeps its options in `options.py`, which `lab.config.register()` imports at every start,
`--help` included. Importing it runs the package's `__init__.py` first, so that file must not import the package's
torch code: it hands its names on through `names`, and the modules load when a name is first used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def names(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """Return a module `__getattr__` that imports `package.<where[name]>` and returns its `name`."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return __getattr__
