"""Inference on user inputs: input discovery and preprocessing, model runners per format, top-k predictions."""

from lab.inference.backends import (
    Backend,
    EagerBackend,
    ExportedProgramBackend,
    OnnxBackend,
    TorchScriptBackend,
    artifact_backend,
)
from lab.inference.inputs import Samples, discover
from lab.inference.predict import batched_outputs, top_k_records, write_predictions

__all__ = [
    "Backend",
    "EagerBackend",
    "ExportedProgramBackend",
    "OnnxBackend",
    "Samples",
    "TorchScriptBackend",
    "artifact_backend",
    "batched_outputs",
    "discover",
    "top_k_records",
    "write_predictions",
]
