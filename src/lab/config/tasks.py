"""The `task` kind: what is learned. Each task is an option (the core's: lab/tasks/options.py) whose `build(meta)`
makes the `lab.tasks.Task`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.options import Option


@dataclass
class TaskConfig(Option, group="task"):
    """What is learned; `monitor` and `mode` drive best.pt, the plateau scheduler and sweeps.

    `monitor` is a validation metric without "val/"; `target_type` tells table datasets how to read their target."""

    name: str = MISSING
    monitor: str = MISSING
    mode: str = MISSING  # max | min
    target_type: str = MISSING  # class | value | tokens

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("task.mode", self.mode, ("max", "min"))
        names = self.metric_names()
        _require(  # now, not after the first epoch's validation
            names is None or self.monitor in names,
            f"task.monitor={self.monitor!r} is not a validation metric of task={self.name}; "
            f"choose one of {', '.join(names or ())}",
        )

    def metric_names(self) -> tuple[str, ...] | None:
        """Return the validation metrics the task reports (without "val/"), so a bad `monitor` fails before training.

        None means unknown until the first validation, as for a fork's task."""
        return None

    def build(self, meta: dict[str, Any]) -> Any:
        """Return the `lab.tasks.Task` for the data `meta` describes; `lab.tasks.build` sets monitor and mode."""
        raise NotImplementedError(f"{type(self).__name__} has no build(meta)")
