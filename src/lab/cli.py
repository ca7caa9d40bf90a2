"""Helpers shared by the entry scripts. No torch import here (start-up speed)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from lab.errors import ConfigError, UserError


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user mistakes into one clear line and a non-zero exit instead of a traceback."""
    try:
        yield
    except (ConfigError, UserError) as err:
        sys.exit(f"error: {err}")
