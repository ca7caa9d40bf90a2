"""Task modules: the loss and the metrics that say what "good" means. The engine only calls this interface."""

from lab.tasks.classification import Classification

__all__ = ["Classification"]
