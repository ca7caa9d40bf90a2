"""``build(cfg)``: the one entry point that turns a ``data`` config into a :class:`DataModule`."""

from __future__ import annotations

from collections.abc import Callable

from lab.config import ConfigError
from lab.data.builtin import build_cifar10, build_digits, build_mnist, build_synthetic
from lab.data.common import DataCfg, DataModule
from lab.data.folder import build_image_folder

BUILDERS: dict[str, Callable[[DataCfg], DataModule]] = {
    "digits": build_digits,
    "mnist": build_mnist,
    "fashion_mnist": build_mnist,
    "cifar10": build_cifar10,
    "image_folder": build_image_folder,
    "synthetic": build_synthetic,
}


def build(cfg: DataCfg) -> DataModule:
    """Build train/val(/test) datasets and their ``meta`` for ``cfg`` (a DataConfig or the ``data`` node).

    Every item is ``(x, y)``: x a normalized float32 (in_channels, image_size, image_size) tensor,
    y an int in [0, num_classes). Raises ConfigError (naming the key and the fix) on a bad config or
    missing files.
    """
    builder = BUILDERS.get(cfg.name)
    if builder is None:  # DataConfig validates the name; this covers hand-made DictConfigs
        raise ConfigError(f"data.name={cfg.name!r} is not valid; choose one of {', '.join(BUILDERS)}")
    return builder(cfg)
