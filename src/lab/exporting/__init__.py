"""Write deployable model files: a writer per format, parity checks against eager PyTorch, and the manifest.

`steps` is where export steps, such as an extension's INT8 quantization, run."""

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
