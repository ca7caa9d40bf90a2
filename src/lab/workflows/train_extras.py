"""The optional parts of a training run, each on only when its config key asks for it and its module imported only
then: debug=profile's profiler, trainer.ema, trainer.log_stats_every_n_steps, debug=anomaly's detector."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import torch

from lab import tracking
from lab.distributed.parallel import Parallel
from lab.training import Trainer
from lab.training.ema import EMA

log = logging.getLogger(__name__)


def profiler(profile_cfg: Any, run_dir: Path, tracker: tracking.Tracker, device: Any, parallel: Parallel) -> Any:
    """debug=profile: rank 0 profiles a few steps, as a trainer callback (lab.tools is imported only then)."""
    if not (profile_cfg.enabled and parallel.is_main):
        return None
    from lab.tools.profiling import StepProfiler

    return StepProfiler(profile_cfg, run_dir, tracker, device)


def ema(ema_cfg: Any, model: torch.nn.Module) -> EMA | None:
    """trainer.ema.decay: an averaged copy of the plain (unwrapped) model that validation, best.pt and test use."""
    if not ema_cfg.decay:
        return None
    ema = EMA(model, ema_cfg.decay, ema_cfg.every_n_steps)
    log.info("%s: validation, best.pt and the test split score the averaged weights", ema.describe())
    return ema


def training_stats(every_n_steps: int, model: torch.nn.Module, parallel: Parallel) -> Any:
    """trainer.log_stats_every_n_steps: rank 0 logs per-layer statistics (DDP's gradients are the same on every
    rank), as a trainer callback (imported only then)."""
    if not (every_n_steps and parallel.is_main):
        return None
    from lab.training.stats import TrainingStats

    return TrainingStats(model, every_n_steps)


def anomaly_detector(trainer: Trainer) -> Any:
    """trainer.detect_anomaly (debug=anomaly): the first NaN/inf named in one line (lab.tools imported only then)."""
    if not trainer.cfg.detect_anomaly:
        return contextlib.nullcontext()
    from lab.tools.anomaly import NonFiniteDetector

    return NonFiniteDetector(trainer)
