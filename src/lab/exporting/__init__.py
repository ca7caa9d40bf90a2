"""Write deployable model files: per-format writers, parity checks, the manifest, and export steps (`steps`)."""

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
