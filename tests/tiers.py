"""The suite's two tiers (importable as ``tiers``, like ``helpers``).

`integration`: every test under tests/integration (or an extension's tests/integration), and the tests elsewhere that
start a process (an entry script, a Python interpreter, git, wandb's processes, torchrun, a multiprocessing spawn);
they carry the marker themselves.
The rest is the fast tier, in-process only: `make test-fast` (`pytest -m "not integration"`); `make test` runs both.
tests/conftest.py marks the tiers at collection and, in the fast tier, turns every process start into an error.
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# Every way to a new process short of a fork: subprocess (also behind os.popen and asyncio), os.system, posix_spawn,
# and multiprocessing's spawn and forkserver start methods (torch's elastic launcher spawns its workers that way).
# A fork (a DataLoader worker under the fork start method) starts no new interpreter: allowed.
PROCESS_STARTERS = (
    (subprocess.Popen, "__init__", "subprocess.Popen"),
    (os, "system", "os.system"),
    (os, "posix_spawn", "os.posix_spawn"),
    (os, "posix_spawnp", "os.posix_spawnp"),
    (multiprocessing.util, "spawnv_passfds", "a multiprocessing spawn"),
)


class ProcessStarted(RuntimeError):
    """A fast-tier test started a process: mark it `integration` (or move it to tests/integration)."""


def is_integration(path: Path) -> bool:
    """Whether a test belongs to the integration tier by where it is, in a folder named `integration` (tests/'s, or an
    extension's tests/integration/); elsewhere, by its own marker."""
    return "integration" in path.resolve().relative_to(TESTS.parent).parts[:-1]


def refuser(started: list[str], nodeid: str, what: str) -> Callable[..., None]:
    """A stand-in for a process starter: records the attempt in `started` and raises ProcessStarted."""

    def refused(*args, **kwargs) -> None:
        if what == "subprocess.Popen":
            args[0]._child_created = False  # what Popen.__del__ reads of the object never started
        command = args[1] if what == "subprocess.Popen" and len(args) > 1 else kwargs.get("args", args[:1])
        started.append(f"{what} {str(command)[:200]}")
        raise ProcessStarted(f"{nodeid} is a fast-tier test but started a process: {started[-1]}")

    return refused
