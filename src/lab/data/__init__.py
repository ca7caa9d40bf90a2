"""Datasets, transforms and loaders. `build(cfg)` gives a `DataModule`, then `make_loader` makes each split's loader."""

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
