"""Handle stop signals for the whole life of a process. No torch import, since entry scripts use it.

The signals are SIGTERM (preemption, `kill`), SIGUSR1 (SLURM's warning before the time limit), SIGUSR2 (submitit's
warning) and SIGINT (Ctrl-C). Training finishes its optimizer step and saves last.pt first
(lab.training.preemption). Anywhere else there is no step to finish, so the first stop signal raises StopRequested
at once, as Ctrl-C raises KeyboardInterrupt. Every `with` and `finally` on the way out runs, and the entry script
ends with one line and exit code 128 + the signal.

The process acts on its first stop signal only. A spawned rank gets a signal to its job twice (directly, then from
the launcher), and the second must not cut short the records the first is finishing. Only a second Ctrl-C, a moment
after the first, quits at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)
_SAME_PRESS_S = 1.0
log = logging.getLogger(__name__)

_first: int | None = None  # this process's first stop signal, once it got one
_first_at = 0.0
_launcher: int | None = None  # the launcher's pid, in a rank it spawned


class StopRequested(KeyboardInterrupt):
    """A stop signal with no optimizer step in flight; a KeyboardInterrupt, so `except Exception` won't catch it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def is_first(signum: int) -> bool:
    """Note the stop signal `signum` and return whether it is this process's first. A second Ctrl-C more than a
    moment after the first ends the process at once (SystemExit 130)."""
    global _first, _first_at
    if _first is None:
        _first, _first_at = signum, time.monotonic()
        if _launcher is not None:  # a signal to this rank alone stops the whole job, like one to the launcher
            with contextlib.suppress(ProcessLookupError):
                os.kill(_launcher, signum)
        return True
    if signum == signal.SIGINT and time.monotonic() - _first_at > _SAME_PRESS_S:
        raise SystemExit(128 + signum)
    return False


def tell_launcher(pid: int) -> None:
    """Note that the launcher `pid` spawned this rank (lab.distributed.spawning), so a stop is passed on to it."""
    global _launcher
    _launcher = pid if pid != os.getpid() else None  # a launcher faked in-process has nothing to pass on


def forget() -> None:
    """Clear the pending stop when a new stretch of training starts (a real one would have ended the process)."""
    global _first
    _first = None


def stop_at_once(signum: int, frame: FrameType | None) -> None:
    if is_first(signum):
        raise StopRequested(signum)


@contextlib.contextmanager
def _handled(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Handle the stop signals with `handler` in the block; in the main thread only, as Python requires."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, earlier in previous.items():
            signal.signal(sig, earlier)


def raised_at_once() -> contextlib.AbstractContextManager[None]:
    """Make the first stop signal raise StopRequested in the block."""
    return _handled(stop_at_once)


def signal_number(interrupt: KeyboardInterrupt) -> int:
    """Return the stop signal behind a KeyboardInterrupt: Ctrl-C's own, or StopRequested's."""
    return getattr(interrupt, "signum", signal.SIGINT)


def stopped_at_once(signum: int) -> str:
    """Return the one line for a stop with no optimizer step in flight, where nothing more was saved."""
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    return f"interrupted by {name}; stopped at once, nothing more was saved"


class StopNote:
    """The first stop signal a sweep's launcher got while its jobs ran (`signum` None: none yet)."""

    signum: int | None = None
    cancelled = False  # the launcher has passed the stop on to the running jobs

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


@contextlib.contextmanager
def noting_stop_signals(on_signal: Callable[[int], None] | None = None) -> Iterator[StopNote]:
    """While a launcher's jobs run, note the first stop signal (the launcher then starts no further job) and call
    `on_signal` with each one. The jobs save last.pt and stop. Outside the main thread it does nothing."""
    stop = StopNote()

    def note(signum: int, frame: FrameType | None) -> None:
        if stop.signum is None:
            stop.signum = signum
            log.warning("%s received: the running jobs save last.pt and stop; no further job starts", stop.name)
        if on_signal is not None:
            on_signal(signum)

    with _handled(note):
        yield stop
