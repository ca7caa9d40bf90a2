"""Classification: cross-entropy, and top-1/top-5 accuracy summed exactly over a split; evaluation adds the confusion
matrix and per-class accuracy, `task.metrics` torchmetrics' scores (`class_scores`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from lab.errors import UserError
from lab.tasks.base import BaseTask, EvalContext, InferContext, Predictions

if TYPE_CHECKING:
    from lab.tasks.class_scores import ClassScores


def cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None = None, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Return the cross-entropy summed over the batch, in fp32: the one definition of the classification loss.

    Under autocast the logits may be fp16/bf16, where log-softmax loses precision. Training passes the task's class
    weights and label smoothing; the metrics score the plain loss, so validation stays unweighted.

    `targets` are class indices (N,) or class probabilities (N, K) from MixUp/CutMix. With probabilities, sample i
    adds -sum_c w_c p'_ic log softmax(logits_i)_c with p' = (1 - eps) p + eps / K, so label smoothing applies to
    the mixed distribution and a one-hot p gives exactly the index case."""
    return F.cross_entropy(logits.float(), targets, weight=weight, label_smoothing=label_smoothing, reduction="sum")


class ClassificationMetrics:
    """Accumulate classification metrics as running sums on the device, with no host sync per batch.

    `confusion=True` also counts (true, predicted) pairs. It is off by default: training validates every epoch and
    only needs the scalars, while a K x K matrix for K = 1000 classes is a megabyte-sized add per batch. `extra`
    names `task.metrics`, which `scores` computes with torchmetrics (per_class needs `confusion=True`)."""

    def __init__(
        self, num_classes: int, device: torch.device, confusion: bool = False, extra: Sequence[str] = ()
    ) -> None:
        self.num_classes = num_classes
        self.top_k = min(5, num_classes)
        self.totals = torch.zeros(4, dtype=torch.float64, device=device)  # loss_sum, correct1, correctk, count
        # rows are the true class, columns the predicted class
        self.confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64, device=device) if confusion else None
        self.scores: ClassScores | None = None
        if extra:  # task.metrics, through torchmetrics
            from lab.tasks import class_scores

            self.scores = class_scores.scores(extra, num_classes, device, per_class=confusion)

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        logits = logits.float()  # fp32 loss/softmax even under autocast
        loss_sum = cross_entropy(logits, targets)
        if targets.ndim == 2:  # class probabilities (MixUp/CutMix): score against the class with the larger share
            targets = targets.argmax(1)
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
        if self.scores is not None:
            self.scores.update(logits, targets)

    def compute(self) -> dict[str, float]:
        loss_sum, correct1, correctk, count = self.totals.tolist()
        if count == 0:
            return {}
        out = {"loss": loss_sum / count, "acc": correct1 / count, "acc_top5": correctk / count}
        # count is the all-ranks total, so every rank (or none) gets here, as the torchmetrics collective needs
        return (out | self.scores.compute()) if self.scores is not None else out

    def confusion_matrix(self) -> list[list[int]]:
        """Return counts[true][predicted] over everything seen (needs `confusion=True`)."""
        if self.confusion is None:
            raise RuntimeError("ClassificationMetrics(confusion=True) is needed for the confusion matrix")
        return self.confusion.cpu().tolist()

    def per_class_accuracy(self) -> list[float | None]:
        """Return each class's recall (correct / samples of that class), or None for a class absent from the split."""
        matrix = self.confusion_matrix()
        return [row[i] / sum(row) if sum(row) else None for i, row in enumerate(matrix)]


class Classification(BaseTask[ClassificationMetrics]):
    """Cross-entropy over class logits (N, K), monitoring top-1 accuracy."""

    name = "classification"
    monitor = "acc"  # higher is better; best.pt tracks val/acc
    mode = "max"
    normaliser = "samples"  # with task.class_weights, the summed weights of the batch's labels (`weight`)

    def __init__(
        self,
        num_classes: int,
        label_smoothing: float = 0.0,
        class_names: Sequence[str] | None = None,
        extra_metrics: Sequence[str] = (),
    ) -> None:
        self.num_classes = num_classes
        self.extra_metrics = tuple(extra_metrics)  # task.metrics: f1, auroc, average_precision, per_class
        self.label_smoothing = label_smoothing
        self.class_names = list(class_names) if class_names else [str(i) for i in range(num_classes)]
        self.class_weights: torch.Tensor | None = None  # task.class_weights, resolved, on the CPU
        self.balanced = False  # task.class_weights=balanced, which `prepare` computes from the training labels
        self._weights_on: dict[torch.device, torch.Tensor] = {}  # class_weights per device, copied once

    def prepare(self, train_set: torch.utils.data.Dataset) -> None:
        """Compute balanced class weights from the training split, if asked, before training."""
        if self.balanced:
            from lab.tasks import class_weights

            self.class_weights, self._weights_on = class_weights.balanced(train_set, self.num_classes), {}

    def _class_weights(self, device: torch.device) -> torch.Tensor | None:
        if self.class_weights is None:
            if self.balanced:
                raise RuntimeError("task.class_weights=balanced: call task.prepare(train_set) before training")
            return None
        if device not in self._weights_on:
            self._weights_on[device] = self.class_weights.to(device)
        return self._weights_on[device]

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        if isinstance(targets, torch.Tensor) and targets.is_floating_point() and targets.ndim == 2:
            return self._check_probabilities(targets)
        if not isinstance(targets, torch.Tensor) or targets.is_floating_point() or targets.ndim != 1:
            found = f"{targets.dtype} {tuple(targets.shape)}" if isinstance(targets, torch.Tensor) else type(targets)
            raise UserError(
                f"task=classification needs one integer class label per sample, but the targets are {found}; "
                "use task=regression for continuous targets"
            )
        low, high = int(targets.min()), int(targets.max())
        if low < 0 or high >= self.num_classes:
            raise UserError(
                f"labels range over [{low}, {high}] but the model has {self.num_classes} classes; "
                "set data.num_classes or fix the labels"
            )
        return f"class labels in [{low}, {high}] of {self.num_classes}"

    def _check_probabilities(self, targets: torch.Tensor) -> str:
        """Check soft targets (MixUp/CutMix): one probability per class, rows summing to 1."""
        sums = targets.double().sum(1)
        if (
            targets.shape[1] != self.num_classes
            or not bool(torch.isfinite(targets).all())
            or bool((targets < 0).any())
            or not bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-4))
        ):
            raise UserError(
                f"task=classification takes float targets only as class probabilities (N, {self.num_classes}), "
                f"non-negative, each row summing to 1; got {targets.dtype} {tuple(targets.shape)} with row sums in "
                f"[{float(sums.min()):.4g}, {float(sums.max()):.4g}]; give integer class labels instead"
            )
        return f"class probabilities (N, {self.num_classes}) (MixUp/CutMix)"

    def weight(self, targets: torch.Tensor) -> torch.Tensor:
        weights = self._class_weights(targets.device)
        if weights is None:
            return super().weight(targets)
        # Summed weighted loss / summed target weights = torch's weighted-mean cross-entropy, over any grouping.
        # Class probabilities weigh sum_c w_c p_ic per sample, as their loss does (one-hot gives the label's weight)
        return (targets.float() @ weights).sum() if targets.ndim == 2 else weights[targets].sum()

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, targets, self._class_weights(logits.device), self.label_smoothing)

    def metrics(self, device: torch.device, full: bool = False) -> ClassificationMetrics:
        return ClassificationMetrics(self.num_classes, device, confusion=full, extra=self.extra_metrics)

    def write_eval_artifacts(
        self, metrics: ClassificationMetrics, context: EvalContext
    ) -> tuple[dict[str, Any], list[Path]]:
        per_class = dict(zip(self.class_names, metrics.per_class_accuracy()))
        matrix = metrics.confusion_matrix()  # [true][predicted]
        figure = context.run_dir / "confusion_matrix.png"
        title = f"{context.title}, acc {metrics.compute()['acc']:.4f}"
        from lab.tasks import figures  # only evaluation draws

        figures.confusion_matrix_png(matrix, self.class_names, figure, title)
        extra: dict[str, Any] = {"per_class_acc": per_class}
        if "per_class" in self.extra_metrics:  # per_class_{precision,recall,f1}, by class name
            assert metrics.scores is not None  # made whenever task.metrics names anything
            extra |= metrics.scores.per_class(self.class_names)
        extra |= {"class_names": self.class_names, "confusion_matrix": matrix}
        return extra, [figure]

    def agreement(self, reference: torch.Tensor, outputs: torch.Tensor) -> float | None:
        return float((reference.argmax(-1) == outputs.argmax(-1)).float().mean())

    def predict(self, backend: Any, context: InferContext) -> Predictions:
        from lab.tasks.outputs import top_k_records

        inputs, options = context.inputs(), context.cfg.infer
        records = top_k_records(backend, inputs, options.batch_size, options.top_k, self.class_names, inputs.skipped)
        return Predictions(records, inputs.skipped)
