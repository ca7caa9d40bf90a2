"""Trainer callbacks a run turns on by name, each an option whose `build(trainer)` makes a `Callback`.

    @dataclass
    class PrintLr(CallbackConfig):    # callback=print_lr   (several at once: callback=[print_lr,other])
        every: int = 100              # callbacks.print_lr.every=10

        def build(self, trainer):
            from lab.training.print_lr import PrintLr
            return PrintLr(self.every)

Several callbacks can be on at once, so each option lands in its own node, `callbacks.<name>`.
`+callbacks.<name>={key: value}` also turns one on, as a sweeper may in its jobs' overrides. This is the one way
to add to the Trainer. The core's callbacks (lab/training/options.py) and those of an extension (its `options.py`),
a fork, a test or a notebook are all options. The Trainer builds them once it is set up, in the order
they are named. With `callback=[ema,mine]`, yours sees the EMA's weights back in the model and its val_raw/ metrics.
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
        """Return the `lab.training.callbacks.Callback` for `trainer`, which is set up but not fitting yet.

        Return None for no callback on this rank, e.g. on ranks other than 0 for a rank-0-only callback. Import
        the code here, since this module imports no torch."""
        raise NotImplementedError(f"the {self.name} callback option needs a build(trainer) that returns the callback")

    def conflict(self, run: Any) -> str | None:
        """Return why this callback cannot work with the run's checked `TrainConfig` (refusing the run), or None."""
        return None


def chosen(callbacks: Mapping[str, Any]) -> dict[str, CallbackConfig]:
    """Return each entry of `cfg.callbacks` (a node or an option object) as its option, values checked."""
    return {
        key: instantiate("callback", spec if isinstance(spec, Option) else {"name": key, **spec})
        for key, spec in callbacks.items()
    }
