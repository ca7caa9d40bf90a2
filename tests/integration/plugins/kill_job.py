"""A test's callback for sweeps: the job numbered $KILL_JOB sends itself $KILL_SIGNAL (default KILL: as the kernel's
OOM killer ends a process, no clean-up) after its first validation. Set in the environment, not in the overrides,
so that the same sweep command runs again without it (`resume=auto` compares the jobs' overrides)."""

from __future__ import annotations

import os
import signal

from hydra.core.hydra_config import HydraConfig

from lab.training.callbacks import Callback


class KillJob(Callback):
    def on_validation_end(self, trainer, metrics, epoch) -> None:
        if os.environ.get("KILL_JOB") == str(HydraConfig.get().job.num):
            os.kill(os.getpid(), signal.Signals[f"SIG{os.environ.get('KILL_SIGNAL', 'KILL')}"])
