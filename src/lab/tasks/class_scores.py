"""Classification metrics beyond accuracy (``task.metrics``), computed by torchmetrics: macro F1, macro one-vs-rest
ROC AUC, macro average precision, and each class's precision, recall and F1 (eval only).

Exact, and reduced once under DDP. ``ClassificationMetrics`` keeps its own running sums as tensor attributes, which
``Parallel.reduce_metrics`` all-reduces once; the torchmetrics states live inside ``ClassScores.collection`` (a
``MetricCollection``, not a tensor), so that reduction never touches them. torchmetrics reduces them itself, once, in
``compute()``, when a process group is initialised (``sync_on_compute``: sums of the stat scores, all-gathered
predictions for AUROC/AP, uneven shards included). Every rank calls ``compute`` (``lab.training.evaluation.score``),
as that collective needs; the evaluation shards hold no padded duplicates (``ShardSampler.num_valid``, cut by
``accumulate_metrics`` before ``update``), so each sample is counted once.

AUROC and average precision keep every sample's probabilities until ``compute`` (``thresholds=None``: exact, as
scikit-learn computes them): N x K float32 on the device, 200 MB for ImageNet's 50k x 1000 validation split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

SCALARS = ("f1", "auroc", "average_precision")  # lab.config.tasks.CLASSIFICATION_SCALARS
PER_CLASS = ("precision", "recall", "f1")  # per_class: eval.json's per_class_<name>, keyed by class name


class ClassScores:
    """The torchmetrics of ``names`` (``task.metrics``) for ``num_classes`` classes, on ``device``; ``per_class``
    adds each class's precision, recall and F1 (an evaluation run's, ``Task.metrics(full=True)``)."""

    def __init__(self, names: Sequence[str], num_classes: int, device: torch.device, per_class: bool) -> None:
        # imported here: torchmetrics imports torchvision and its own modules (about 2 s), which a run without
        # task.metrics skips
        from torchmetrics import Metric, MetricCollection
        from torchmetrics.classification import (
            MulticlassAUROC,
            MulticlassAveragePrecision,
            MulticlassF1Score,
            MulticlassPrecision,
            MulticlassRecall,
        )

        # validate_args=False: the task checked the labels on the first batch; torchmetrics' per-batch checks
        # read values back to the host, a sync per batch that the rest of the evaluation loop avoids
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
        # compute groups: metrics with equal states share one copy (the stat scores of F1, precision and recall;
        # the stored probabilities of AUROC and average precision), updated once per batch
        self.collection = MetricCollection(metrics, compute_groups=True).to(device)
        self.names = [name for name in names if name in SCALARS]
        # AUROC's and AP's stored batches (list states "preds" (N, K), "target" (N,)) start with an empty batch of
        # those shapes: a rank whose shard held no sample (a split smaller than the world) would otherwise offer
        # torchmetrics' all-gather a 1-d float placeholder for both, which the other ranks' shapes do not match
        for metric in self.collection.values(copy_state=False):
            for state, empty in (("preds", (0, num_classes)), ("target", (0,))):
                if isinstance(getattr(metric, state, None), list):
                    dtype = torch.float32 if state == "preds" else torch.long
                    getattr(metric, state).append(torch.empty(empty, dtype=dtype, device=device))
        self._result: dict[str, torch.Tensor] | None = None

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        # probabilities, not logits: torchmetrics softmaxes only inputs outside [0, 1], a rule a batch of logits
        # could pass by chance; the argmax (F1's prediction) is the logits' own
        if targets.numel() == 0:  # a padded batch cut to nothing (ShardSampler.num_valid): torchmetrics takes none
            return
        self.collection.update(logits.float().softmax(dim=1), targets)
        self._result = None

    def _computed(self) -> dict[str, torch.Tensor]:
        """Every metric, once (a collective under DDP: each rank gets here together)."""
        if self._result is None:
            self._result = self.collection.compute()
        return self._result

    def compute(self) -> dict[str, float]:
        """The scalars, under their ``task.metrics`` names."""
        result = self._computed()
        return {name: float(result[name]) for name in self.names}

    def per_class(self, class_names: Sequence[str]) -> dict[str, dict[str, float]]:
        """``{"per_class_precision": {class name: value}, ...recall, ...f1}`` (needs ``per_class=True``)."""
        result = self._computed()
        return {f"per_class_{name}": dict(zip(class_names, result[f"class_{name}"].tolist())) for name in PER_CLASS}


def scores(names: Sequence[str], num_classes: int, device: torch.device, per_class: bool) -> ClassScores | None:
    """A ``ClassScores`` when there is anything to compute, else None."""
    per_class = per_class and "per_class" in names
    if not per_class and not any(name in SCALARS for name in names):
        return None
    return ClassScores(names, num_classes, device, per_class)
