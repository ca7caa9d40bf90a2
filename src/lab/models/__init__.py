"""Model zoo: `build(cfg.model, meta)` returns the `nn.Module` for the data `meta` describes.

Each model is an option of the `model` group (`options.py`). Its `build(meta)` makes the network from a module of
this package.
"""

from typing import TYPE_CHECKING

from lab import lazy

if TYPE_CHECKING:
    from lab.models.common import build, image_channels, prepare

__all__ = ["build", "image_channels", "prepare"]

__getattr__ = lazy.names(__name__, {"build": "common", "image_channels": "common", "prepare": "common"})
