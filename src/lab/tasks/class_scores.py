"""Classification metrics beyond accuracy (`task.metrics`), computed exactly by torchmetrics: macro F1, macro
one-vs-rest ROC AUC, macro average precision, and (eval only) each class's precision, recall and F1.

Under DDP each is reduced once: `Parallel.reduce_metrics` skips `ClassScores.collection` (not a tensor attribute),
and torchmetrics reduces it in `compute()` (`sync_on_compute`, uneven shards included), a collective, so every rank
calls `compute`. Evaluation shards hold no padded duplicates (`ShardSampler.num_valid`): each sample counts once.
AUROC and average precision keep every sample's probabilities until `compute` (`thresholds=None`, exact as in
scikit-learn): N x K float32 on the device, 200 MB for ImageNet's 50k x 1000 validation split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

SCALARS = ("f1", "auroc", "average_precision")  # lab.tasks.options.CLASSIFICATION_SCALARS
PER_CLASS = ("precision", "recall", "f1")  # eval.json's per_class_<name>, keyed by class name


class ClassScores:
    """The torchmetrics `names` lists (`task.metrics`); `per_class` adds each class's precision, recall and F1."""

    def __init__(self, names: Sequence[str], num_classes: int, device: torch.device, per_class: bool) -> None:
        # Imported here: torchmetrics takes about 2 s to import, which a run without task.metrics skips
        from torchmetrics import Metric, MetricCollection
        from torchmetrics.classification import (
            MulticlassAUROC,
            MulticlassAveragePrecision,
            MulticlassF1Score,
            MulticlassPrecision,
            MulticlassRecall,
        )

        # validate_args=False: the task checked the labels on the first batch. torchmetrics' per-batch checks
        # read values back to the host, a sync per batch the rest of the evaluation loop avoids
        common: dict[str, Any] = {"num_classes": num_classes, "validate_args": False}
        makers = {
            "f1": lambda: MulticlassF1Score(average="macro", **common),
            "auroc": lambda: MulticlassAUROC(average="macro", thresholds=None, **common),
            "average_precision": lambda: MulticlassAveragePrecision(average="macro", thresholds=None, **common),
        }
        metrics: dict[str, Metric | MetricCollection] = {name: makers[name]() for name in names if name in makers}
        if per_class:
            metrics |= {
                "class_precision": MulticlassPrecision(average=None, **common),
                "class_recall": MulticlassRecall(average=None, **common),
                "class_f1": MulticlassF1Score(average=None, **common),
            }
        # Compute groups: metrics with equal states (F1, precision and recall; AUROC and average precision) share
        # one copy, updated once per batch
        self.collection = MetricCollection(metrics, compute_groups=True).to(device)
        self.names = [name for name in names if name in SCALARS]
        # Start AUROC's and AP's list states ("preds" (N, K), "target" (N,)) with an empty batch of those shapes.
        # Otherwise a rank with an empty shard (a split smaller than the world) would offer torchmetrics' all-gather
        # a 1-d float placeholder, which does not match the other ranks' shapes
        for metric in self.collection.values(copy_state=False):
            for state, empty in (("preds", (0, num_classes)), ("target", (0,))):
                if isinstance(getattr(metric, state, None), list):
                    dtype = torch.float32 if state == "preds" else torch.long
                    getattr(metric, state).append(torch.empty(empty, dtype=dtype, device=device))
        self._result: dict[str, torch.Tensor] | None = None

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        # Pass probabilities, not logits: torchmetrics softmaxes only inputs outside [0, 1], which a batch of logits
        # could pass by chance. The argmax (F1's prediction) is the same
        if targets.numel() == 0:  # a padded batch cut to nothing, which torchmetrics refuses
            return
        self.collection.update(logits.float().softmax(dim=1), targets)
        self._result = None

    def _computed(self) -> dict[str, torch.Tensor]:
        """Compute every metric once. Under DDP this is a collective, so every rank must call it."""
        if self._result is None:
            self._result = self.collection.compute()
        return self._result

    def compute(self) -> dict[str, float]:
        result = self._computed()
        return {name: float(result[name]) for name in self.names}

    def per_class(self, class_names: Sequence[str]) -> dict[str, dict[str, float]]:
        """Return `{"per_class_precision": {class name: value}, ...recall, ...f1}` (needs `per_class=True`)."""
        result = self._computed()
        return {f"per_class_{name}": dict(zip(class_names, result[f"class_{name}"].tolist())) for name in PER_CLASS}


def scores(names: Sequence[str], num_classes: int, device: torch.device, per_class: bool) -> ClassScores | None:
    """Return a `ClassScores` when there is anything to compute, else None."""
    per_class = per_class and "per_class" in names
    if not per_class and not any(name in SCALARS for name in names):
        return None
    return ClassScores(names, num_classes, device, per_class)
