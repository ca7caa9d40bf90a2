"""lab.tasks: the classification loss and metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from lab.tasks.classification import Classification, ClassificationMetrics

CPU = torch.device("cpu")

LOGITS = [[2.0, 1.0, 0.1], [0.5, 2.5, -1.0]]
TARGETS = [0, 2]


def _cross_entropy_by_hand(logits: list[list[float]], targets: list[int]) -> list[float]:
    """-log softmax(row)[target] per row, with math only."""
    return [math.log(sum(math.exp(v) for v in row)) - row[t] for row, t in zip(logits, targets)]


def test_loss_is_summed_cross_entropy_and_the_weight_counts_samples() -> None:
    task = Classification(num_classes=3)
    expected = sum(_cross_entropy_by_hand(LOGITS, TARGETS))
    loss = task.loss(torch.tensor(LOGITS), torch.tensor(TARGETS))
    assert loss.dtype == torch.float32 and loss.ndim == 0
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # log(e^2 + e^1 + e^0.1) - 2 = 0.4170300, log(e^0.5 + e^2.5 + e^-1) + 1 = 3.6531782
    assert loss.item() == pytest.approx(0.4170300 + 3.6531782, abs=1e-6)
    assert task.weight(torch.tensor(TARGETS)).item() == 2  # the trainer divides by the group's weight


def test_loss_of_half_precision_logits_is_computed_in_fp32() -> None:
    logits = torch.tensor(LOGITS, dtype=torch.bfloat16)
    loss = Classification(num_classes=3).loss(logits, torch.tensor(TARGETS))
    assert loss.dtype == torch.float32
    expected = sum(_cross_entropy_by_hand(logits.float().tolist(), TARGETS))
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_loss_with_label_smoothing() -> None:
    eps, k = 0.1, 3
    # Smoothed target: (1 - eps) on the label + eps / k on every class; loss = -sum(q * log p).
    expected = 0.0
    for row, t in zip(LOGITS, TARGETS):
        log_z = math.log(sum(math.exp(v) for v in row))
        log_p = [v - log_z for v in row]
        expected -= sum(((1 - eps) * (c == t) + eps / k) * log_p[c] for c in range(k))
    loss = Classification(num_classes=k, label_smoothing=eps).loss(torch.tensor(LOGITS), torch.tensor(TARGETS))
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_task_interface() -> None:
    task = Classification(num_classes=10)
    assert task.monitor == "acc" and task.mode == "max" and task.dynamic_dims == (0,)
    assert isinstance(task.metrics(CPU), ClassificationMetrics)


# --------------------------------------------------------------------------- metrics
def _one_hot_ranked(rankings: list[list[int]], num_classes: int) -> torch.Tensor:
    """Logits whose descending order of classes is each row's ranking (first = top-1); unranked classes lowest."""
    logits = torch.full((len(rankings), num_classes), -100.0)
    for i, ranking in enumerate(rankings):
        for position, cls in enumerate(ranking):
            logits[i, cls] = 10.0 - position
    return logits


def test_top1_and_top5_accuracy() -> None:
    rankings = [
        [3, 1, 2, 4, 5, 0],  # target 3: top-1 hit
        [0, 1, 2, 3, 7, 9],  # target 7: 5th place -> top-5 hit only
        [0, 1, 2, 3, 4, 8],  # target 8: 6th place -> miss
        [9, 8, 7, 6, 5, 4],  # target 4: 6th place -> miss
    ]
    targets = torch.tensor([3, 7, 8, 4])
    logits = _one_hot_ranked(rankings, 10)
    metrics = ClassificationMetrics(num_classes=10, device=CPU)
    metrics.update(logits, targets)
    out = metrics.compute()
    assert out["acc"] == pytest.approx(1 / 4)
    assert out["acc_top5"] == pytest.approx(2 / 4)
    expected_loss = sum(_cross_entropy_by_hand(logits.tolist(), targets.tolist())) / 4
    assert out["loss"] == pytest.approx(expected_loss, rel=1e-6)
    assert set(out) == {"loss", "acc", "acc_top5"}


def test_top5_with_fewer_than_five_classes_is_top_k_over_all_classes() -> None:
    logits = torch.tensor([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [3.0, 1.0, 2.0]])
    targets = torch.tensor([2, 1, 1])  # ranked 3rd, 1st, 3rd
    metrics = ClassificationMetrics(num_classes=3, device=CPU)
    metrics.update(logits, targets)
    out = metrics.compute()
    assert out["acc"] == pytest.approx(1 / 3)
    assert out["acc_top5"] == pytest.approx(1.0)  # every class is in the "top 5" of 3 classes; no topk crash


def test_two_classes() -> None:
    metrics = ClassificationMetrics(num_classes=2, device=CPU)
    metrics.update(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([0, 1]))
    assert metrics.compute()["acc"] == pytest.approx(0.5)


def test_no_updates_gives_no_metrics() -> None:
    assert ClassificationMetrics(num_classes=10, device=CPU).compute() == {}


def test_metrics_are_exact_over_uneven_batches_not_a_mean_of_batch_means() -> None:
    # Batch of 4: all top-1 right, confident. Batch of 1: wrong, and unsure.
    big_logits = _one_hot_ranked([[0, 1, 2, 3, 4, 5], [1, 0, 2, 3, 4, 5], [2, 0, 1, 3, 4, 5], [3, 0, 1, 2, 4, 5]], 8)
    big_targets = torch.tensor([0, 1, 2, 3])
    small_logits = torch.tensor([[0.3, 0.2, 0.1, 0.0, -0.1, -0.2, -0.3, 0.25]])
    small_targets = torch.tensor([6])  # ranked 7th of 8: misses top-1 and top-5

    batched = ClassificationMetrics(num_classes=8, device=CPU)
    batched.update(big_logits, big_targets)
    batched.update(small_logits, small_targets)
    whole = ClassificationMetrics(num_classes=8, device=CPU)
    whole.update(torch.cat([big_logits, small_logits]), torch.cat([big_targets, small_targets]))

    out, ref = batched.compute(), whole.compute()
    assert out == pytest.approx(ref, rel=1e-6)  # per-batch loss sums are fp32: equal up to float rounding
    assert out["acc"] == pytest.approx(4 / 5) and out["acc_top5"] == pytest.approx(4 / 5)
    losses = _cross_entropy_by_hand(big_logits.tolist(), big_targets.tolist()) + _cross_entropy_by_hand(
        small_logits.tolist(), small_targets.tolist()
    )
    assert out["loss"] == pytest.approx(sum(losses) / 5, rel=1e-6)
    # The example distinguishes the two: the mean of the two batch means is something else.
    assert out["acc"] != pytest.approx((1.0 + 0.0) / 2)
    assert out["loss"] != pytest.approx((sum(losses[:4]) / 4 + losses[4]) / 2, rel=1e-3)


def test_metrics_accumulate_in_float64_from_half_precision_logits() -> None:
    metrics = ClassificationMetrics(num_classes=3, device=CPU)
    metrics.update(torch.tensor(LOGITS, dtype=torch.float16), torch.tensor(TARGETS))
    assert metrics.totals.dtype == torch.float64
    out = metrics.compute()
    assert out["acc"] == pytest.approx(0.5)
    expected = sum(_cross_entropy_by_hand(torch.tensor(LOGITS, dtype=torch.float16).float().tolist(), TARGETS)) / 2
    assert out["loss"] == pytest.approx(expected, rel=1e-6)
