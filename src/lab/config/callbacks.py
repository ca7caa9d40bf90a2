"""Trainer callbacks a run turns on by name, each an option whose `build(trainer)` makes a `Callback`.

    @dataclass
    class PrintLr(CallbackConfig):    # callback=print_lr   (several at once: callback=[print_lr,other])
        every: int = 100              # callbacks.print_lr.every=10

        def build(self, trainer):
            from lab.training.print_lr import PrintLr
            return PrintLr(self.every)

Several can be on at once, so each lands in its own node, `callbacks.<name>` (`+callbacks.<name>={key: value}`
turns one on too, as a sweeper may). The Trainer builds them once it is set up, in the order named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config.options import Option, instantiate


@dataclass
class CallbackConfig(Option, group="callback", package="callbacks.{name}"):
    name: str = MISSING

    def build(self, trainer: Any) -> Any:
        """Return the `lab.training.callbacks.Callback` for `trainer`, set up but not fitting yet, or None for none on
        this rank (a rank-0-only callback). Import the code here: this module imports no torch."""
        raise NotImplementedError(f"the {self.name} callback option needs a build(trainer) that returns the callback")


def chosen(callbacks: Mapping[str, Any]) -> dict[str, CallbackConfig]:
    """Return each entry of `cfg.callbacks` (a node or an option object) as its option, values checked."""
    return {
        key: instantiate("callback", spec if isinstance(spec, Option) else {"name": key, **spec})
        for key, spec in callbacks.items()
    }
