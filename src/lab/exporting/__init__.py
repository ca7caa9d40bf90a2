"""Deployable model files: writers per format, parity checks against eager PyTorch, INT8 quantization and
the choice between fp32 and INT8, manifest."""

from lab.exporting.parity import Parity, compare, other_size, sample_batches, take
from lab.exporting.writers import EXAMPLE_BATCH, WRITERS, Written, axis_name, check_dims, write

__all__ = [
    "EXAMPLE_BATCH",
    "WRITERS",
    "Parity",
    "Written",
    "axis_name",
    "check_dims",
    "compare",
    "other_size",
    "sample_batches",
    "take",
    "write",
]
