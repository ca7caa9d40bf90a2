"""The `callback` kind: trainer callbacks a run turns on by name, each an option (lab.config.options) whose
``build()`` makes a ``lab.training.callbacks.Callback``.

    @dataclass
    class PrintLr(CallbackConfig):    # +callback=print_lr   (several at once: +callback=[print_lr,other])
        every: int = 100              # callbacks.print_lr.every=10

        def build(self):
            from lab.training.print_lr import PrintLr
            return PrintLr(self.every)

Several callbacks can be on at once, so an option lands in its own node, ``callbacks.<name>``, rather than in the
group's. ``+callbacks.<name>={key: value}`` turns one on too (a sweeper may, in its jobs' overrides), and a callback
that lives outside this package (a test's, a notebook's) can be named by import path instead:
``+callbacks.<any>={_target_: module.Class, ...}``. The shipped EMA, early stopping, statistics, profiler and
anomaly detection are settings of the loop (``trainer.*`` keys) that the Trainer turns into callbacks itself.
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

    def build(self) -> object:
        """The callback: a ``lab.training.callbacks.Callback``, or any object with some of its hooks (duck typing)."""
        raise NotImplementedError(f"the {self.name} callback option needs a build() that returns the callback")


def chosen(callbacks: Mapping[str, Any]) -> dict[str, Any]:
    """Each entry of ``cfg.callbacks`` as its option (values checked), or as it is when it names a ``_target_``."""
    return {key: _option(key, spec) for key, spec in callbacks.items()}


def _option(key: str, spec: Any) -> Any:
    if isinstance(spec, Option) or "_target_" in spec:
        return spec
    return instantiate("callback", {"name": key, **spec})


def build(callbacks: Mapping[str, Any]) -> list[Any]:
    """The callbacks ``cfg.callbacks`` turns on, built."""
    import hydra.utils

    return [
        hydra.utils.instantiate(option) if isinstance(option, Mapping) else option.build()
        for option in chosen(callbacks).values()
    ]
