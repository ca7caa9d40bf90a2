"""The `callback` kind: trainer callbacks a run turns on by name, each an option (lab.config.options) whose
``build(trainer)`` makes a ``lab.training.callbacks.Callback`` for the Trainer it hooks into.

    @dataclass
    class PrintLr(CallbackConfig):    # callback=print_lr   (several at once: callback=[print_lr,other])
        every: int = 100              # callbacks.print_lr.every=10

        def build(self, trainer):
            from lab.training.print_lr import PrintLr
            return PrintLr(self.every)

Several callbacks can be on at once, so an option lands in its own node, ``callbacks.<name>``, rather than in the
group's. ``+callbacks.<name>={key: value}`` turns one on too (a sweeper may, in its jobs' overrides), and a callback
that lives outside this package (a test's, a notebook's) can be named by import path instead:
``+callbacks.<any>={_target_: module.Class, ...}``. The Trainer builds them once it is set up, after the callbacks
of its own ``trainer.*`` keys (the EMA, early stopping: lab.training.callbacks.configured); an extension's callback
is an option of its ``options.py`` like any other (lab.extensions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config.options import Option, instantiate
from lab.errors import ConfigError


@dataclass
class CallbackConfig(Option, group="callback", package="callbacks.{name}"):
    name: str = MISSING

    def build(self, trainer: Any) -> object | None:
        """The callback for `trainer` (a ``lab.training.Trainer``, set up, not fitting yet): a
        ``lab.training.callbacks.Callback``, or any object with some of its hooks (duck typing); None for none here
        (a callback only rank 0 runs, on the other ranks). Import its code here: this module imports no torch."""
        raise NotImplementedError(f"the {self.name} callback option needs a build(trainer) that returns the callback")

    def conflict(self, run: Any) -> str | None:
        """Why this callback cannot work with the rest of the run's config `run` (a ``TrainConfig``, its values
        checked), or None: a reason refuses the run before any work starts."""
        return None


def chosen(callbacks: Mapping[str, Any]) -> dict[str, Any]:
    """Each entry of ``cfg.callbacks`` as its option (values checked), or as it is when it names a ``_target_``."""
    return {key: _option(key, spec) for key, spec in callbacks.items()}


def _option(key: str, spec: Any) -> Any:
    if isinstance(spec, Option) or "_target_" in spec:
        return spec
    return instantiate("callback", {"name": key, **spec})


def check(callbacks: Mapping[str, Any], run: Any) -> None:
    """Refuse an unknown callback or key, a wrong value, or a callback that conflicts with the rest of `run`."""
    for option in chosen(callbacks).values():
        why = option.conflict(run) if isinstance(option, CallbackConfig) else None
        if why is not None:
            raise ConfigError(why)


def build(callbacks: Mapping[str, Any], trainer: Any) -> list[Any]:
    """The callbacks ``cfg.callbacks`` turns on, built for `trainer` (one named by ``_target_`` is instantiated)."""
    import hydra.utils

    built = [
        hydra.utils.instantiate(option) if isinstance(option, Mapping) else option.build(trainer)
        for option in chosen(callbacks).values()
    ]
    return [callback for callback in built if callback is not None]
