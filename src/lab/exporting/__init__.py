"""Deployable model files: writers per format, parity checks against eager PyTorch, INT8 quantization, manifest."""

from lab.exporting.parity import Parity, compare, sample_batches
from lab.exporting.writers import EXAMPLE_BATCH, WRITERS, Written, write

__all__ = ["EXAMPLE_BATCH", "WRITERS", "Parity", "Written", "compare", "sample_batches", "write"]
