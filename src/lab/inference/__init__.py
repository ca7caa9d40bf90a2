"""Inference on user inputs: input discovery and preprocessing, model runners per format, top-k predictions."""

from lab.inference.backends import (
    MANIFEST,
    Backend,
    EagerBackend,
    ExportedProgramBackend,
    OnnxBackend,
    TorchScriptBackend,
    artifact_backend,
    read_manifest,
)
from lab.inference.inputs import Samples, discover
from lab.inference.predict import batched_outputs, top_k_records, write_predictions

__all__ = [
    "MANIFEST",
    "Backend",
    "EagerBackend",
    "ExportedProgramBackend",
    "OnnxBackend",
    "Samples",
    "TorchScriptBackend",
    "artifact_backend",
    "batched_outputs",
    "discover",
    "read_manifest",
    "top_k_records",
    "write_predictions",
]
