"""Model zoo: `build(cfg.model, meta)` returns the `nn.Module` for the data `meta` describes.

Each model is an option of the `model` group (`lab.config.models`). Its `build(meta)` makes the network from a
module of this package.
"""

from lab.models.common import build, image_channels, prepare

__all__ = ["build", "image_channels", "prepare"]
