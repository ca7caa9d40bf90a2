"""A test's callback for Optuna drivers: the process SIGKILLs itself (as a node's crash or an OOM kill ends a
driver, no clean-up) after the first validation of its trial number $KILL_AFTER_TRIALS + 1. With Hydra's basic
launcher a trial runs in its driver's process, so the driver dies with its trial RUNNING in the study."""

from __future__ import annotations

import os
import signal

from hydra.core.hydra_config import HydraConfig

from lab.training.callbacks import Callback

_seen: set[int] = set()  # the trials this process ran: jobs of the basic launcher share it


class KillDriver(Callback):
    def on_validation_end(self, trainer, metrics, epoch) -> None:
        _seen.add(HydraConfig.get().job.num)
        if len(_seen) > int(os.environ.get("KILL_AFTER_TRIALS", "-1")) >= 0:
            os.kill(os.getpid(), signal.SIGKILL)
