"""task.metrics: F1, AUROC, average precision and per-class scores equal scikit-learn's on random logits fed in
uneven batches; Parallel.reduce_metrics sums only the template's own sums (torchmetrics syncs its states itself, so
each is reduced once); eval.json's per-class entries; a wrong name or monitor is one clear error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from sklearn import metrics as sk

from lab.distributed import parallel
from lab.errors import ConfigError
from lab.tasks.base import EvalContext
from lab.tasks.classification import ClassificationMetrics
from lab.tasks.common import build as build_task

CPU = torch.device("cpu")
ALL = ["f1", "auroc", "average_precision", "per_class"]
K = 5


def _task(metrics: list[str], **keys):
    cfg = OmegaConf.create({"name": "classification", "metrics": metrics, **keys})
    return build_task(cfg, {"num_classes": K, "class_names": [f"c{i}" for i in range(K)]})


def _random(n: int = 403, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, K, generator=g) * 2, torch.randint(0, K, (n,), generator=g)


def _fed(metrics, logits: torch.Tensor, targets: torch.Tensor):
    for start, size in ((0, 64), (64, 1), (65, 0), (65, 200), (265, 138)):  # uneven, an empty one included
        metrics.update(logits[start : start + size], targets[start : start + size])
    return metrics


def test_the_metrics_equal_scikit_learns_on_random_logits() -> None:
    logits, targets = _random()
    out = _fed(_task(ALL).metrics(CPU), logits, targets).compute()
    probs, y = logits.softmax(1).double().numpy(), targets.numpy()
    assert list(out) == ["loss", "acc", "acc_top5", "f1", "auroc", "average_precision"]  # task.metrics' order
    assert out["f1"] == pytest.approx(sk.f1_score(y, probs.argmax(1), average="macro"), rel=1e-6)
    assert out["auroc"] == pytest.approx(sk.roc_auc_score(y, probs, multi_class="ovr", average="macro"), rel=1e-6)
    one_hot = np.eye(K)[y]
    assert out["average_precision"] == pytest.approx(sk.average_precision_score(one_hot, probs), rel=1e-6)
    assert out["acc"] == pytest.approx(sk.accuracy_score(y, probs.argmax(1)))


def test_per_class_scores_go_to_eval_json_by_class_name(tmp_path) -> None:
    logits, targets = _random(seed=1)
    task = _task(ALL)
    metrics = _fed(task.metrics(CPU, full=True), logits, targets)
    extra, files = task.write_eval_artifacts(metrics, EvalContext(tmp_path, "t", torch.nn.Identity(), CPU, {}))
    predicted, y = logits.argmax(1).numpy(), targets.numpy()
    for name, score in (("precision", sk.precision_score), ("recall", sk.recall_score), ("f1", sk.f1_score)):
        expected = score(y, predicted, average=None)
        assert list(extra[f"per_class_{name}"]) == task.class_names
        assert list(extra[f"per_class_{name}"].values()) == pytest.approx(expected.tolist(), rel=1e-6), name
    assert extra["confusion_matrix"] == sk.confusion_matrix(y, predicted).tolist()  # the confusion matrix stays
    assert [f.name for f in files] == ["confusion_matrix.png"]
    # training validation (full=False) logs the scalars only: 3 x K per-class values would bury the log line
    assert set(_fed(task.metrics(CPU), logits, targets).compute()) == {"loss", "acc", "acc_top5"} | set(ALL[:3])


def test_without_task_metrics_no_torchmetrics_object_is_made() -> None:
    assert _task([]).metrics(CPU, full=True).scores is None
    assert _task(["per_class"]).metrics(CPU).scores is None  # per_class alone: eval runs only


def test_reduce_metrics_sums_only_the_templates_own_tensors(monkeypatch) -> None:
    """One reduction each: Parallel.reduce_metrics all-reduces the tensor attributes (loss, hits, count, the
    confusion matrix); the torchmetrics states sit in a MetricCollection, which it leaves to torchmetrics' own sync
    in compute(). Were they tensor attributes too, they would be summed twice under DDP."""
    reduced: list[torch.Tensor] = []
    monkeypatch.setattr(parallel.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(parallel.dist, "all_reduce", lambda tensor, *a, **k: reduced.append(tensor))
    metrics = _fed(_task(ALL).metrics(CPU, full=True), *_random())
    parallel.DDP().reduce_metrics(metrics)
    assert [id(t) for t in reduced] == [id(metrics.totals), id(metrics.confusion)]
    assert all(metric.sync_on_compute for metric in metrics.scores.collection.values())


def test_an_empty_split_gives_no_metrics() -> None:
    assert ClassificationMetrics(K, CPU, extra=ALL).compute() == {}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"metrics": ["f1", "f2"]}, "'f2' is not a classification metric; choose from f1, auroc, "),
        ({"metrics": ["f1", "f1"]}, "task.metrics lists a metric twice"),
        ({"monitor": "auroc", "metrics": ["f1"]}, "add task.metrics=[f1,auroc]"),
        ({"monitor": "per_class", "metrics": ["per_class"]}, "task.monitor=per_class is not one number"),
    ],
)
def test_a_wrong_metric_or_monitor_is_one_clear_error(keys: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _task(keys.pop("metrics"), **keys)


def test_monitor_f1_follows_the_validation_metric() -> None:
    task = _task(["f1"], monitor="f1")
    assert task.monitor == "f1" and task.mode == "max"
    assert "f1" in _fed(task.metrics(CPU), *_random()).compute()
