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
from lab.inference.predict import predict, write_predictions

__all__ = [
    "MANIFEST",
    "Backend",
    "EagerBackend",
    "ExportedProgramBackend",
    "OnnxBackend",
    "Samples",
    "TorchScriptBackend",
    "artifact_backend",
    "discover",
    "predict",
    "read_manifest",
    "write_predictions",
]
