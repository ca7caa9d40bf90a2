"""Classification: cross-entropy, top-1/top-5 accuracy summed exactly over a split, and (for evaluation runs)
the confusion matrix and per-class accuracy."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ClassificationMetrics:
    """Running sums on the device (no host sync per batch); `compute` divides once by the true sample count,
    so a short last batch weighs what its samples weigh, not what a full batch would.

    ``confusion=True`` also counts (true, predicted) pairs. Off by default: training validates every epoch and
    only needs the scalars, while a K x K matrix for K = 1000 classes is a megabyte-sized add per batch.
    """

    def __init__(self, num_classes: int, device: torch.device, confusion: bool = False) -> None:
        self.num_classes = num_classes
        self.top_k = min(5, num_classes)
        self.totals = torch.zeros(4, dtype=torch.float64, device=device)  # loss_sum, correct1, correctk, count
        # rows = true class, columns = predicted class
        self.confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64, device=device) if confusion else None

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        logits = logits.float()  # fp32 loss/softmax even under autocast
        loss_sum = F.cross_entropy(logits, targets, reduction="sum")
        topk = logits.topk(self.top_k, dim=1).indices
        hits = topk == targets.unsqueeze(1)
        batch = torch.stack(
            [
                loss_sum.double(),
                hits[:, 0].sum().double(),
                hits.any(dim=1).sum().double(),
                loss_sum.new_full((), float(targets.numel()), dtype=torch.float64),
            ]
        )
        self.totals += batch
        if self.confusion is not None:
            k = self.num_classes
            pairs = targets * k + topk[:, 0]
            self.confusion += torch.bincount(pairs, minlength=k * k).view(k, k)

    def compute(self) -> dict[str, float]:
        loss_sum, correct1, correctk, count = self.totals.tolist()
        if count == 0:
            return {}
        return {"loss": loss_sum / count, "acc": correct1 / count, "acc_top5": correctk / count}

    def confusion_matrix(self) -> list[list[int]]:
        """counts[true][predicted] over everything seen (needs ``confusion=True``)."""
        if self.confusion is None:
            raise RuntimeError("ClassificationMetrics(confusion=True) is needed for the confusion matrix")
        return self.confusion.cpu().tolist()

    def per_class_accuracy(self) -> list[float | None]:
        """Recall of each class: correct / samples of that class; None for a class absent from the split."""
        matrix = self.confusion_matrix()
        return [row[i] / sum(row) if sum(row) else None for i, row in enumerate(matrix)]


class Classification:
    """What the engine needs from a task: a training loss, an evaluation accumulator and the metric to monitor."""

    monitor = "acc"  # higher is better; best.pt tracks val/acc
    monitor_mode = "max"

    def __init__(self, num_classes: int, label_smoothing: float = 0.0) -> None:
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Cross-entropy in fp32: under autocast, logits may be fp16/bf16 and log-softmax loses precision there.
        return F.cross_entropy(logits.float(), targets, label_smoothing=self.label_smoothing)

    def metrics(self, device: torch.device, confusion: bool = False) -> ClassificationMetrics:
        return ClassificationMetrics(self.num_classes, device, confusion=confusion)
