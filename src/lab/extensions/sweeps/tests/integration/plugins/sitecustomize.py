"""This folder's test callback as an option of the `callback` kind (``+callbacks.kill_driver={}``), as a fork's is
in src/lab/config: Python imports this module when it starts (`site`) and finds it on its path, where the tests of
killed drivers put this folder (tests/integration/plugins/sitecustomize.py does the same for the core's tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.config import CallbackConfig, register


@dataclass
class KillDriverConfig(CallbackConfig):
    def build(self, trainer: Any) -> Any:
        from kill_driver import KillDriver

        return KillDriver()


register()
