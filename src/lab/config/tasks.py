"""The `task` kind: what is learned. Each task is an option (the core's: lab/tasks/options.py) whose `build(meta)`
makes the `lab.tasks.base.Task`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.options import Option


@dataclass
class TaskConfig(Option, group="task"):
    """What is learned; `monitor` and `mode` drive best.pt, the plateau scheduler and sweeps."""

    name: str = MISSING
    monitor: str = MISSING  # a validation metric without "val/"
    mode: str = MISSING  # max | min
    target_type: str = MISSING  # class | value | tokens: how table datasets read their target

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
        """Return the validation metrics the task reports (without "val/"), so a bad `monitor` fails before training,
        or None: unknown until the first validation, as for a fork's task."""
        return None

    def build(self, meta: dict[str, Any]) -> Any:
        """Return the `tasks.base.Task` for the data `meta` describes; `tasks.common.build` sets monitor and mode."""
        raise NotImplementedError(f"{type(self).__name__} has no build(meta)")
