"""Datasets, transforms and loaders. `build(cfg)` gives a `DataModule`, then `make_loader` makes each split's loader."""

from typing import TYPE_CHECKING

from lab import lazy

if TYPE_CHECKING:
    from lab.data.batches import check_batch_fits
    from lab.data.common import DataModule
    from lab.data.datasets import build
    from lab.data.device import DeviceEvalLoader, DeviceLoader
    from lab.data.loaders import EpochLoader, make_loader, seed_worker
    from lab.data.transforms import eval_transform

__all__ = [
    "DataModule",
    "DeviceEvalLoader",
    "DeviceLoader",
    "EpochLoader",
    "build",
    "check_batch_fits",
    "eval_transform",
    "make_loader",
    "seed_worker",
]

__getattr__ = lazy.names(
    __name__,
    {
        "check_batch_fits": "batches",
        "DataModule": "common",
        "build": "datasets",
        "DeviceEvalLoader": "device",
        "DeviceLoader": "device",
        "EpochLoader": "loaders",
        "make_loader": "loaders",
        "seed_worker": "loaders",
        "eval_transform": "transforms",
    },
)
