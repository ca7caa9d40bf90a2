"""A test's callback: built by rank 0 while the run sets up (before training), it sends `signal` to its whole
process group, as a terminal's Ctrl-C or `kill -- -<pgid>` does, and waits for it to act."""

from __future__ import annotations

import os
import signal as signals
import time

from lab.training.callbacks import Callback


class StopJob(Callback):
    def __init__(self, signal: str = "SIGTERM") -> None:
        if os.environ.get("RANK", "0") == "0":
            os.killpg(0, signals.Signals[signal])
            time.sleep(60)  # the signal's handler ends this
