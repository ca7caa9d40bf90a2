"""The tasks the core ships, one option each (the keys every task has: lab.config.tasks). `build(meta)` makes the
`lab.tasks.base.Task`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lab.config.checks import require as _require
from lab.config.tasks import TaskConfig

if TYPE_CHECKING:
    from lab.tasks.base import Task


# Classification's task.metrics beyond loss/acc/acc_top5, computed with torchmetrics (lab.tasks.class_scores).
# The scalars are macro over the classes and can be task.monitor. per_class is each class's precision, recall and
# F1, written by eval.py only, since K x 3 values per validation would bury the log line.
CLASSIFICATION_SCALARS = ("f1", "auroc", "average_precision")


CLASSIFICATION_METRICS = (*CLASSIFICATION_SCALARS, "per_class")


@dataclass
class ClassificationConfig(TaskConfig):
    """Class labels: cross-entropy, optionally label-smoothed; reports accuracy and top-5 accuracy, best by accuracy."""

    monitor: str = "acc"
    mode: str = "max"
    target_type: str = "class"
    label_smoothing: float = 0.0  # target mass spread evenly over the other classes; 0 = plain cross-entropy
    # Each class's weight in the training loss. null = equal; balanced = n / (K * count) from the training labels;
    # or a list of K non-negative floats. Validation metrics stay unweighted.
    class_weights: Any = None
    # Metrics beyond accuracy, through torchmetrics: f1 (macro F1), auroc (macro one-vs-rest ROC AUC),
    # average_precision (macro), per_class (each class's precision, recall and F1 in eval.json). With [],
    # torchmetrics is not even imported.
    metrics: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Own checks first: they say more about task.metrics than the generic monitor check would.
        unknown = [name for name in self.metrics if name not in CLASSIFICATION_METRICS]
        _require(
            not unknown,
            f"task.metrics: {', '.join(map(repr, unknown))} is not a classification metric; "
            f"choose from {', '.join(CLASSIFICATION_METRICS)}",
        )
        _require(
            len(set(self.metrics)) == len(self.metrics), f"task.metrics lists a metric twice: {list(self.metrics)}"
        )
        # The monitor must be a metric the run computes; catch it now, not after the first validation.
        _require(self.monitor != "per_class", "task.monitor=per_class is not one number; monitor f1, auroc, acc...")
        _require(
            self.monitor not in CLASSIFICATION_SCALARS or self.monitor in self.metrics,
            f"task.monitor={self.monitor} is computed only when task.metrics lists it: add "
            f"task.metrics=[{','.join([*self.metrics, self.monitor])}]",
        )
        _require(0 <= self.label_smoothing < 1, f"task.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        weights = self.class_weights
        _require(
            weights is None
            or weights == "balanced"
            or (
                isinstance(weights, list | tuple)
                and all(isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in weights)
                and any(w > 0 for w in weights)
            ),
            f"task.class_weights must be null, balanced or a list of one non-negative float per class, got {weights}",
        )
        super().__post_init__()

    def metric_names(self) -> tuple[str, ...]:
        return ("loss", "acc", "acc_top5", *(name for name in self.metrics if name in CLASSIFICATION_SCALARS))

    def build(self, meta: dict[str, Any]) -> Task:
        from lab.errors import UserError
        from lab.tasks.classification import Classification

        if "num_classes" not in meta:
            raise UserError(
                "task=classification needs class labels, but this dataset gives none (no num_classes in its meta); "
                "pick the task that fits the data (task=regression for values, task=language_model for text)"
            )
        num_classes = int(meta["num_classes"])
        task = Classification(num_classes, float(self.label_smoothing), meta.get("class_names"), self.metrics)
        if self.class_weights == "balanced":
            task.balanced = True  # `prepare` sets them from the training labels
        elif self.class_weights is not None:
            from lab.tasks import class_weights

            task.class_weights = class_weights.given(list(self.class_weights), num_classes)
        return task


@dataclass
class RegressionConfig(TaskConfig):
    """Real-valued targets, standardised by the train split; MSE loss, with RMSE, MAE and R² in the target's units."""

    monitor: str = "rmse"
    mode: str = "min"
    target_type: str = "value"

    def metric_names(self) -> tuple[str, ...]:
        return ("loss", "rmse", "mae", "r2")

    def build(self, meta: dict[str, Any]) -> Task:
        from lab.tasks.regression import Regression

        return Regression(
            float(meta.get("target_mean", 0.0)), float(meta.get("target_std", 1.0)), meta.get("target_name")
        )


@dataclass
class LanguageModelConfig(TaskConfig):
    """Next-token prediction with token cross-entropy; reports loss, perplexity and token accuracy, best by loss."""

    monitor: str = "loss"
    mode: str = "min"
    target_type: str = "tokens"
    samples: int = 3  # eval: generations written to samples.txt
    sample_tokens: int = 120  # eval: length of each generation

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.samples >= 0 and self.sample_tokens >= 1, "task.samples must be >= 0, sample_tokens >= 1")

    def metric_names(self) -> tuple[str, ...]:
        return ("loss", "perplexity", "token_acc")

    def build(self, meta: dict[str, Any]) -> Task:
        from lab.errors import UserError
        from lab.tasks.language_model import LanguageModel

        if "vocab_size" not in meta:
            raise UserError("task=language_model needs token sequences: use a text dataset (data=text or data=tokens)")
        return LanguageModel(dict(meta), int(self.samples), int(self.sample_tokens))
