"""Turn Hydra sweep syntax into Optuna distributions, and sampled values into job overrides.

- `interval(a, b)`: a float in [a, b]; an integer with `int(interval(a, b))` or `tag(int, ...)`.
- `range(a, b, s)`: a, a+s, ... below b, integer or stepped float.
- `choice(x, y)` or `x,y`: categorical.
- `tag(log, ...)`: sample an interval or range on a log scale.
Anything else is a fixed override passed to every trial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Sweep
from hydra.errors import ConfigCompositionException  # Hydra prints it as one line, no traceback
from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

_PRIMITIVE = (str, int, float, bool, type(None))


@dataclass
class Param:
    key: str  # the override's key as written, with a +/++ prefix if any
    distribution: BaseDistribution
    texts: dict[Any, str]  # categorical value -> its override text, as Hydra's parser printed it

    def override(self, value: Any) -> str:
        text = self.texts[value] if value in self.texts else repr(value)
        return f"{self.key}={text}"


def _range(sweep: RangeSweep, log: bool) -> BaseDistribution:
    assert sweep.start is not None and sweep.stop is not None  # the override grammar sets both
    count = math.ceil((sweep.stop - sweep.start) / sweep.step)
    if count < 1:
        raise ConfigCompositionException(f"range({sweep.start}, {sweep.stop}, {sweep.step}) is empty")
    last = sweep.start + (count - 1) * sweep.step
    if isinstance(sweep.start, int) and isinstance(sweep.stop, int) and isinstance(sweep.step, int):
        return IntDistribution(sweep.start, int(last), step=1 if log else sweep.step, log=log)
    if log:
        raise ConfigCompositionException(
            "tag(log, range(...)) needs integer bounds; use tag(log, interval(a, b)) for floats"
        )
    return FloatDistribution(sweep.start, last, step=sweep.step)


def _param(override: Override) -> Param:
    sweep = override.value()
    assert isinstance(sweep, Sweep)  # search_space passes only sweep overrides
    key = override.get_key_element()
    log = "log" in sweep.tags
    if isinstance(sweep, IntervalSweep):
        assert sweep.start is not None and sweep.end is not None  # the override grammar sets both
        if "int" in sweep.tags or (isinstance(sweep.start, int) and isinstance(sweep.end, int)):
            return Param(key, IntDistribution(int(sweep.start), int(sweep.end), log=log), {})
        return Param(key, FloatDistribution(sweep.start, sweep.end, log=log), {})
    if isinstance(sweep, RangeSweep):
        return Param(key, _range(sweep, log), {})
    if isinstance(sweep, ChoiceSweep):
        texts = list(override.sweep_string_iterator())
        primitive = all(isinstance(v, _PRIMITIVE) for v in sweep.list)
        values = cast(list[CategoricalChoiceType], list(sweep.list)) if primitive else texts
        return Param(key, CategoricalDistribution(values), dict(zip(values, texts)))
    raise ConfigCompositionException(f"{override.input_line}: unsupported sweep {type(sweep).__name__}")


def search_space(overrides: Sequence[Override]) -> tuple[dict[str, Param], list[str]]:
    """Split overrides into {parameter name: Param} for sweeps and fixed override strings for the rest.

    Later overrides of the same key win, so the command line beats hydra.sweeper.params."""
    params: dict[str, Param] = {}
    fixed: dict[str, str] = {}
    for override in overrides:
        name = override.key_or_group
        params.pop(name, None)
        fixed.pop(name, None)
        if override.is_sweep_override():
            params[name] = _param(override)
        else:
            fixed[name] = f"{override.get_key_element()}={override.get_value_element_as_str()}"
    return params, list(fixed.values())
