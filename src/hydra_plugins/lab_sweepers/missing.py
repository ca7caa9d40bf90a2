"""The launcher stored under `hydra/launcher=<name>` when the plugin it builds on is not installed (config.py): it
refuses, naming the extra that brings the plugin, before any job starts. Public: Hydra runs only the launchers its
plugin scan registered."""

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher

from lab import extras


class MissingPlugin(Launcher):
    def __init__(self, what: str, requires: list[str], **_: Any) -> None:
        extras.require(what, requires)
        raise RuntimeError(f"{what}: {', '.join(requires)} installed, yet its plugin did not load; reinstall it")

    def setup(self, **_: Any) -> None:  # never reached: the constructor refuses
        raise NotImplementedError

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        raise NotImplementedError
