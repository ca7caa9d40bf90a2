"""Inference on user inputs: a reader per kind of input file, a model runner per format, and predictions files."""

from lab.inference.backends import (
    Backend,
    EagerBackend,
    ExportedProgramBackend,
    OnnxBackend,
    TorchScriptBackend,
    artifact_backend,
)
from lab.inference.inputs import READERS, Inputs, discover
from lab.inference.predict import batched_outputs, output_record, top_k_records, write_predictions

__all__ = [
    "READERS",
    "Backend",
    "EagerBackend",
    "ExportedProgramBackend",
    "Inputs",
    "OnnxBackend",
    "TorchScriptBackend",
    "artifact_backend",
    "batched_outputs",
    "discover",
    "output_record",
    "top_k_records",
    "write_predictions",
]
