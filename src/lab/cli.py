"""Helpers shared by the entry scripts. No torch import here (start-up speed)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any

from lab.config import validate
from lab.errors import ConfigError, UserError


def in_multirun() -> bool:
    """True inside a job of a Hydra sweep (`-m`, or a config that sets hydra.mode=MULTIRUN)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.initialized() and HydraConfig.get().mode.name == "MULTIRUN"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user mistakes into one clear line and a non-zero exit instead of a traceback.

    Inside a sweep the error is re-raised instead: Hydra records an exception as that job's failure and goes on
    with the next job, while SystemExit (not an Exception) would escape Hydra and end the whole sweep. The sweep
    summary reports the job's error and the sweep's exit code (lab/sweeps/summary.py).
    """
    try:
        yield
    except (ConfigError, UserError) as err:
        if in_multirun():
            raise
        sys.exit(f"error: {err}")


def run_workflow(cfg: Any, workflow: str) -> Any:
    """What every entry script does: validate the config, then import (torch-heavy) and run lab.workflows.<x>."""
    with user_errors():
        validate(cfg)
        return importlib.import_module(f"lab.workflows.{workflow}").run(cfg)
