"""A test's callback: the process sends itself `signal` (SIGKILL by default) when optimizer step `step` ends. SIGKILL,
as the kernel's OOM killer or a node failure ends a run: no handler runs, nothing is saved, what is on disk is the
last checkpoint written before. A stop signal (SIGTERM): the run saves last.pt at that step and ends, at a step
of the test's choosing."""

from __future__ import annotations

import os
import signal as signals

from lab.training.callbacks import Callback


class KillAtStep(Callback):
    def __init__(self, step: int, signal: str = "SIGKILL") -> None:
        self.step, self.signal = step, signals.Signals[signal]

    def on_train_step_end(self, trainer) -> None:
        if trainer.progress.global_step == self.step:
            os.kill(os.getpid(), self.signal)
