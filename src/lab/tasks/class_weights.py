"""Class weights for a weighted cross-entropy (task.class_weights): a list checked against the class count, or
"balanced" weights from the training labels' frequencies (scikit-learn's n / (K * count))."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, Subset

from lab.data.common import dataset_len
from lab.errors import UserError

log = logging.getLogger(__name__)


def given(weights: Sequence[float], num_classes: int) -> torch.Tensor:
    """Return the user's list as a tensor. Raises UserError when its length is not the class count."""
    if len(weights) != num_classes:
        raise UserError(
            f"task.class_weights has {len(weights)} values but the dataset has {num_classes} classes; "
            f"give one weight per class, or task.class_weights=balanced"
        )
    return torch.tensor([float(w) for w in weights], dtype=torch.float32)


def balanced(train_set: Dataset, num_classes: int) -> torch.Tensor:
    """Return n / (K * count_k) per class from the training labels, so each class weighs as in a balanced data set.
    A class absent from the training split gets weight 1 (it is never a target)."""
    counts = torch.bincount(training_labels(train_set), minlength=num_classes)[:num_classes].double()
    weights = torch.where(counts > 0, counts.sum() / (num_classes * counts.clamp_min(1)), torch.ones_like(counts))
    log.info(
        "task.class_weights=balanced from %d training labels: %s",
        int(counts.sum()),
        ", ".join(f"{w:.3g}" for w in weights.tolist()),
    )
    return weights.float()


def training_labels(dataset: Dataset) -> torch.Tensor:
    """Return every class label of `dataset`, from the label list the shipped datasets keep (no image decoded).
    A dataset without one is read sample by sample, once."""
    if isinstance(dataset, Subset):
        return training_labels(dataset.dataset)[torch.as_tensor(dataset.indices, dtype=torch.long)]
    for attribute in ("labels", "targets"):  # TensorImageDataset, TableDataset and torchvision's datasets
        labels = getattr(dataset, attribute, None)
        if labels is not None:
            return torch.as_tensor(labels, dtype=torch.long).reshape(-1)
    samples: Any = getattr(dataset, "samples", None)  # ImageFolderDataset's (path, label) pairs
    if isinstance(samples, list):
        return torch.tensor([label for _, label in samples], dtype=torch.long)
    return torch.tensor([int(dataset[i][1]) for i in range(dataset_len(dataset))], dtype=torch.long)
