"""The probe bench/startup.py runs the CLI with: the callback option `first_step`, which writes the time of the first
optimizer step to $LAB_BENCH_FIRST_STEP_FILE and ends the process there. Python imports this module when it starts
and finds it on its path (bench/startup.py puts this folder there), as a fork's option module is imported. Free of
torch until the callback is built, so start-up is measured as the CLI has it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import CallbackConfig, register


@dataclass
class FirstStepConfig(CallbackConfig):
    def build(self, trainer: Any) -> Any:
        from lab.training.callbacks import Callback

        class FirstStep(Callback):
            def on_train_step_end(self, trainer: Any) -> None:
                Path(os.environ["LAB_BENCH_FIRST_STEP_FILE"]).write_text(repr(time.time()))
                os._exit(0)  # nothing after the first step is start-up: skip teardown (wandb's finish included)

        return FirstStep()


register()
