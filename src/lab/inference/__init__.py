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
from lab.inference.predict import write_predictions

__all__ = [
    "READERS",
    "Backend",
    "EagerBackend",
    "ExportedProgramBackend",
    "Inputs",
    "OnnxBackend",
    "TorchScriptBackend",
    "artifact_backend",
    "discover",
    "write_predictions",
]
