"""A test's callback: rank `rank` sends itself SIGKILL when optimizer step `step` ends, on the first attempt of a
torchrun job only (TORCHELASTIC_RESTART_COUNT 0), as a node failure or the OOM killer ends one worker: torchrun
then stops the other workers and, with `--max-restarts`, starts them all again."""

from __future__ import annotations

import os
import signal

from lab.training.callbacks import Callback


class KillRankOnce(Callback):
    def __init__(self, step: int, rank: int = 0) -> None:
        self.step, self.rank = step, rank

    def on_train_step_end(self, trainer) -> None:
        first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first and trainer.parallel.rank == self.rank and trainer.progress.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
