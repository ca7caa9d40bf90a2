"""The tests' callbacks as options of the `callback` kind (``+callbacks.kill_at_step={step: 7}``), as a fork's are
in src/lab/config. Python imports this module when it starts (`site`) and finds it on its path: plugins_env() puts
this folder there, so every process of a test's run has the options, torchrun's ranks and a launcher's jobs too
(tests/warm_python.py's forks import it the same way). Free of torch, as a config module is: each `build` imports
its callback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config import CallbackConfig, register


@dataclass
class KillAtStepConfig(CallbackConfig):
    step: int = MISSING
    signal: str = "SIGKILL"

    def build(self, trainer: Any) -> Any:
        from kill_at_step import KillAtStep

        return KillAtStep(self.step, self.signal)


@dataclass
class KillRankOnceConfig(CallbackConfig):
    step: int = MISSING
    rank: int = 0

    def build(self, trainer: Any) -> Any:
        from kill_rank_once import KillRankOnce

        return KillRankOnce(self.step, self.rank)


@dataclass
class KeepCheckpointConfig(CallbackConfig):
    epoch: int = 1

    def build(self, trainer: Any) -> Any:
        from keep_checkpoint import KeepCheckpoint

        return KeepCheckpoint(self.epoch)


@dataclass
class CrashOnceConfig(CallbackConfig):
    def build(self, trainer: Any) -> Any:
        from crash_once import CrashOnce

        return CrashOnce()


@dataclass
class KillJobConfig(CallbackConfig):
    def build(self, trainer: Any) -> Any:
        from kill_job import KillJob

        return KillJob()


@dataclass
class StopJobConfig(CallbackConfig):
    signal: str = "SIGTERM"

    def build(self, trainer: Any) -> Any:
        from stop_job import StopJob

        return StopJob(self.signal)


register()
