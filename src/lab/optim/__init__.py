"""Optimizers with their parameter groups and LR scaling (`optimizers`), and LR schedules (`schedulers`)."""

from typing import TYPE_CHECKING

from lab import lazy

if TYPE_CHECKING:
    from lab.optim.optimizers import build_optimizer, parameter_groups, scaled_lr
    from lab.optim.schedulers import PerStep, Schedule, WarmupPlateau, build_scheduler, planned_steps

__all__ = [
    "PerStep",
    "Schedule",
    "WarmupPlateau",
    "build_optimizer",
    "build_scheduler",
    "parameter_groups",
    "planned_steps",
    "scaled_lr",
]

__getattr__ = lazy.names(
    __name__,
    {
        "build_optimizer": "optimizers",
        "parameter_groups": "optimizers",
        "scaled_lr": "optimizers",
        "PerStep": "schedulers",
        "Schedule": "schedulers",
        "WarmupPlateau": "schedulers",
        "build_scheduler": "schedulers",
        "planned_steps": "schedulers",
    },
)
