"""Find which extra of pyproject.toml brings a distribution, and refuse an option whose packages are missing.

An option names its packages in `requires` (lab.config.options.Option); choosing it without them is refused while
the config is checked, naming the extra. The extras are read from the installed project's Requires-Dist metadata,
so no copy of the lists lives here. Standard library only, since this is imported while composing, before torch.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from lab.errors import ConfigError

PROJECT = __name__.split(".")[0]  # the distribution is named like the package; `make rename` renames both
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def normalise(dist: str) -> str:
    """Return a distribution's canonical name (PEP 503), so `Hydra_Core` and `hydra-core` are one."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def installed(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@functools.cache
def declared() -> dict[str, tuple[str, ...]]:
    """Map each extra ("" for the core) to its canonical distribution names, from the installed metadata.

    Returns {} when the project is not installed, say when run from a source tree on PYTHONPATH alone."""
    try:
        lines = importlib.metadata.requires(PROJECT) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    found: dict[str, list[str]] = {}
    for line in lines:
        requirement, _, marker = line.partition(";")
        extra = _EXTRA_MARKER.search(marker)
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if name:
            found.setdefault(extra.group(1) if extra else "", []).append(normalise(name.group(1)))
    return {extra: tuple(dists) for extra, dists in found.items()}


def extras() -> dict[str, tuple[str, ...]]:
    """Map each extra of pyproject.toml to its distributions."""
    return {extra: dists for extra, dists in declared().items() if extra}


def chosen(is_installed: Callable[[str], bool] = installed) -> list[str]:
    """Return the extras `make install` recorded in .venv/.extras, else those whose distributions are installed."""
    record = Path(sys.prefix) / ".extras"
    if record.is_file():
        return [extra for extra in record.read_text().strip().split(",") if extra]
    return [extra for extra, dists in extras().items() if all(map(is_installed, dists))]


def extra_of(dist: str) -> str | None:
    """Return the extra that brings `dist`, or None if it is in the core or in none."""
    return next((extra for extra, dists in extras().items() if normalise(dist) in dists), None)


def install_hint(dists: Iterable[str]) -> str:
    """Return the command that installs `dists`: through their extras, or as plain packages."""
    dists = list(dists)
    needed = {extra for extra in map(extra_of, dists) if extra}
    if needed and all(extra_of(dist) for dist in dists):
        # `make install EXTRAS=` replaces the whole choice, so keep the extras already there
        return (
            f"make install EXTRAS={','.join(sorted(set(chosen()) | needed))} "
            f"(or pip install -c requirements.txt -e '.[{','.join(sorted(needed))}]')"
        )
    return f"pip install -c requirements.txt {' '.join(dists)}"


def require(what: str, dists: Iterable[str], instead: str = "") -> None:
    """Refuse `what` (e.g. "model=timm") unless every distribution it needs is installed; suggest `instead`."""
    missing = [dist for dist in dists if not installed(dist)]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise ConfigError(
            f"{what} needs {', '.join(missing)}, which {verb} not installed: {install_hint(missing)}"
            + (f"; or {instead}" if instead else "")
        )
