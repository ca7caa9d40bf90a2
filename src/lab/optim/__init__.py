"""Optimizers (``optimizers``: parameter groups, fused kernels, LR scaling) and LR schedules (``schedulers``)."""

from lab.optim.optimizers import build_optimizer, lr_scale, parameter_groups
from lab.optim.schedulers import PerStep, Schedule, WarmupPlateau, build_scheduler

__all__ = ["PerStep", "Schedule", "WarmupPlateau", "build_optimizer", "build_scheduler", "lr_scale", "parameter_groups"]
