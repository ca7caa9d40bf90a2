"""Extensions: everything the default run does not need, one folder each, found without a list.

    src/lab/extensions/<name>/
        __init__.py     what it adds (the docstring) and ``EXTRAS``: the pyproject.toml extras it needs (a tuple)
        options.py      its options (dataclasses extending a kind's base config): imported by
                        ``lab.config.register()``, so they must not import torch (their ``build`` imports the code)
        conf/           its YAML presets, ``conf/<group>/<name>.yaml`` as in the repository's conf/: on Hydra's
                        search path after the repository's own (hydra_plugins/lab_sweepers/extensions.py)
        plugins.py      the Hydra sweepers/launchers it brings (and their ConfigStore entries), re-exported under
                        hydra_plugins, where Hydra looks for them (hydra_plugins/lab_sweepers/extensions.py)
        __main__.py     its command, when it has one: ``python -m lab.extensions.<name> ...``
        README.md       its page: what it does, its commands (its tests run each), and how to drop it
        tests/          its tests (``tests/integration/`` for those that start a process, as in the suite's tests/)

The core never names an extension; it imports the ``options`` and ``plugins`` modules it finds here. An extension
imports only the core, never another extension. So ``make drop EXT=<name>`` (or ``rm -r`` of its folder) drops
one and the rest stays whole; tests/integration/test_extensions.py checks this. This file uses the standard library
only, because it is imported while composing, before torch.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def names() -> list[str]:
    """Return the extensions present: every package in this folder."""
    return sorted(module.name for module in pkgutil.iter_modules([str(HERE)]) if module.ispkg)


def conf_dirs() -> list[Path]:
    """Return the extensions' own config folders (their presets), in name order."""
    return [HERE / name / "conf" for name in names() if (HERE / name / "conf").is_dir()]


def modules(stem: str) -> list[ModuleType]:
    """Import and return each present extension's module ``<stem>`` (``options``, ``plugins``)."""
    present = [name for name in names() if (HERE / name / f"{stem}.py").is_file()]
    return [importlib.import_module(f"{__name__}.{name}.{stem}") for name in present]
