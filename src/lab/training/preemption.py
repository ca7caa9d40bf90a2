"""Stop training on a signal without losing work.

SIGTERM is a cluster's preemption or `kill`. SIGUSR1 is SLURM's warning before the time limit (`--signal=USR1@<s>`).
SIGUSR2 is submitit's before a preemption or the time limit (`SUBMITIT_PREEMPT_SIGNAL`). SIGINT is Ctrl-C.

The handler only records the signal. The trainer finishes the optimizer step in flight, all ranks agree to stop
(`Parallel.largest_at_last_call`) and last.pt is written. The run ends with status "interrupted" and exit code
128 + the signal number (143 SIGTERM, 138 SIGUSR1, 130 SIGINT), as a shell reports a process the signal killed.
A second Ctrl-C quits at once. Outside training a stop signal stops at once (`lab.stopping`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from lab import stopping
from lab.errors import Interrupted
from lab.sweeps import sweep_of, sweep_resume_hint

log = logging.getLogger(__name__)


def interrupted(signum: int, step: int, checkpoint: str) -> Interrupted:
    name = signal.Signals(signum).name
    run_dir = Path(checkpoint).parent.parent  # <run dir>/checkpoints/last.pt
    return Interrupted(
        f"interrupted by {name} after optimizer step {step}; saved {checkpoint} ({resume_hint(run_dir)})",
        exit_code=128 + signum,
    )


def resume_hint(run_dir: Path) -> str:
    """Return how to continue the run in `run_dir`. A sweep job is continued by its sweep, because `ckpt_path=` or
    `resume=<run dir>` on the sweep command would start every job from this one job's weights."""
    sweep_dir = sweep_of(run_dir)
    if sweep_dir is None:
        return f"resume: the same command with resume={run_dir}"
    return sweep_resume_hint(sweep_dir)


class StopSignals:
    """Record the first stop signal in `stop.received` (None until then), in `with StopSignals() as stop:`.
    Restores the previous handlers on exit. Does nothing outside the main thread, where Python allows no handlers."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> StopSignals:
        self.received = None
        stopping.forget()
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in stopping.STOP_SIGNALS}
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, traceback: TracebackType | None) -> None:
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        handler = previous.get(signal.SIGUSR2)
        if self.received == signal.SIGUSR2 and callable(handler) and handler is not stopping.stop_at_once:
            # now that last.pt is saved, call submitit's own handler. It requeues the job and exits.
            # hydra/launcher=slurm adds ckpt_path=<run dir>/checkpoints/last.pt to the requeued job.
            handler(signal.SIGUSR2, None)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not stopping.is_first(signum):  # the launcher forwards the same stop again; act on it once
            return
        self.received = signum
        log.warning(
            "%s received: stopping after this optimizer step and saving last.pt%s",
            signal.Signals(signum).name,
            " (Ctrl-C again to quit at once)" if signum == signal.SIGINT else "",
        )
