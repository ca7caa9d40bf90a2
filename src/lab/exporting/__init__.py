"""Deployable model files: writers per format, parity checks against eager PyTorch, INT8 quantization and
the choice between fp32 and INT8, manifest."""

from lab.exporting.parity import Parity, compare, sample_batches, take
from lab.exporting.writers import EXAMPLE_BATCH, WRITERS, Written, write

__all__ = ["EXAMPLE_BATCH", "WRITERS", "Parity", "Written", "compare", "sample_batches", "take", "write"]
