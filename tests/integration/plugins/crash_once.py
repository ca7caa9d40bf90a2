"""A fork's callback for the restart test: the first attempt of the job fails after its first validation."""

from __future__ import annotations

import os

from lab.training.callbacks import Callback


class CrashOnce(Callback):
    def on_validation_end(self, trainer, metrics, epoch) -> None:
        if int(os.environ.get("LAB_RESTART_COUNT", "0")) == 0:
            raise RuntimeError("injected failure of the first attempt")
