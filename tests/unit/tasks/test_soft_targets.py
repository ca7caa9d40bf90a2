"""Classification on MixUp/CutMix batches: class-probability targets (N, K) in the loss, the batch weight, the
metrics (accuracy against the class with the larger share) and the first-batch check."""

from __future__ import annotations

import pytest
import torch

from lab.errors import UserError
from lab.tasks.classification import Classification, ClassificationMetrics, cross_entropy


def soft_batch(n: int = 6, k: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(n, k, generator=gen)
    labels = torch.arange(n) % k
    lam = torch.rand(n, 1, generator=gen)
    one_hot = torch.nn.functional.one_hot(labels, k).float()
    return logits, lam * one_hot + (1 - lam) * one_hot.roll(1, 0), labels


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_soft_target_loss_is_the_written_formula(smoothing: float, weighted: bool) -> None:
    logits, targets, labels = soft_batch()
    weight = torch.tensor([1.0, 2.0, 0.5, 3.0]) if weighted else None
    w = weight if weight is not None else torch.ones(4)
    smoothed = (1 - smoothing) * targets + smoothing / 4
    manual = -(w * smoothed * logits.log_softmax(1)).sum()
    assert torch.allclose(cross_entropy(logits, targets, weight, smoothing), manual)
    # a one-hot distribution is the index case
    one_hot = torch.nn.functional.one_hot(labels, 4).float()
    assert torch.allclose(
        cross_entropy(logits, one_hot, weight, smoothing), cross_entropy(logits, labels, weight, smoothing)
    )


def test_the_task_trains_on_probabilities_and_weighs_them_like_their_labels() -> None:
    logits, targets, labels = soft_batch()
    task = Classification(4, label_smoothing=0.1)
    assert torch.allclose(task.loss(logits, targets), cross_entropy(logits, targets, None, 0.1))
    assert float(task.weight(targets)) == 6.0  # samples
    task.class_weights = torch.tensor([1.0, 2.0, 0.5, 3.0])
    assert torch.allclose(task.weight(targets), (targets * task.class_weights).sum())
    one_hot = torch.nn.functional.one_hot(labels, 4).float()
    assert torch.allclose(task.weight(one_hot), task.weight(labels))


def test_accuracy_on_probabilities_is_against_the_larger_share() -> None:
    logits, targets, _ = soft_batch()
    soft, hard = ClassificationMetrics(4, torch.device("cpu")), ClassificationMetrics(4, torch.device("cpu"))
    soft.update(logits, targets)
    hard.update(logits, targets.argmax(1))
    scored, expected = soft.compute(), hard.compute()
    assert scored["acc"] == expected["acc"] and scored["acc_top5"] == expected["acc_top5"]
    assert scored["loss"] == pytest.approx(float(cross_entropy(logits, targets)) / 6)


def test_the_first_batch_check_takes_probabilities_and_refuses_what_is_not() -> None:
    task = Classification(4)
    _, targets, _ = soft_batch()
    assert "class probabilities (N, 4)" in task.check_first_batch(None, targets)
    for bad in (targets[:, :3], targets * 2, targets - 0.5, torch.full((6, 4), float("nan"))):
        with pytest.raises(UserError, match=r"class probabilities \(N, 4\).*give integer class labels"):
            task.check_first_batch(None, bad)
    with pytest.raises(UserError, match="one integer class label per sample"):
        task.check_first_batch(None, torch.rand(6))  # regression-like values stay refused
