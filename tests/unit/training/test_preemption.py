"""Stop signals in-process: recorded during training, the previous handlers back afterwards, and submitit's
SIGUSR2 handler (its requeue) called once last.pt is saved."""

from __future__ import annotations

import os
import signal

from lab.stopping import STOP_SIGNALS
from lab.training.preemption import StopSignals


def test_sigusr2_stops_training_then_reaches_submitits_handler_for_the_requeue() -> None:
    calls = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGUSR2)
            assert stop.received == signal.SIGUSR2 and calls == []  # training saves last.pt first
        assert calls == [signal.SIGUSR2]
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
        assert stop.received == signal.SIGTERM and calls == [signal.SIGUSR2]  # only submitit's own signal
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert signal.SIGUSR2 in STOP_SIGNALS
