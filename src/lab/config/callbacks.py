"""Trainer callbacks a run turns on by name, each an option whose `build(trainer)` makes a `Callback`.

    @dataclass
    class PrintLr(CallbackConfig):    # callback=print_lr   (several at once: callback=[print_lr,other])
        every: int = 100              # callbacks.print_lr.every=10

        def build(self, trainer):
            from lab.training.print_lr import PrintLr
            return PrintLr(self.every)

Several callbacks can be on at once, so each option lands in its own node, `callbacks.<name>`.
`+callbacks.<name>={key: value}` also turns one on, as a sweeper may in its jobs' overrides. This is the one way
to add to the Trainer. The core's callbacks below and those of an extension (its `options.py`), a fork (a module
of src/lab/config), a test or a notebook are all options. The Trainer builds them once it is set up, in the order
they are named. With `callback=[ema,mine]`, yours sees the EMA's weights back in the model and its val_raw/ metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config.checks import require
from lab.config.options import Option, instantiate
from lab.errors import ConfigError


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


@dataclass
class EMAConfig(CallbackConfig):
    """callback=ema: an exponential moving average of the weights (lab.training.ema).

    Validation, best.pt and the test score use the averaged weights. last.pt keeps both, so a resume is exact."""

    decay: float = 0.999  # per update: ema = decay * ema + (1 - decay) * weights
    every_n_steps: int = 1  # update after every n-th optimizer step (cheaper for large models)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.decay < 1, f"callbacks.ema.decay must be in (0, 1), got {self.decay}")
        require(self.every_n_steps >= 1, f"callbacks.ema.every_n_steps must be >= 1, got {self.every_n_steps}")

    def build(self, trainer: Any) -> Any:
        from lab.training.ema import EMA

        return EMA(trainer.model, self.decay, self.every_n_steps)

    def conflict(self, run: Any) -> str | None:
        if getattr(run.dist, "shards_weights", False):
            return (
                "callback=ema does not work with dist=fsdp (each rank holds only a shard of the weights); "
                "use dist=ddp with EMA, or drop callback=ema under FSDP"
            )
        return None


@dataclass
class EarlyStoppingConfig(CallbackConfig):
    """callback=early_stopping: stop when the monitor has not improved by more than `min_delta` in `patience` checks.

    The test split is still scored and the run still counts as completed (lab.training.early_stopping)."""

    patience: int = 5  # validations without improvement before stopping
    min_delta: float = 0.0  # smallest change of the monitor that counts as an improvement

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.patience >= 1, f"callbacks.early_stopping.patience must be >= 1, got {self.patience}")
        require(self.min_delta >= 0, f"callbacks.early_stopping.min_delta must be >= 0, got {self.min_delta}")

    def build(self, trainer: Any) -> Any:
        from lab.training.early_stopping import EarlyStopping

        return EarlyStopping(self.patience, self.min_delta, trainer.task)


def chosen(callbacks: Mapping[str, Any]) -> dict[str, CallbackConfig]:
    """Return each entry of `cfg.callbacks` (a node or an option object) as its option, values checked."""
    return {
        key: instantiate("callback", spec if isinstance(spec, Option) else {"name": key, **spec})
        for key, spec in callbacks.items()
    }


def check(callbacks: Mapping[str, Any], run: Any) -> None:
    """Refuse an unknown callback or key, a wrong value, or a callback that conflicts with the rest of `run`."""
    for option in chosen(callbacks).values():
        why = option.conflict(run)
        if why is not None:
            raise ConfigError(why)


def build(callbacks: Mapping[str, Any], trainer: Any) -> list[Any]:
    """Build the callbacks `cfg.callbacks` turns on for `trainer`; raise TypeError for one that is not a `Callback`."""
    from lab.training.callbacks import Callback

    built = {name: option.build(trainer) for name, option in chosen(callbacks).items()}
    for name, callback in built.items():
        if callback is not None and not isinstance(callback, Callback):
            raise TypeError(
                f"the {name} callback option built a {type(callback).__name__}, not a lab.training.callbacks.Callback:"
                " subclass Callback and override the hooks you need"
            )
    return [callback for callback in built.values() if callback is not None]
